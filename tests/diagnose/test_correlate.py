"""The cross-artifact stage behind ``fabricscope diagnose`` (:mod:`diagnose.correlate`): rules that need
two artifacts given together, a GID table and an NCCL log of one host, ``ip a`` of both ends and an NCCL
error, ``ethtool -S`` and the RDMA ``hw_counters``, with guards where one artifact alone must not decide."""

from __future__ import annotations

from artifact_findings import ARTIFACTS, kinds

from diagnose.run import diagnose_paths, diagnose_text


def test_nccl_gid_index_on_a_link_local_v1_entry_of_the_same_host():
    gids = (ARTIFACTS / "show_gids_pod_macvlan.txt").read_text()
    bad = "pod:1:1 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 4.\n"
    found = [f for f in diagnose_text(gids + bad.replace("4.", "4")) if f.is_problem]
    assert [(f.kind, f.location, f.evidence["suggested_index"]) for f in found] == [
        ("gid_index", "pod/mlx5_0/port1", 7),
        ("gid_index", "pod/mlx5_1/port1", 7),
    ]
    good = "pod:1:1 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 7\n"
    assert [f for f in diagnose_text(gids + good) if f.is_problem] == []


IP_A = """\
5: net1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 4200 qdisc mq state UP group default qlen 1000
    link/ether 02:00:00:00:00:01 brd ff:ff:ff:ff:ff:ff
    inet 10.9.0.1/24 scope global net1
6: net2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 4200 qdisc mq state UP group default qlen 1000
    link/ether 02:00:00:00:00:02 brd ff:ff:ff:ff:ff:ff
    inet 10.9.0.2/24 scope global net2
"""


NCCL_INTRA = (
    "w1:7:8 [0] ib_plugin.c:1 NCCL WARN NET/IB : Got completion from peer 10.0.0.5<7> with status=12 opcode=0 "
    "len=0 vendor err 129 (Recv) localGid ::ffff:10.9.0.1 remoteGids::ffff:10.9.0.2\n"
)


def test_intra_host_rule_across_two_files_given_together(tmp_path):
    (tmp_path / "w1_ip_a.txt").write_text(IP_A)
    (tmp_path / "w1_nccl.log").write_text(NCCL_INTRA)
    found = diagnose_paths([tmp_path / "w1_ip_a.txt", tmp_path / "w1_nccl.log"])
    assert [(f.kind, f.location) for f in found] == [("intra_host_path", "w1:::ffff:10.9.0.1<->::ffff:10.9.0.2")]
    assert (found[0].evidence["local_netdev"], found[0].evidence["remote_netdev"]) == ("net1", "net2")


def test_guard_remote_gid_on_another_hosts_file_is_not_intra_host(tmp_path):
    (tmp_path / "w1_ip_a.txt").write_text(IP_A.replace("10.9.0.2", "10.9.0.7"))
    (tmp_path / "w2_ip_a.txt").write_text(IP_A.replace("10.9.0.1", "10.9.0.8"))
    (tmp_path / "w1_nccl.log").write_text(NCCL_INTRA)
    files = [tmp_path / n for n in ("w1_ip_a.txt", "w2_ip_a.txt", "w1_nccl.log")]
    assert [(f.kind, f.location) for f in diagnose_paths(files)] == [("undetermined", "w1<->10.0.0.5")]


def test_guard_a_gid_claimed_by_two_hosts_never_makes_them_one(tmp_path):
    (tmp_path / "w1_ip_a.txt").write_text(IP_A)
    (tmp_path / "w9_ip_a.txt").write_text(IP_A.replace("10.9.0.1", "10.9.0.99"))  # also claims 10.9.0.2
    (tmp_path / "w1_nccl.log").write_text(NCCL_INTRA)
    files = [tmp_path / n for n in ("w1_ip_a.txt", "w9_ip_a.txt", "w1_nccl.log")]
    assert [(f.kind, f.location) for f in diagnose_paths(files)] == [("undetermined", "w1<->10.0.0.5")]


CASE18_LIKE = (
    "host-a:1:2 [0] transport/net_ib.cc:100 NCCL WARN NET/IB : mlx5_0:1 Got async event : local access violation "
    "work queue error\n"
    "host-a:1:3 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<57888> with "
    "status=5 opcode=1 len=0 vendor err 249 (Recv) localGid fd00::1 remoteGidsfd00::2\n"
)


def ip_a(addr: str, mtu: int) -> str:
    return (
        f"4: ens1f0np0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu {mtu} qdisc mq state UP group default qlen 1000\n"
        f"    link/ether 02:00:00:00:00:0a brd ff:ff:ff:ff:ff:ff\n    inet6 {addr}/64 scope global\n"
    )


def test_mtu_mismatch_confirmed_with_both_ends_mtus(tmp_path):
    (tmp_path / "a.log").write_text(CASE18_LIKE)
    (tmp_path / "a_ip.txt").write_text(ip_a("fd00::1", 9000))
    (tmp_path / "b_ip.txt").write_text(ip_a("fd00::2", 1500))
    found = diagnose_paths([tmp_path / "a.log", tmp_path / "a_ip.txt", tmp_path / "b_ip.txt"])
    assert [(f.kind, f.location, f.evidence["probable"]) for f in found] == [
        ("mtu_mismatch", "host-a/mlx5_0<->10.0.0.2", False)
    ]
    assert sorted(found[0].evidence["mtus"].values()) == [1500, 9000]
    assert found[0].explanation.startswith("Confirmed from both ends")


def test_guard_equal_mtus_keep_mtu_mismatch_probable_and_say_so(tmp_path):
    (tmp_path / "a.log").write_text(CASE18_LIKE)
    (tmp_path / "a_ip.txt").write_text(ip_a("fd00::1", 9000))
    (tmp_path / "b_ip.txt").write_text(ip_a("fd00::2", 9000))
    found = diagnose_paths([tmp_path / "a.log", tmp_path / "a_ip.txt", tmp_path / "b_ip.txt"])
    assert [(f.kind, f.evidence["probable"]) for f in found] == [("mtu_mismatch", True)]
    assert "the MTU matches" in found[0].explanation


def test_guard_lossy_roce_needs_no_pfc_pause():
    counters = (
        "ethtool -S enp1\n     rx_prio3_bytes: 1000\n     tx_prio3_bytes: 1000\n     rx_prio3_pause: 5\n"
        "/sys/class/infiniband/mlx5_0/ports/1/hw_counters/local_ack_timeout_err:7\n"
    )
    assert [k for k, _, _ in kinds(counters)] == []
    assert [k for k, _, _ in kinds(counters.replace("rx_prio3_pause: 5", "rx_prio3_pause: 0"))] == ["lossy_roce"]
