"""``firmware`` collector: ``ethtool -i``, ibstat/ibv_devinfo firmware, mlxfwmanager/mlxup, flint and mlx4/mlx5
kernel lines on real public outputs (tests/diagnose/fixtures/artifacts, sources in its README), with
false-positive guards."""

from __future__ import annotations

from diagnose.collectors import firmware
from diagnose.run import diagnose_paths

from conftest import REPO

FIX = REPO / "tests" / "diagnose" / "fixtures" / "artifacts"
FW_KINDS = ("mixed_firmware", "firmware_too_old", "firmware_update_available")


def fw_findings(name: str):
    return [f for f in diagnose_paths([FIX / name]) if f.kind in FW_KINDS]


def test_two_device_families_on_one_host_are_not_mixed_firmware():
    # ConnectX-7 (28.39.1002, twice) beside a ConnectX-6 Dx (22.31.1014): same version within each family
    assert fw_findings("ibstat_roce_active_and_disabled.txt") == []
    t = firmware.parse((FIX / "ibstat_roce_active_and_disabled.txt").read_text())
    assert [(e.device, e.version, e.model) for e in t.entries] == [
        ("mlx5_0", "28.39.1002", "MT4129"), ("mlx5_1", "28.39.1002", "MT4129"), ("mlx5_10", "22.31.1014", "MT4125")]
    assert fw_findings("ibv_devinfo_port_down_two_models.txt") == []


def test_one_family_on_two_versions_is_mixed_firmware():
    # the ibstat fixture with one ConnectX-7 on an older release (written from the same output)
    text = (FIX / "ibstat_roce_active_and_disabled.txt").read_text().replace("28.39.1002", "28.36.1010", 1)
    [f] = [f for f in firmware.findings(firmware.parse(text)) if f.kind == "mixed_firmware"]
    assert f.location == "mlx5_0,mlx5_1" and f.severity == "warning"
    assert f.evidence["versions"] == {"mlx5_0": "28.36.1010", "mlx5_1": "28.39.1002"}
    assert f.evidence["family"] == "fw 28" and f.evidence["models"] == ["MT4129"]


def test_ethtool_i_reads_version_and_bus_and_raises_nothing():
    assert fw_findings("ethtool_i_mlx5_cx4lx.txt") == []  # 'supports-test: no', empty rom version: harmless
    [e] = firmware.parse((FIX / "ethtool_i_mlx5_cx4lx.txt").read_text()).entries
    assert (e.device, e.version, e.tool) == ("0000:af:00.0", "14.23.1020", "ethtool -i")


def test_mlxup_update_required_is_info_with_both_versions():
    [f] = fw_findings("mlxup_query_update_required.txt")
    assert (f.kind, f.location, f.severity) == ("firmware_update_available", "0002:01:00.0", "info")
    assert (f.evidence["current"], f.evidence["available"], f.evidence["model"]) == ("26.33.1048", "26.43.1014",
                                                                                     "ConnectX6LX")


def test_mlxup_no_matching_image_and_flint_query_raise_nothing():
    assert fw_findings("mlxup_query_no_matching_image.txt") == []
    assert fw_findings("flint_query_cx5.txt") == []
    [e] = firmware.parse((FIX / "flint_query_cx5.txt").read_text()).entries
    assert (e.version, e.model) == ("16.28.2006", "MT_0000000158")


def test_mlx4_asking_for_later_firmware_is_too_old_and_the_working_node_is_not():
    [f] = fw_findings("dmesg_mlx4_upgrade_fw_lso.txt")
    assert (f.kind, f.location, f.severity) == ("firmware_too_old", "0000:0d:00.0", "warning")
    assert "LSO not supported" in f.evidence["message"]
    assert fw_findings("dmesg_mlx4_working_node.txt") == []


def test_dmesg_firmware_version_lines_count_once_per_function():
    t = firmware.parse((FIX / "dmesg_mlx5_probe_failed.txt").read_text())
    assert [(e.device, e.version) for e in t.entries] == [("0000:01:00.0", "14.32.1010")]
    assert firmware.findings(t) == []


def test_mixed_firmware_across_files_of_one_bundle(tmp_path):
    # ethtool -i of two ports in their own files (as a log directory holds them), one on an older release
    node = tmp_path / "node"
    node.mkdir()
    a = (FIX / "ethtool_i_mlx5_cx4lx.txt").read_text()
    (node / "ethtool_i_p3p1.txt").write_text(a)
    (node / "ethtool_i_p3p2.txt").write_text(a.replace("14.23.1020", "14.21.2010").replace("0000:af:00.0",
                                                                                         "0000:af:00.1"))
    [f] = [f for f in diagnose_paths([node]) if f.kind == "mixed_firmware"]
    assert f.location == "0000:af:00.0,0000:af:00.1"
    assert f.evidence["versions"] == {"0000:af:00.0": "14.23.1020", "0000:af:00.1": "14.21.2010"}
    assert f.source == f"{node / 'ethtool_i_p3p1.txt'}:4"  # its firmware-version line
    # the same two files of one version: nothing
    (node / "ethtool_i_p3p2.txt").write_text(a.replace("0000:af:00.0", "0000:af:00.1"))
    assert [f for f in diagnose_paths([node]) if f.kind == "mixed_firmware"] == []
