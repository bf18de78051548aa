"""``rdma_port`` collector: ``ibstat``, ``ibstatus``, ``ibv_devinfo`` and ``rdma link`` port states on real
public outputs (tests/diagnose/fixtures/artifacts, sources in its README), with false-positive guards."""

from __future__ import annotations

from diagnose.collectors import rdma_port
from diagnose.run import diagnose_paths

from conftest import REPO

FIX = REPO / "tests" / "diagnose" / "fixtures" / "artifacts"


def port_findings(name: str):
    return [f for f in diagnose_paths([FIX / name]) if f.kind.startswith("port_")]


def test_ibstat_down_polling_is_port_down_no_link_partner():
    [f] = port_findings("ibstat_cx7_down_polling.txt")
    assert (f.kind, f.location, f.severity) == ("port_down", "mlx5_10/1", "error")
    assert (f.evidence["state"], f.evidence["physical_state"], f.evidence["subkind"]) == ("DOWN", "POLLING",
                                                                                          "no_link_partner")
    assert f.evidence["link_layer"] == "InfiniBand" and f.source.endswith(":9")


def test_ib_port_linkup_but_down_points_at_the_subnet_manager():
    [f] = port_findings("ibstat_ib_down_linkup.txt")
    assert (f.kind, f.location) == ("port_down", "test-sriov-ib-pod/mlx5_7/1")  # host from the shell prompt
    assert f.evidence["subkind"] == "no_subnet_manager" and "subnet manager" in f.explanation


def test_active_roce_ports_with_lid_0_are_healthy_and_a_disabled_port_is_info():
    found = port_findings("ibstat_roce_active_and_disabled.txt")
    assert [(f.kind, f.location, f.severity) for f in found] == [("port_disabled", "mlx5_10/1", "info")]
    table = rdma_port.parse((FIX / "ibstat_roce_active_and_disabled.txt").read_text())
    assert [(s.device, s.state, s.rate, s.link_layer) for s in table.samples[:2]] == [
        ("mlx5_0", "ACTIVE", "200", "Ethernet"), ("mlx5_1", "ACTIVE", "200", "Ethernet")]


def test_repeated_rdma_link_samples_that_change_are_flapping():
    [f] = port_findings("rdma_link_flapping_samples.txt")
    assert (f.kind, f.location, f.severity) == ("port_flapping", "mlx5_7/1", "warning")
    assert f.evidence["samples"] == ["DOWN/POLLING", "DOWN/LINK_UP", "ACTIVE/LINK_UP"]


def test_rdma_link_show_all_active_raises_nothing():
    assert port_findings("rdma_link_show_active.txt") == []
    table = rdma_port.parse((FIX / "rdma_link_show_active.txt").read_text())
    assert [(s.device, s.netdev) for s in table.samples] == [("mlx5_0", "p1p1"), ("mlx5_1", "p1p2")]


def test_ibv_devinfo_port_down_on_both_devices():
    found = port_findings("ibv_devinfo_port_down_two_models.txt")
    assert [(f.kind, f.location) for f in found] == [("port_down", "f51fec68bf55/mlx5_0/1"),
                                                      ("port_down", "f51fec68bf55/mlx5_12/1")]
    assert [f.evidence["link_layer"] for f in found] == ["InfiniBand", "Ethernet"]


def test_ibstatus_form():
    # ibstatus as infiniband-diags prints it (rxe-dev#52 shows the header; fields from the same script)
    text = ("Infiniband device 'mlx4_0' port 1 status:\n\tdefault gid:\t fe80:0000:0000:0000:0002:c903:0010:a0b1\n"
            "\tbase lid:\t 0x3\n\tsm lid:\t\t 0x1\n\tstate:\t\t 2: INIT\n\tphys state:\t 5: LinkUp\n"
            "\trate:\t\t 40 Gb/sec (4X QDR)\n\tlink_layer:\t InfiniBand\n")
    [f] = rdma_port.findings(rdma_port.parse(text))
    assert (f.kind, f.evidence["state"], f.evidence["subkind"]) == ("port_down", "INIT", "no_subnet_manager")
    healthy = text.replace("2: INIT", "4: ACTIVE")
    assert rdma_port.findings(rdma_port.parse(healthy)) == []
