"""Hostping agent side: topology discovery (sysfs, hwloc XML), NVML, and the loopback engine."""

from __future__ import annotations

import numpy as np
import pytest

from producers.hostping import loopback, nvml, simhost, sysfs, topology
from producers.hostping.loopback_verbs import VerbsBackend
from producers.hostping.nvml import GpuLink
from schemas.intrahost import figure2_topology
from schemas.records import LOOPBACK_V1

from conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "hostping"
SYSFS = FIXTURES / "sysfs_gpu_behind_switch"


def test_hwloc_xml_topology_and_affinitive_endpoints():
    d = topology.from_hwloc_xml(FIXTURES / "hwloc_2socket.xml")
    t = d.topology
    assert t.host == "gpu-host-7"
    assert t.rnics == ["mlx5_0", "mlx5_1"]  # the Ethernet-only NIC 8a:00.0 is left out
    assert d.bdf == {"gpu0": "0000:03:00.0", "mlx5_0": "0000:04:00.0", "gpu1": "0000:83:00.0", "mlx5_1": "0000:84:00.0"}
    assert t.parent["mlx5_0"] == t.parent["gpu0"] == "sw:0000:01:00.0"
    assert t.affinitive("mlx5_0") == ["gpu0", "mem0"]
    assert t.path("mlx5_0", "gpu0") == ("sw:0000:01:00.0->mlx5_0", "sw:0000:01:00.0->gpu0")  # P2P
    assert "cpu0->cpu1" in t.path("mlx5_0", "gpu1")
    assert t.link_kind("cpu0->sw:0000:01:00.0") == "root_port"


def test_sysfs_topology_rnic_on_its_own_root_port_has_no_affinitive_gpu():
    d = topology.from_sysfs(sysfs.SysfsSnapshot.from_root(SYSFS), host="fixture")
    t = d.topology
    assert (t.rnics, t.nodes("gpu")) == (["mlx5_0"], ["gpu0", "gpu1"])
    assert t.parent == {
        "mem0": "cpu0",
        "mem1": "cpu1",
        "sw:0000:01:00.0": "cpu0",
        "gpu0": "sw:0000:01:00.0",
        "mlx5_0": "cpu0",
        "gpu1": "cpu1",
    }
    assert t.affinitive("mlx5_0") == ["mem0"]


def test_hwloc_error_names_file_and_command(tmp_path):
    bad = tmp_path / "topo.xml"
    bad.write_text("<not-hwloc/>")
    with pytest.raises(ValueError, match=r"topo.xml.*lstopo --of xml"):
        topology.from_hwloc_xml(bad)


def test_nvml_fails_clearly_without_gpu():
    try:
        links = nvml.read_gpu_links()
    except nvml.NvmlUnavailable as e:
        assert "NVML is not usable here" in str(e) or "no GPU" in str(e)
    else:  # on a GPU host the readings must be real links
        assert all(1 <= g.curr_gen <= g.max_gen for g in links)


def test_nvml_rule_busy_gpu_at_gen1_is_a_downgrade_idle_is_not():
    idle = GpuLink(0, "0000:3b:00.0", 1, 4, 16, 16, 0, 0, 0, util_pct=0)
    busy = GpuLink(0, "0000:3b:00.0", 1, 4, 16, 16, 0, 0, 0, util_pct=95)
    assert nvml.assess(idle).kind == "pcie_idle_power_saving"
    assert nvml.assess(busy).kind == "pcie_downgrade"
    assert nvml.assess(GpuLink(0, "x", 4, 4, 16, 16, 0, 0, 0, 50)) is None


def test_loopback_plan_sizes():
    t = figure2_topology()
    assert len(loopback.plan(t, "idle")) == 4 * 10
    busy = loopback.plan(t, "busy")
    assert [x.dst for x in busy if x.rnic == "rnic2"] == ["gpu4", "gpu5", "mem1", "mem0"]
    with pytest.raises(ValueError, match="idle"):
        loopback.plan(t, "sometimes")


def test_loopback_eq2_eq3_recover_sim_host_latency_and_bandwidth():
    t = figure2_topology()
    sim = simhost.SimHost(t, noise=0.0)
    results = loopback.measure(simhost.SimBackend(sim, t_proc_us=1.5), loopback.plan(t, "idle"))
    lat = np.array([r.lat_host_us for r in results]).reshape(4, 10)
    bw = np.array([r.bw_host_gbps for r in results]).reshape(4, 10)
    expected_lat = np.array([[sim.lat_host_us(r, e) for e in sim.endpoints] for r in sim.rnics])
    np.testing.assert_allclose(lat, expected_lat, atol=1e-3)  # T_proc calibrated away
    np.testing.assert_allclose(bw, sim.baseline(), rtol=1e-4)
    rows = loopback.to_rows(results, "agent-1", "h1", "idle", 123)
    assert set(rows[0]) == set(LOOPBACK_V1.names)
    assert rows[0]["latency_ns"] == 1000 and rows[0]["msg_bytes"] == 131072


def test_verbs_backend_fails_clearly_without_rdma_device(tmp_path):
    with pytest.raises(loopback.LoopbackUnavailable, match="no RDMA device"):
        VerbsBackend(tmp_path)
