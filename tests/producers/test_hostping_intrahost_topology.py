"""Hostping host topology (producers.hostping.intrahost_topology): built from hwloc XML and from a captured sysfs tree
(tests/fixtures/hostping), the affinitive endpoints and paths of each RNIC, and a clear error on a bad file.
"""

from __future__ import annotations

import pytest

from producers.hostping import intrahost_topology, sysfs

from conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "hostping"
SYSFS = FIXTURES / "sysfs_gpu_behind_switch"


def test_hwloc_xml_topology_and_affinitive_endpoints():
    d = intrahost_topology.from_hwloc_xml(FIXTURES / "hwloc_2socket.xml")
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
    d = intrahost_topology.from_sysfs(sysfs.SysfsSnapshot.from_root(SYSFS), host="fixture")
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
        intrahost_topology.from_hwloc_xml(bad)
