"""The links a claim may hide (streams.pingmesh.verify): counted by hand on a few failing groups."""

from __future__ import annotations

import pyarrow as pa

from streams.pingmesh.verify import claims_crossed, co_crossed, failing_paths


def _failing(rows):
    return pa.table({"fwd_hops": [r[0] for r in rows], "rev_hops": [r[1] for r in rows],
                     "n": pa.array([r[2] for r in rows], pa.int64())})


def test_a_claims_links_are_the_switch_links_its_failing_groups_crossed_most_first():
    f = _failing([
        ("B7,B,S2,A,A8", "A8,A,S1,B,B7", 149),   # out over B-S2, back over A-S1
        ("B1,B,S2,C,C1", "C1,C,S4,B,B1", 120),
        ("B2,B,S2,C,C2", "C2,C,S1,B,B2", 30),
        ("D1,D,S3,A,A1", "A1,A,S3,D,D1", 50),    # crosses no claim
        ("B3,B,S2,*", "", 9),                    # a trace that stopped: its pseudo-link is no link
    ])
    got = co_crossed(f, ["B->S2"], exclude=["C->S2"])
    # over B-S2's groups: B-S1 149 + 30, A-S1 and A-S2 149, B-S4 and C-S4 120, C-S1 30 (ties by name);
    # C->S2 (150) is excluded (say, tied), access links are the RNICs'
    assert got == {"B->S2": ["B->S1", "A->S1", "A->S2", "B->S4", "C->S4", "C->S1"]}
    assert co_crossed(f, ["B->S2"], k=2) == {"B->S2": ["B->S1", "C->S2"]}  # 179 and 150
    assert co_crossed(f, ["X->S9"]) == {"X->S9": []}
    assert co_crossed(f.slice(0, 0), ["B->S2"]) == {"B->S2": []}


def test_a_verdicts_failing_paths_are_its_links_failing_groups_most_failures_first():
    f = _failing([
        ("B1,B,S2,C,C1", "C1,C,S4,B,B1", 120),
        ("B7,B,S2,A,A8", "A8,A,S1,B,B7", 149),
        ("D1,D,S3,A,A1", "A1,A,S3,D,D1", 50),    # crosses no B-S2
        ("C2,C,S3,B,B2", "B2,B,S2,C,C2", 30),    # back over B-S2 (the ACK's path)
        ("B3,B,*", "", 9),                       # stopped after B: B's uplinks are candidates, B-S2 not named
    ])
    got = failing_paths(f, ["B->S2", "A->S3", "X->S9"], k=3)
    assert got["B->S2"] == [{"fwd": "B7,B,S2,A,A8", "rev": "A8,A,S1,B,B7", "failed": 149},
                            {"fwd": "B1,B,S2,C,C1", "rev": "C1,C,S4,B,B1", "failed": 120},
                            {"fwd": "C2,C,S3,B,B2", "rev": "B2,B,S2,C,C2", "failed": 30}]
    assert got["A->S3"] == [{"fwd": "D1,D,S3,A,A1", "rev": "A1,A,S3,D,D1", "failed": 50}]
    assert got["X->S9"] == []
    assert [p["failed"] for p in failing_paths(f, ["B->S2", "B->*"])["B->*"]] == [9]
    assert failing_paths(f.slice(0, 0), ["B->S2"]) == {"B->S2": []}


def test_a_claims_fellow_claims_are_those_its_failing_groups_crossed_most_shared_first():
    f = _failing([
        ("B1,B,S3,A,A1", "A1,A,S2,B,B1", 75),    # dead A-S3 (way in) and lossy B-S3 (way out of B)
        ("B2,B,S3,A,A2", "A2,A,S1,B,B2", 70),
        ("B3,B,S3,C,C1", "C1,C,S4,B,B3", 6),     # lossy B-S3 alone
        ("C2,C,S2,A,A3", "A3,A,S3,C,C2", 80),    # dead A-S3 (way back) and C-S2
        ("D1,D,S1,A,A4", "A4,A,S1,D,D1", 4),     # crosses no claim
    ])
    got = claims_crossed(f, ["B->S3", "A->S3", "C->S2", "D->S1"])
    # B-S3's groups: A-S3 75 + 70, none through C-S2; A-S3's: B-S3 145, C-S2 80; D-S1's group: no other claim
    assert got == {"B->S3": ["A->S3"], "A->S3": ["B->S3", "C->S2"], "C->S2": ["A->S3"], "D->S1": []}
    assert claims_crossed(f, ["B->S3"]) == {"B->S3": []}  # alone: nothing to share
    assert claims_crossed(f, ["B->S3", "X->S9"]) == {"B->S3": [], "X->S9": []}
    assert claims_crossed(f.slice(0, 0), ["B->S3", "A->S3"]) == {"B->S3": [], "A->S3": []}
