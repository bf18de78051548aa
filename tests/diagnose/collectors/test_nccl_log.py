"""Collectors behind ``fabricscope diagnose``: each whole kind of artifact, its real public outputs
(tests/diagnose/fixtures/artifacts, sources in its README), and a false-positive guard for every rule:
healthy values of the same counters/lines raise nothing above info."""

from __future__ import annotations

import pytest

from diagnose import verbs_status as vs
from diagnose.collectors import (
    dmesg,
    gid_table,
    lspci,
    mlxconfig,
    nccl_log,
    nvidia_smi_query,
    nvidia_topo,
    perftest,
    ucx_log,
)
from diagnose.registry import COLLECTORS
from diagnose.run import diagnose_paths, diagnose_text
from producers.hostping import ethtool, rnic_config

from conftest import REPO

FIX = REPO / "tests" / "diagnose" / "fixtures" / "artifacts"
DOCS = REPO / "docs" / "diagnose.md"


def kinds(text: str) -> list[tuple[str, str, str]]:
    return [(f.kind, f.location, f.severity) for f in diagnose_text(text, "t")]


def problems(text: str) -> list[tuple[str, str]]:
    return [(f.kind, f.location) for f in diagnose_text(text, "t") if f.is_problem]


def fixture(name: str) -> list:
    return diagnose_paths([FIX / name])


# --- the registry -----------------------------------------------------------------------------


def test_every_collector_has_the_protocol_and_a_unique_name():
    names = [c.NAME for c in COLLECTORS]
    assert len(names) == len(set(names)) == 19
    for c in COLLECTORS:
        assert c.READS and callable(c.detect) and callable(c.parse) and callable(c.findings)
        assert c.detect("") is False, c.NAME


def test_docs_list_every_collector():
    text = DOCS.read_text()
    assert all(f"`{c.NAME}`" in text for c in COLLECTORS)


# --- NCCL: completion statuses, async events, setup errors, GPUDirect ---------------------------

LINE = "h1:10:11 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : "


def compl(status: int, vendor: int = 0, peer: str = "10.0.0.9", host: str = "h1") -> str:
    return (
        f"{host}:10:11 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer {peer}<5> "
        f"with status={status} opcode=0 len=0 vendor err {vendor} (Recv) localGid ::ffff:10.0.0.1 "
        "remoteGids::ffff:10.0.0.9\n"
    )


@pytest.mark.parametrize(
    "status,kind",
    [
        (1, "mtu_mismatch"),
        (2, "rdma_completion_error"),
        (4, "rdma_access_error"),
        (8, "rdma_access_error"),
        (9, "mtu_mismatch"),
        (10, "rdma_access_error"),
        (11, "rdma_completion_error"),
        (12, "undetermined"),
        (13, "rnr_retry_exceeded"),
        (19, "rdma_completion_error"),
        (21, "rdma_completion_error"),
    ],
)
def test_every_completion_status_is_named_and_classified(status, kind):
    found = [f for f in nccl_log.findings(nccl_log.parse(compl(status))) if f.is_problem]
    assert [f.kind for f in found] == [kind]
    assert vs.status_name(status) in (found[0].explanation + str(found[0].evidence))


def test_status_names_cover_the_whole_verbs_enum():
    assert [vs.status_name(c) for c in (0, 5, 12, 13, 23)] == [
        "IBV_WC_SUCCESS",
        "IBV_WC_WR_FLUSH_ERR",
        "IBV_WC_RETRY_EXC_ERR",
        "IBV_WC_RNR_RETRY_EXC_ERR",
        "IBV_WC_TM_RNDV_INCOMPLETE",
    ]
    assert len(vs.WC_STATUS) == 24


def test_flushes_are_tied_to_their_primary_error_not_reported_alone():
    text = compl(10, 136) + compl(5, 249) + compl(5, 249)
    found = nccl_log.findings(nccl_log.parse(text))
    assert [(f.kind, f.evidence["secondary_flushes"]) for f in found] == [("rdma_access_error", 2)]
    after_retry = nccl_log.findings(nccl_log.parse(compl(12, 129) + compl(5, 249)))
    assert [(f.kind, f.evidence["secondary_flushes"]) for f in after_retry] == [("undetermined", 1)]


