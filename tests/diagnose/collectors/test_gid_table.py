"""``gid_table`` collector: ``show_gids``, ``ibv_devinfo -v`` and sysfs GID tables (text captures and a
sysfs root), on real public outputs (tests/diagnose/fixtures/artifacts, sources in its README), with
false-positive guards."""

from __future__ import annotations

from artifact_findings import ARTIFACTS, fixture, kinds

from diagnose.collectors import gid_table
from diagnose.run import diagnose_paths, diagnose_text


def test_show_gids_names_the_routable_roce_v2_index():
    found = fixture("show_gids_pod_macvlan.txt")
    assert [(f.kind, f.location, f.evidence["roce_v2_index"]) for f in found] == [
        ("roce_v2_gid", "mlx5_0/port1", 7),
        ("roce_v2_gid", "mlx5_1/port1", 7),
    ]
    assert not any(f.is_problem for f in found)


def test_show_gids_port_with_only_link_local_gids_is_a_config_warning():
    found = fixture("show_gids_mi355_linklocal_only.txt")
    assert [(f.kind, f.location, f.severity) for f in found] == [
        ("roce_v2_gid", "rocep105s0/port1", "info"),
        ("roce_v2_gid", "rocep121s0/port1", "info"),
        ("gid_index", "rocep193s0f0/port1", "warning"),
    ]
    assert found[0].evidence["roce_v2_index"] == 1


def test_guard_untyped_ibv_devinfo_gids_raise_nothing_but_parse():
    t = gid_table.parse((ARTIFACTS / "ibv_devinfo_untyped_gids.txt").read_text())
    assert [(e.device, e.port, e.index, e.gid) for e in t.entries] == [
        ("mlx5_0", 1, 14, "::ffff:c0a8:606"),
        ("mlx5_0", 1, 15, "::ffff:c0a8:606"),
    ]
    assert t.active_mtu == {("mlx5_0", 1): 4096}
    assert fixture("ibv_devinfo_untyped_gids.txt") == []


def test_sysfs_gids_with_types():
    base = "/sys/class/infiniband/mlx5_0/ports/1"
    text = "\n".join(
        [
            f"{base}/gids/0:fe80:0000:0000:0000:0e42:a1ff:fe00:0001",
            f"{base}/gids/1:fe80:0000:0000:0000:0e42:a1ff:fe00:0001",
            f"{base}/gids/3:0000:0000:0000:0000:0000:ffff:0a00:0001",
            f"{base}/gid_attrs/types/0:IB/RoCE v1",
            f"{base}/gid_attrs/types/1:RoCE v2",
            f"{base}/gid_attrs/types/3:RoCE v2",
            f"{base}/gid_attrs/ndevs/3:eth2",
        ]
    )
    assert kinds(text) == [("roce_v2_gid", "mlx5_0/port1", "info")]
    assert diagnose_text(text)[0].evidence["roce_v2_index"] == 3


def test_ibv_devinfo_typed_gids_and_rdma_link_netdevs():
    # newer rdma-core ibv_devinfo -v prints the type after the GID ("GID[  3]: <gid>, RoCE v2")
    text = (
        "hca_id:\tmlx5_2\n\t\tport:\t1\n\t\t\tactive_mtu:\t\t1024 (3)\n\t\t\tlink_layer:\t\tEthernet\n"
        "\t\t\tGID[  0]:\t\tfe80::a288:c2ff:fe0e:10a4, RoCE v1\n"
        "\t\t\tGID[  1]:\t\tfe80::a288:c2ff:fe0e:10a4, RoCE v2\n"
        "\t\t\tGID[  2]:\t\t::ffff:10.0.21.3, RoCE v1\n"
        "\t\t\tGID[  3]:\t\t::ffff:10.0.21.3, RoCE v2\n"
        "link mlx5_2/1 state ACTIVE physical_state LINK_UP netdev ens2f0\n"
    )
    t = gid_table.parse(text)
    assert [(e.index, e.gid_type, e.routable) for e in t.entries] == [
        (0, "RoCE v1", False),
        (1, "RoCE v2", False),
        (2, "RoCE v1", True),
        (3, "RoCE v2", True),
    ]
    assert t.netdevs == {("mlx5_2", 1): "ens2f0"} and t.active_mtu == {("mlx5_2", 1): 1024}
    assert [(f.kind, f.evidence["roce_v2_index"]) for f in gid_table.findings(t)] == [("roce_v2_gid", 3)]


def test_sysfs_root_directory_gid_table(tmp_path):
    port = tmp_path / "class" / "infiniband" / "mlx5_1" / "ports" / "1"
    (port / "gids").mkdir(parents=True)
    (port / "gid_attrs" / "types").mkdir(parents=True)
    for i, gid, gtype in [
        (0, "fe80:0000:0000:0000:0e42:a1ff:fe00:0002", "IB/RoCE v1"),
        (1, "fe80:0000:0000:0000:0e42:a1ff:fe00:0002", "RoCE v2"),
        (2, "0000:0000:0000:0000:0000:ffff:0a00:0002", "IB/RoCE v1"),
        (3, "0000:0000:0000:0000:0000:ffff:0a00:0002", "RoCE v2"),
    ]:
        (port / "gids" / str(i)).write_text(gid + "\n")
        (port / "gid_attrs" / "types" / str(i)).write_text(gtype + "\n")
    (port / "gids" / "4").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")  # unused slot, no type
    found = diagnose_paths([tmp_path])
    assert [(f.kind, f.location, f.evidence["roce_v2_index"]) for f in found] == [("roce_v2_gid", "mlx5_1/port1", 3)]
