"""``sysfs_capture`` collector: a sysfs root or a text capture of it (PCIe links along the path, AER
counters, RDMA port counters), on the captured tree of a GPU behind a PCIe switch
(tests/fixtures/hostping), with a false-positive guard."""

from __future__ import annotations

from diagnose.run import diagnose_paths
from producers.hostping import hw_counters, sysfs, sysfs_pcie

from conftest import REPO

SYSFS = REPO / "tests" / "fixtures" / "hostping" / "sysfs_gpu_behind_switch"


def test_sysfs_walk_effective_link_of_gpu_is_upstream_port():
    hops = sysfs_pcie.read_hops(sysfs.SysfsSnapshot.from_root(SYSFS))
    assert hops["0000:03:00.0"].chain == ("0000:00:01.1", "0000:01:00.0", "0000:02:00.0")
    eff = sysfs_pcie.effective_link(hops, "0000:03:00.0")
    # nearest narrowest hop wins: the switch upstream port, not the root port reading the same link
    assert (eff.at, eff.speed_gtps, eff.width, eff.gbps) == ("0000:01:00.0", 16.0, 8, 126.0)


def test_sysfs_root_findings_one_per_link():
    found = diagnose_paths([SYSFS])
    got = sorted((f.kind, f.location, f.severity) for f in found)
    assert got == [
        ("pcie_downgrade", "0000:01:00.0", "error"),  # root port 00:01.1 reads the same link: reported once
        ("pcie_idle_power_saving", "0000:81:00.0", "info"),
        ("pcie_link_errors", "0000:03:00.0", "warning"),  # aer_dev_correctable: Timeout 7, BadTLP 2
        ("rnic", "mlx5_0/port1", "warning"),  # link_downed=3
    ]
    aer = next(f for f in found if f.kind == "pcie_link_errors")
    assert aer.evidence["aer"]["aer_dev_correctable"] == {"BadTLP": 2, "Timeout": 7}
    down = next(f for f in found if f.kind == "pcie_downgrade")
    assert down.evidence["limits_endpoints"] == ["0000:02:00.0", "0000:03:00.0"]
    assert down.evidence["link"] == "0000:00:01.1->0000:01:00.0"


def test_sysfs_port_above_a_less_capable_device_is_not_a_downgrade():
    rp = "/sys/devices/pci0000:00/0000:00:01.1"
    nic = rp + "/0000:3b:00.0"
    text = "\n".join(
        [
            f"{rp}/current_link_speed:8.0 GT/s PCIe",
            f"{rp}/current_link_width:8",
            f"{rp}/max_link_speed:16.0 GT/s PCIe",
            f"{rp}/max_link_width:16",
            f"{nic}/current_link_speed:8.0 GT/s PCIe",
            f"{nic}/current_link_width:8",
            f"{nic}/max_link_speed:8.0 GT/s PCIe",
            f"{nic}/max_link_width:8",
        ]
    )
    assert sysfs_pcie.findings(sysfs.SysfsSnapshot.from_text(text)) == []
    worse = text.replace(f"{nic}/current_link_width:8", f"{nic}/current_link_width:4").replace(
        f"{rp}/current_link_width:8", f"{rp}/current_link_width:4"
    )
    got = [(f.location, f.evidence["link"]) for f in sysfs_pcie.findings(sysfs.SysfsSnapshot.from_text(worse))]
    assert got == [("0000:3b:00.0", "0000:00:01.1->0000:3b:00.0")]


def test_hw_counter_deltas_survive_a_reset():
    assert hw_counters.deltas({"a": 10, "b": 50}, {"a": 15, "b": 3, "c": 1}) == {"a": 5, "b": 3, "c": 1}