def test_flushes_alone_say_the_primary_error_is_elsewhere():
    found = nccl_log.findings(nccl_log.parse(compl(5, 249)))
    assert [(f.kind, f.location, f.evidence["secondary"]) for f in found] == [("undetermined", "h1<->10.0.0.9", True)]


def test_async_events_catastrophic_is_rnic_and_state_changes_are_nothing():
    bad = nccl_log.findings(nccl_log.parse(LINE + "mlx5_2:1 Got async event : local catastrophic error\n"))
    assert [(f.kind, f.location, f.severity, f.evidence["subkind"]) for f in bad] == [
        ("rnic", "h1/mlx5_2", "critical", "device_fatal")
    ]
    benign = LINE + "Got async event : port active\n" + LINE + "mlx5_0:1 Got async event : GID table change\n"
    assert nccl_log.findings(nccl_log.parse(benign)) == []


@pytest.mark.parametrize(
    "call,errno,kind",
    [
        ("ibv_modify_qp", "No such device", "hca_selection"),
        ("ibv_modify_qp", "Invalid argument", "gid_index"),
        ("ibv_create_qp", "Cannot allocate memory", "rdma_resource_limit"),
    ],
)
def test_verbs_call_failures_are_configuration_named_by_errno(call, errno, kind):
    text = (
        "h1:10:10 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>\n"
        f"h1:10:11 [0] misc/ibvwrap.cc:1 NCCL WARN Call to {call} failed with error {errno}\n"
    )
    found = nccl_log.findings(nccl_log.parse(text))
    assert [(f.kind, f.location, f.cause) for f in found] == [(kind, "h1/mlx5_1", "config")]


def test_no_device_and_unusable_hcas_from_real_logs():
    assert [(f.kind, f.location) for f in fixture("nccl_no_ib_device.txt")] == [
        ("no_rdma_device", "node-01"),
        ("no_rdma_device", "node-03"),
    ]
    found = fixture("nccl_unable_to_open_device.txt")
    assert [(f.kind, f.location, f.severity) for f in found] == [
        ("hca_selection", "pod-0/mlx5_59", "warning"),
        ("hca_selection", "pod-0/mlx5_58", "warning"),
    ]


def test_gdr_channels_healthy_and_the_error_4_of_the_same_real_log():
    found = fixture("nccl_gdrdma_channels_error4.txt")
    assert [(f.kind, f.location, f.cause) for f in found] == [("rdma_access_error", "node-a", "config")]
    assert found[0].evidence["vendor_err"] == 81 and "0x51" in found[0].evidence["vendor_meaning"]


def test_gdr_missing_on_one_node_and_on_one_hca():
    node = (
        "a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n"
        "b:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via NET/IB/0\n"
    )
    assert problems(node) == [("gdr_disabled", "b")]
    hca = (
        "a:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
        "a:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'\n"
    )
    assert problems(hca) == [("gdr_disabled", "a/mlx5_1")]


def test_guard_healthy_nccl_init_log_raises_nothing():
    text = (
        "a:1:1 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0,mlx5_1\n"
        "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>\n"
        "a:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
        "a:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_1'\n"
        "a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n"
        "b:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via NET/IB/1/GDRDMA\n"
    )
    assert [f for f in diagnose_text(text) if f.is_problem] == []


def test_status12_with_ipv4_gids_one_reporter_is_undetermined():
    found = fixture("nccl_status12_ipv4_gids.txt")
    assert [(f.kind, f.location) for f in found] == [("undetermined", "host-t<->10.1.88.182")]
    assert found[0].evidence["vendor_err"] == 129


# --- UCX --------------------------------------------------------------------------------------


