"""A window partial computed on integer codes, checked against counts worked out by hand.

Six probes over three 5-tuples of a small Clos (A1 under ToR A, B2 under B, C1 under C, D1 untraced):
the ACK path of A1->B2 is traced with the probe's ports (the simulator's convention), that of A1->C1
with the ports swapped (a plain UDP reply), A1->D1 not at all.
"""

from __future__ import annotations

import pyarrow as pa

from schemas.group_codes import factorize
from streams.pingmesh.partial import summarize
from streams.pingmesh.path_index import HOUR_NS, PathIndex

WS = 1_800_000_000 * 10**9  # window start (20 s aligned)
S = 10**9
AB_FWD, AB_REV = "A1,A,S1,B,B2", "B2,B,S2,A,A1"
AC_FWD, AC_REV = "A1,A,S1,C,C1", "C1,C,S1,A,A1"
IP = {"A1": "10.0.0.1", "B2": "10.0.1.2", "C1": "10.0.2.1", "D1": "10.0.3.1"}
HOST = {"A1": "hA", "B2": "hB", "C1": "hC", "D1": "hD"}


def _paths(rows: list[tuple[str, str, str, int, int, str]], trace_ns: int = WS) -> pa.Table:
    cols = list(zip(*rows, strict=True))
    return pa.table({"direction": pa.array(cols[0]), "src_ip": pa.array([IP[x] for x in cols[1]]),
                     "dst_ip": pa.array([IP[x] for x in cols[2]]), "src_port": pa.array(cols[3], pa.uint16()),
                     "dst_port": pa.array(cols[4], pa.uint16()), "hops": pa.array(cols[5]),
                     "trace_ns": pa.array([trace_ns] * len(rows), pa.int64())})


INDEX_ROWS = [("forward", "A1", "B2", 5000, 4791, AB_FWD), ("reverse", "B2", "A1", 5000, 4791, AB_REV),
              ("forward", "A1", "C1", 5001, 4791, AC_FWD), ("reverse", "C1", "A1", 4791, 5001, AC_REV)]

# (pinglist, responder, src_port, qpn, status, t1 offset s, rtt, responder delay, prober delay, job)
PROBES = [
    ("tor_mesh", "B2", 5000, 7, "ok", 1, 1000, 500, 2000, None),
    ("tor_mesh", "B2", 5000, 7, "ok", 6, 1000, 600, 2000, None),
    ("tor_mesh", "B2", 5000, 7, "timeout", 7, None, None, None, None),
    ("tor_mesh", "C1", 5001, 8, "ok", 2, 4000, None, None, None),
    ("tor_mesh", "D1", 5002, 9, "timeout", 16, None, None, None, None),
    ("service", "C1", 5001, 8, "ok", 3, 4000, None, None, "job1"),
]


def _probes(rows: list[tuple] = PROBES) -> pa.Table:
    c = list(zip(*rows, strict=True))
    n = len(rows)
    return pa.table({
        "pinglist": pa.array(c[0]), "prober_host": ["hA"] * n, "prober_rnic": ["A1"] * n,
        "responder_host": [HOST[x] for x in c[1]], "responder_rnic": pa.array(c[1]),
        "src_ip": [IP["A1"]] * n, "dst_ip": [IP[x] for x in c[1]],
        "src_port": pa.array(c[2], pa.uint16()), "dst_port": pa.array([4791] * n, pa.uint16()),
        "qpn": pa.array(c[3], pa.uint32()), "job_id": pa.array(c[9], pa.string()), "status": pa.array(c[4]),
        "t1": pa.array([WS + s * S for s in c[5]], pa.int64()), "upload_ns": pa.array([WS + 20 * S] * n, pa.int64()),
        "network_rtt_ns": pa.array(c[6], pa.int64()), "responder_delay_ns": pa.array(c[7], pa.int64()),
        "prober_delay_ns": pa.array(c[8], pa.int64()), "ts_source": ["hardware"] * n,
    })


