"""``ucx_log`` collector: UCX retry-exceeded errors voted across hosts, on real public logs
(tests/diagnose/fixtures/artifacts, sources in its README), with a false-positive guard."""

from __future__ import annotations

from artifact_findings import fixture

from diagnose.collectors import ucx_log


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