def test_ucx_retry_exceeded_one_host_is_undetermined_two_hosts_vote_the_remote():
    one = fixture("ucx_retry_roce_one_host.txt")
    assert [(f.kind, f.location) for f in one] == [
        ("undetermined", "compute001/mlx5_0<->dgid fe80::526b:4bff:fecb:bece")
    ]
    assert one[0].evidence["count"] == 2
    two = fixture("ucx_retry_two_hosts_same_lid.txt")
    assert [(f.kind, f.location, f.evidence["reported_by"]) for f in two] == [
        ("rnic", "lid 19352", ["g07r1n14", "i12r2n04"])
    ]


def test_guard_ucx_gid_table_change_event_is_not_a_problem():
    text = "[h:1:0:1] ib_device.c:475 UCX WARN IB Async event on mlx5_0: GID table change on port 1\n"
    assert ucx_log.detect(text)
    assert ucx_log.findings(ucx_log.parse(text)) == []


# --- GID tables and the cross-artifact rules over them ----------------------------------------


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
    t = gid_table.parse((FIX / "ibv_devinfo_untyped_gids.txt").read_text())
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


def test_nccl_gid_index_on_a_link_local_v1_entry_of_the_same_host():
    gids = (FIX / "show_gids_pod_macvlan.txt").read_text()
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


# --- physical layer ---------------------------------------------------------------------------


def test_fec_corrected_only_is_informational_on_pam4():
    text = (
        "ethtool -S eth3\n     rx_corrected_bits_phy: 81234\n     rx_err_lane_0_phy: 40000\n"
        "     rx_err_lane_1_phy: 41234\n     rx_crc_errors_phy: 0\n     rx_symbol_err_phy: 0\n"
    )
    assert kinds(text) == [("phy_fec_corrected", "eth3", "info")]


def test_one_lane_with_uncorrectable_errors_points_at_that_lane_and_flaps_are_counted():
    text = (
        "ethtool -S eth3\n     rx_crc_errors_phy: 12\n     rx_err_lane_0_phy: 0\n     rx_err_lane_1_phy: 9000\n"
        "     link_down_events_phy: 3\n"
    )
    found = diagnose_text(text)
    assert [(f.kind, f.severity) for f in found] == [("phy_errors", "error"), ("rnic", "warning")]
    assert found[0].evidence["pattern"] == "one_lane"
    assert found[1].evidence == {"subkind": "port_flapping", "link_down_events_phy": 3, "cumulative": True}


def test_guard_zero_phy_counters_raise_nothing():
    text = (
        "ethtool -S eth3\n     rx_crc_errors_phy: 0\n     rx_symbol_err_phy: 0\n     rx_corrected_bits_phy: 0\n"
        "     link_down_events_phy: 0\n"
    )
    assert ethtool.detect(text) and kinds(text) == []


def test_guard_lossy_roce_needs_no_pfc_pause():
    counters = (
        "ethtool -S enp1\n     rx_prio3_bytes: 1000\n     tx_prio3_bytes: 1000\n     rx_prio3_pause: 5\n"
        "/sys/class/infiniband/mlx5_0/ports/1/hw_counters/local_ack_timeout_err:7\n"
    )
    assert [k for k, _, _ in kinds(counters)] == []
    assert [k for k, _, _ in kinds(counters.replace("rx_prio3_pause: 5", "rx_prio3_pause: 0"))] == ["lossy_roce"]


def test_guard_module_plugged_event_is_not_a_transceiver_fault():
    text = "[ 5.0] mlx5_core 0000:81:00.0: port_module:252:(pid 0): Port module event: module 0, Cable plugged\n"
    assert dmesg.detect(text) and kinds(text) == []


# --- dmesg ------------------------------------------------------------------------------------


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


def test_guard_driver_load_banner_alone_is_nothing():
    text = "[1.0] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build\n"
    assert kinds(text) == []


# --- lspci ------------------------------------------------------------------------------------