def test_summarize_counts_links_and_histograms_as_worked_out_by_hand():
    p = summarize(WS, _probes(), PathIndex(_paths(INDEX_ROWS)))

    assert p.pairs.to_pylist() == [
        {"pinglist": "service", "prober_host": "hA", "prober_rnic": "A1", "responder_host": "hC",
         "responder_rnic": "C1", "qpn": 8, "n": 1, "n_timeout": 0},
        {"pinglist": "tor_mesh", "prober_host": "hA", "prober_rnic": "A1", "responder_host": "hB",
         "responder_rnic": "B2", "qpn": 7, "n": 3, "n_timeout": 1},
        {"pinglist": "tor_mesh", "prober_host": "hA", "prober_rnic": "A1", "responder_host": "hC",
         "responder_rnic": "C1", "qpn": 8, "n": 1, "n_timeout": 0},
        {"pinglist": "tor_mesh", "prober_host": "hA", "prober_rnic": "A1", "responder_host": "hD",
         "responder_rnic": "D1", "qpn": 9, "n": 1, "n_timeout": 1},
    ]
    assert [(r["responder_rnic"], r["fwd_hops"], r["rev_hops"], r["n"]) for r in p.failing.to_pylist()] == [
        ("B2", AB_FWD, AB_REV, 1), ("D1", "", "", 1)]
    # A1->B2 (3 probes): A1->A, A->S1, B->S1, B2->B forward; B2->B, B->S2, A->S2, A1->A back: the access
    # links are on both paths and count once per probe. A1->C1 (2 probes): the same 4 links both ways.
    assert dict(zip(p.crossing["link"].to_pylist(), p.crossing["n"].to_pylist(), strict=True)) == {
        "A->S1": 5, "A->S2": 3, "A1->A": 5, "B->S1": 3, "B->S2": 3, "B2->B": 3, "C->S1": 2, "C1->C": 2}
    assert p.crossing["link"].to_pylist() == sorted(p.crossing["link"].to_pylist())
    # buckets floor(8 * log2(ns)): 1000 -> 79, 4000 -> 95, 500 -> 71, 600 -> 73, 2000 -> 87
    assert [(r["pinglist"], r["responder_rnic"], r["src_port"], r["fwd_hops"], r["rev_hops"], r["bucket"], r["n"])
            for r in p.flows.to_pylist()] == [
        ("service", "C1", 5001, AC_FWD, AC_REV, 95, 1),
        ("tor_mesh", "B2", 5000, AB_FWD, AB_REV, 79, 2),
        ("tor_mesh", "C1", 5001, AC_FWD, AC_REV, 95, 1),
    ]
    assert [tuple(r.values()) for r in p.delays.to_pylist()] == [
        ("hA", "prober", 0, 87, 1), ("hA", "prober", 1, 87, 1),
        ("hB", "responder", 0, 71, 1), ("hB", "responder", 1, 73, 1)]
    assert [tuple(r.values()) for r in p.slots.to_pylist()] == [
        ("hA", 0, 3, 0), ("hA", 1, 2, 1), ("hA", 3, 1, 1), ("hB", 0, 1, 0), ("hB", 1, 2, 1), ("hC", 0, 2, 0),
        ("hD", 3, 1, 1)]
    assert p.service.to_pylist() == [
        {"job_id": "job1", "prober_host": "hA", "prober_rnic": "A1", "responder_host": "hC", "responder_rnic": "C1",
         "src_port": 5001, "fwd_hops": AC_FWD, "rev_hops": AC_REV, "n": 1, "n_timeout": 0}]
    assert p.uploads.to_pylist() == [{"host": "hA", "upload_ns": WS + 20 * S}]


def test_raw_path_rows_give_the_same_partial_as_the_index():
    a = summarize(WS, _probes(), _paths(INDEX_ROWS))
    b = summarize(WS, _probes(), PathIndex(_paths(INDEX_ROWS)))
    for name in ("pairs", "failing", "crossing", "delays", "flows", "service", "uploads", "slots"):
        assert getattr(a, name).equals(getattr(b, name)), name


def test_after_an_eviction_ids_are_renumbered_and_lookups_still_find_the_live_paths():
    index = PathIndex(_paths(INDEX_ROWS))
    # two hours later only A1->C1 is probed: the A1->B2 entries (and their hop strings) are evicted
    later = [("tor_mesh", "C1", 5001, 8, "ok", 1, 4000, None, None, None)]
    for h in (1, 2, 3):
        t = _probes(later)
        t = t.set_column(t.schema.get_field_index("upload_ns"), "upload_ns",
                         pa.array([WS + h * HOUR_NS], pa.int64()))
        p = summarize(WS, t, index)
    assert len(index) == 2 and index.evicted == 2
    assert sorted(index.hop_strings().to_pylist()) == ["", AC_FWD, AC_REV]
    assert dict(zip(p.crossing["link"].to_pylist(), p.crossing["n"].to_pylist(), strict=True)) == {
        "A->S1": 1, "A1->A": 1, "C->S1": 1, "C1->C": 1}
    # A1->B2 is traced again: a new id, found again
    index.update(_paths(INDEX_ROWS[:2], WS + 3 * HOUR_NS))
    p = summarize(WS, _probes(PROBES[:1]), index)
    assert p.flows["fwd_hops"].to_pylist() == [AB_FWD] and p.flows["rev_hops"].to_pylist() == [AB_REV]
    assert p.crossing["n"].to_pylist() == [1] * 6


def test_factorize_numbers_groups_in_value_order():
    gid, distinct = factorize(pa.array([30, 10, 30, 20, 10]).to_numpy())
    assert gid.tolist() == [2, 0, 2, 1, 0] and distinct.tolist() == [10, 20, 30]
