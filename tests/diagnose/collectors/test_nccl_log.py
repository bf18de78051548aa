"""``nccl_log`` collector: NCCL's completion statuses, async events, verbs call failures, GPUDirect
and setup errors, one log or per-host files judged as one log, on hand-written lines and real public
logs (tests/diagnose/fixtures/artifacts, sources in its README), with false-positive guards."""

from __future__ import annotations

import pytest
from artifact_findings import fixture, problems

from diagnose import verbs_status as vs
from diagnose.collectors import nccl_log
from diagnose.run import diagnose_paths, diagnose_text

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


def test_nccl_error12_voted_by_two_hosts_blames_peer_rnic_one_host_is_undetermined():
    text = (
        "h1:1:2 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer hx<1> with error 12, opcode 2\n"
        "h2:3:4 [1] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer hx<2> with error 12, opcode 2\n"
        "h3:5:6 [1] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer hy<2> with error 12, opcode 2\n"
    )
    got = [(f.kind, f.location) for f in nccl_log.findings(nccl_log.parse(text))]
    assert got == [("rnic", "hx"), ("undetermined", "h3<->hy")]


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


def test_nccl_ib_hca_matching_no_device_is_hca_selection():
    text = (
        "h1:1:1 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_9\n"
        "h1:1:1 [0] NCCL INFO NET/IB : No device found.\n"
    )
    assert problems(text) == [("hca_selection", "h1")]
    assert problems(text.splitlines()[1] + "\n") == [("no_rdma_device", "h1")]


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