def test_lspci_names_an_upstream_port_wired_narrower_as_the_limit():
    text = (
        "00:01.0 PCI bridge: Intel Corporation Root Port\n"
        "\tBus: primary=00, secondary=3b, subordinate=3b, sec-latency=0\n"
        "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x2\n"
        "\t\tLnkSta:\tSpeed 32GT/s, Width x2\n"
        "\n"
        "3b:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
        "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x4\n"
        "\t\tLnkSta:\tSpeed 32GT/s, Width x2 (downgraded)\n"
    )
    found = lspci.findings(lspci.parse(text))
    assert [(f.kind, f.location, f.cause, f.evidence["limiting_hop"]) for f in found] == [
        ("pcie_downgrade", "0000:3b:00.0", "config", "0000:00:01.0")
    ]


def test_guard_condensed_lspci_healthy_lines_raise_nothing():
    text = "0000:01:00.0  LnkCap: Speed 32GT/s, Width x4    LnkSta: Speed 32GT/s, Width x4\n"
    assert lspci.detect(text) and kinds(text) == []


# --- new inputs -------------------------------------------------------------------------------

RUN = """\
{cuda}
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 33554432   5000           {bw}              {bw}                 0.000
"""


def test_perftest_gpu_memory_well_below_host_memory_is_gdr_bandwidth():
    text = RUN.format(cuda="initializing CUDA", bw="11000.00") + RUN.format(cuda="", bw="23000.00")
    runs = perftest.parse(text)
    assert [(r.memory, r.bw_average, r.unit) for r in runs] == [("gpu", 11000.0, "MB/sec"), ("host", 23000.0, "MB/sec")]
    found = [f for f in perftest.findings(runs) if f.is_problem]
    assert [(f.kind, f.location, f.evidence["ratio"]) for f in found] == [("gdr_bandwidth", "mlx5_0", 0.478)]


def test_guard_perftest_gpu_close_to_host_and_real_host_only_run():
    text = RUN.format(cuda="initializing CUDA", bw="22000.00") + RUN.format(cuda="", bw="23000.00")
    assert [f for f in diagnose_text(text) if f.is_problem] == []
    real = fixture("perftest_write_bw_host_small.txt")
    assert [(f.kind, f.evidence["bw_average"], f.evidence["msg_bytes"]) for f in real] == [("rdma_bandwidth", 0.17, 8)]


