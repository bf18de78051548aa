"""``dmesg`` collector: GPU Xids, PCIe AER, mlx5 health and command timeouts, link flaps and probe
failures, on hand-written lines and real public logs (tests/diagnose/fixtures/artifacts, sources in its
README), with false-positive guards."""

from __future__ import annotations

import pytest
from artifact_findings import fixture, kinds

from diagnose.collectors import dmesg
from diagnose.run import diagnose_text


def test_xid_kin_hardware_vs_application():
    text = (
        "[1.0] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (double bit error) ECC error\n"
        "[2.0] NVRM: Xid (PCI:0000:5e:00): 13, pid=2, Graphics Exception\n"
        "[3.0] NVRM: Xid (PCI:0000:86:00): 95, pid=3, Uncontained ECC error\n"
    )
    assert kinds(text) == [
        ("gpu_hardware", "0000:3b:00.0", "critical"),
        ("gpu_application_error", "0000:5e:00.0", "info"),
        ("gpu_hardware", "0000:86:00.0", "critical"),
    ]


def test_aer_lists_devices_below_the_port_as_affected():
    text = (
        "[20.0] pcieport 0000:c0:03.1: AER: Uncorrected (Non-Fatal) error received: 0000:c1:00.0\n"
        "[20.1] pcieport 0000:c0:03.1: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer\n"
        "[20.2] pcieport 0000:c0:03.1:    [14] CmpltTO\n"
        "[20.3] pcieport 0000:c0:03.1: broadcast error_detected message\n"
        "[20.4] mlx5_core 0000:c1:00.1: device has no AER-aware driver\n"
    )
    f = diagnose_text(text)[0]
    assert (f.kind, f.location, f.severity) == ("pcie_link_failure", "0000:c0:03.1", "error")
    assert f.evidence["affected"] == ["0000:c1:00.0", "0000:c1:00.1"]


def test_dmesg_corrected_only_is_a_warning_and_fatal_without_xid_is_a_failure():
    text = (
        "[ 10.0] pcieport 0000:40:01.1: AER: Corrected error received: 0000:41:00.0\n"
        "[ 10.1] pcieport 0000:40:01.1: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n"
        "[ 10.2] pcieport 0000:40:01.1:    [ 0] RxErr\n"
        "[ 20.0] pcieport 0000:c0:03.1: AER: Uncorrected (Fatal) error received: 0000:c1:00.0\n"
        "[ 20.1] pcieport 0000:c0:03.1: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer\n"
        "[ 20.2] pcieport 0000:c0:03.1:    [ 5] Surprise Down Error    (First)\n"
    )
    got = sorted((f.kind, f.location, f.severity) for f in dmesg.findings(dmesg.parse(text)))
    assert got == [("pcie_link_errors", "0000:40:01.1", "warning"), ("pcie_link_failure", "0000:c0:03.1", "critical")]


def test_mlx5_health_and_command_timeout():
    health = "[9.0] mlx5_core 0000:3b:00.0: poll_health:800:(pid 0): device's health compromised - reached miss count\n"
    assert kinds(health) == [("rnic", "0000:3b:00.0", "critical")]
    cmd = (
        "[9.0] mlx5_core 0000:3b:00.0: wait_func:1100:(pid 5): 2ERR_QP(0x507) timeout. Will cause a leak of a "
        "command resource\n"
    )
    found = diagnose_text(cmd)
    assert [(f.kind, f.evidence["subkind"]) for f in found] == [("rnic", "command_timeout")]


def test_link_flaps_from_real_logs_and_guard_single_link_up():
    assert [(f.kind, f.location, f.evidence["downs"]) for f in fixture("dmesg_mlx5_link_flaps.txt")] == [
        ("rnic", "eth1 (0000:01:00.1)", 3)
    ]
    assert [(f.location, f.evidence["subkind"]) for f in fixture("dmesg_igb_link_down.txt")] == [
        ("eth0 (0000:00:14.0)", "link_down")
    ]
    assert kinds("[1.0] mlx5_core 0000:01:00.1 eth1: Link up\n") == []


@pytest.mark.parametrize(
    "line",
    [
        "[5.0] NVRM: Xid (PCI:0000:b3:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "[5.0] NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus.",
    ],
)
def test_every_gpu_lost_form_is_a_critical_link_failure(line):
    assert kinds(line + "\n") == [("gpu_pcie_link_failure", "0000:b3:00.0", "critical")]


def test_real_mlx5_probe_failure_is_one_rnic_init_finding_and_guard_firmware_banner():
    found = fixture("dmesg_mlx5_probe_failed.txt")
    assert [(f.kind, f.location, f.severity, f.evidence["subkind"]) for f in found] == [
        ("rnic", "0000:01:00.0", "error", "init_failed")
    ]
    assert len(found[0].evidence["lines"]) == 3
    healthy = (
        "[5.3] mlx5_core 0000:01:00.0: firmware version: 14.32.1010\n"
        "[5.9] mlx5_core 0000:01:00.0: Port module event: module 0, Cable plugged\n"
        "[6.1] mlx5_core 0000:01:00.0 ens1f0np0: Link up\n"
    )
    assert kinds(healthy) == []


def test_guard_driver_load_banner_alone_is_nothing():
    text = "[1.0] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build\n"
    assert kinds(text) == []


def test_guard_module_plugged_event_is_not_a_transceiver_fault():
    text = "[ 5.0] mlx5_core 0000:81:00.0: port_module:252:(pid 0): Port module event: module 0, Cable plugged\n"
    assert dmesg.detect(text) and kinds(text) == []