def test_topo_gpu_whose_nearest_nic_is_sys_and_guard_real_pxb_matrix():
    text = (
        "        GPU0    GPU1    NIC0    CPU Affinity\n"
        "GPU0     X      SYS     SYS     0-23\n"
        "GPU1    SYS      X      PIX     24-47\n"
        "NIC0    SYS     PIX      X\n"
        "\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    )
    assert nvidia_topo.detect(text)
    assert problems(text) == [("gpu_nic_locality", "GPU0")]
    assert fixture("topo_dgx_a100_pxb.txt") == []
    assert nvidia_topo.parse((FIX / "topo_dgx_a100_pxb.txt").read_text()).cells["GPU2"]["NIC2"] == "PXB"


QUERY = """\
index, name, pci.bus_id, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, pcie.link.width.max, \
utilization.gpu [%]
0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 4, 4, 16, 16, 97 %
1, NVIDIA A100-SXM4-80GB, 00000000:0B:00.0, 1, 4, 16, 16, 0 %
2, NVIDIA A100-SXM4-80GB, 00000000:48:00.0, 4, 4, 8, 16, 95 %
3, NVIDIA A100-SXM4-80GB, 00000000:4C:00.0, 1, 4, 16, 16, 90 %
"""


def test_nvidia_smi_query_width_down_is_flagged_idle_gen1_is_not_busy_gen1_is_a_fault():
    assert [(k, loc, sev) for k, loc, sev in kinds(QUERY)] == [
        ("pcie_idle_power_saving", "0000:0b:00.0", "info"),
        ("pcie_downgrade", "0000:48:00.0", "warning"),  # confirm with lspci: the board may be x8
        ("pcie_downgrade", "0000:4c:00.0", "error"),
    ]
    rows = nvidia_smi_query.parse(QUERY)
    assert rows[2]["pcie.link.width.current"] == "8" and rows[0]["utilization.gpu"] == "97 %"


def test_mlxconfig_pending_change_and_ats_and_guard_real_query():
    text = (
        "Device:         0000:3b:00.0\n"
        "Configurations:                              Default         Current         Next Boot\n"
        "         SRIOV_EN                            False(0)        False(0)        True(1)\n"
        "         ATS_ENABLED                         False(0)        False(0)        False(0)\n"
    )
    found = mlxconfig.findings(mlxconfig.parse(text))
    assert [(f.kind, f.location, f.severity) for f in found] == [
        ("rnic_config", "0000:3b:00.0", "warning"),
        ("ats_disabled", "0000:3b:00.0", "info"),
    ]
    assert found[0].evidence["pending"] == {"SRIOV_EN": ["False(0)", "True(1)"]}
    assert fixture("mlxconfig_cx6lx_query.txt") == []
    assert len(mlxconfig.parse((FIX / "mlxconfig_cx6lx_query.txt").read_text()).rows) == 7


def test_roce_accl_register_is_wired_in_as_information():
    found = fixture("mlxreg_roce_accl.txt")
    assert [(f.kind, f.severity, f.evidence["slow_start"], f.evidence["tx_window"]) for f in found] == [
        ("rnic_config", "info", True, False)
    ]
    fields = rnic_config.parse((FIX / "mlxreg_roce_accl.txt").read_text())
    assert fields["adp_retx_base_timeout_min"] == 4000


def test_real_pam4_link_with_corrected_bits_only_raises_nothing_above_info():
    found = fixture("ethtool_cx7_pam4_corrected_only.txt")
    assert [(f.kind, f.severity) for f in found] == [("phy_fec_corrected", "info")]
    assert found[0].evidence["corrected"]["rx_corrected_bits_phy"] == 198


def test_real_uncorrectable_symbol_errors_with_one_dominant_lane():
    found = fixture("ethtool_mlx5_lane3_dominant.txt")
    assert [(f.kind, f.severity, f.evidence["pattern"], f.evidence["worst_lane"]) for f in found] == [
        ("phy_errors", "error", "one_lane", 3)
    ]
    assert found[0].evidence["uncorrectable"] == {"rx_pcs_symbol_err_phy": 386}


def test_real_nvidia_smi_idle_l40s_is_power_saving_and_x8_board_is_only_a_warning():
    idle = fixture("nvidia_smi_query_l40s_idle.txt")
    assert [f.location for f in idle] == [f"GPU{i}" for i in range(8)]
    assert {(f.kind, f.severity) for f in idle} == {("pcie_idle_power_saving", "info")}
    board = fixture("nvidia_smi_query_x8_board_loaded.txt")
    assert [(f.kind, f.location, f.severity) for f in board] == [("pcie_downgrade", "GPU at line 2", "warning")]
    assert "lspci" in board[0].evidence["confirm_with"]


def test_nccl_logs_of_several_files_are_judged_as_one_log(tmp_path):
    """Per-host log files of one job: two hosts' error 12 against hx is a vote across files."""
    (tmp_path / "h1.log").write_text(compl(12, 129, peer="hx", host="h1"))
    (tmp_path / "h2.log").write_text(compl(12, 129, peer="hx", host="h2"))
    found = diagnose_paths([tmp_path / "h1.log", tmp_path / "h2.log"])
    assert [(f.kind, f.location, f.evidence["reported_by"]) for f in found] == [("rnic", "hx", ["h1", "h2"])]
    assert found[0].source == f"{tmp_path / 'h1.log'}:1"
    alone = diagnose_paths([tmp_path / "h1.log"])
    assert [(f.kind, f.location) for f in alone] == [("undetermined", "h1<->hx")]


def test_gdr_missing_on_one_node_across_per_host_files(tmp_path):
    (tmp_path / "a.log").write_text("a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n")
    (tmp_path / "b.log").write_text("b:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via NET/IB/0\n")
    found = diagnose_paths([tmp_path / "a.log", tmp_path / "b.log"])
    assert [(f.kind, f.location, f.source) for f in found] == [("gdr_disabled", "b", f"{tmp_path / 'b.log'}:1")]


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


def test_nccl_ib_hca_matching_no_device_is_hca_selection():
    text = (
        "h1:1:1 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_9\n"
        "h1:1:1 [0] NCCL INFO NET/IB : No device found.\n"
    )
    assert problems(text) == [("hca_selection", "h1")]
    assert problems(text.splitlines()[1] + "\n") == [("no_rdma_device", "h1")]


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


def test_error_12_without_a_named_peer_is_still_reported():
    # the line form of older NCCL (as in nccl_gdrdma_channels_error4.txt), with status 12
    text = (
        "n1:1:2 [0] transport/net_ib.cc:818 NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 0, "
        "vendor err 129\n"
    )
    assert problems(text) == [("undetermined", "n1<->(peer not named)")]


def test_reg_mr_bad_address_is_a_memory_registration_config_fault():
    text = "n1:1:2 [0] misc/ibvwrap.cc:1 NCCL WARN Call to ibv_reg_mr failed with error Bad address\n"
    found = [f for f in diagnose_text(text) if f.is_problem]
    assert [(f.kind, f.cause) for f in found] == [("rdma_access_error", "config")]
    assert "nvidia-peermem" in found[0].explanation


def test_guard_a_gid_claimed_by_two_hosts_never_makes_them_one(tmp_path):
    (tmp_path / "w1_ip_a.txt").write_text(IP_A)
    (tmp_path / "w9_ip_a.txt").write_text(IP_A.replace("10.9.0.1", "10.9.0.99"))  # also claims 10.9.0.2
    (tmp_path / "w1_nccl.log").write_text(NCCL_INTRA)
    files = [tmp_path / n for n in ("w1_ip_a.txt", "w9_ip_a.txt", "w1_nccl.log")]
    assert [(f.kind, f.location) for f in diagnose_paths(files)] == [("undetermined", "w1<->10.0.0.5")]


def test_topo_with_rdma_device_columns_of_other_vendors():
    text = (
        "        GPU0    GPU1    bnxt_re0    mlx5_1    CPU Affinity\n"
        "GPU0     X      NV18    NODE        PIX       0-31\n"
        "GPU1    NV18     X      NODE        NODE      0-31\n"
    )
    t = nvidia_topo.parse(text)
    assert t.nics() == ["bnxt_re0", "mlx5_1"]
    assert problems(text) == [("gpu_nic_locality", "GPU1")]


def test_condensed_lspci_with_the_root_port_line_names_it_as_the_limit():
    case16_like = (
        "Observed on host X\n"
        "0002:00:00.0  LnkCap: Speed 32GT/s, Width x2    LnkSta: Speed 32GT/s, Width x2\n"
        "0002:01:00.0  LnkCap: Speed 32GT/s, Width x4    LnkSta: Speed 32GT/s, Width x2 (downgraded)\n"
        "0002:01:00.1  LnkCap: Speed 32GT/s, Width x4    LnkSta: Speed 32GT/s, Width x2 (downgraded)\n"
    )
    found = lspci.findings(lspci.parse(case16_like))
    assert [(f.location, f.cause, f.evidence["limiting_hop"], f.evidence["limiting_hop_inferred"]) for f in found] == [
        ("0002:01:00.0", "config", "0002:00:00.0", True),
        ("0002:01:00.1", "config", "0002:00:00.0", True),
    ]
    # two candidate ports above: nothing is inferred
    two = case16_like.replace(
        "Observed on host X\n",
        "Observed on host X\n0002:00:01.0  LnkCap: Speed 32GT/s, Width x4    LnkSta: Speed 32GT/s, Width x4\n",
    )
    assert {f.evidence["limiting_hop"] for f in lspci.findings(lspci.parse(two))} == {
        "upstream port (not in this capture)"
    }
