"""The bounded path index: newest trace per (direction, 5-tuple), O(new paths) updates, eviction of tuples
no probe used for two rotation periods (event time)."""

from __future__ import annotations

import random

import pyarrow as pa

from streams.pingmesh.path_index import HOUR_NS, PathIndex, attach_paths, latest_paths

T0 = 1_800_000_000 * 10**9


def _paths(rows: list[tuple]) -> pa.Table:
    """rows: (direction, src_ip, dst_ip, src_port, hops, trace_ns)."""
    cols = list(zip(*rows, strict=True))
    return pa.table({"direction": pa.array(cols[0]), "src_ip": pa.array(cols[1]), "dst_ip": pa.array(cols[2]),
                     "src_port": pa.array(cols[3], pa.uint16()), "dst_port": pa.array([4791] * len(rows), pa.uint16()),
                     "hops": pa.array(cols[4]), "trace_ns": pa.array(cols[5], pa.int64())})


def _probes(tuples: list[tuple[str, str, int]], at_ns: int) -> pa.Table:
    cols = list(zip(*tuples, strict=True))
    return pa.table({"src_ip": pa.array(cols[0]), "dst_ip": pa.array(cols[1]),
                     "src_port": pa.array(cols[2], pa.uint16()),
                     "dst_port": pa.array([4791] * len(tuples), pa.uint16()),
                     "upload_ns": pa.array([at_ns] * len(tuples), pa.int64())})


def test_incremental_updates_equal_the_newest_trace_of_everything():
    rng = random.Random(4)
    batches = [[(rng.choice(["forward", "reverse"]), f"10.0.0.{rng.randrange(4)}", f"10.0.1.{rng.randrange(4)}",
                 49152 + rng.randrange(3), rng.choice(["a,S1,b", "a,S2,b", "a,S3,b"]), T0 + rng.randrange(5))
                for _ in range(40)] for _ in range(6)]
    index = PathIndex()
    for b in batches:
        index.update(_paths(b))
    want = latest_paths(_paths([r for b in batches for r in b]))
    got = index.latest.drop_columns(["_entry"])
    key = ["direction", "src_ip", "dst_ip", "src_port", "dst_port"]
    assert got.sort_by([(k, "ascending") for k in key]).to_pylist() == \
        want.sort_by([(k, "ascending") for k in key]).to_pylist()
    assert len(index) == want.num_rows


def test_a_tuple_no_probe_used_for_two_rotation_periods_is_evicted():
    index = PathIndex()
    index.update(_paths([("forward", "10.0.0.1", "10.0.1.1", 50000, "a,S1,b", T0),
                         ("forward", "10.0.0.2", "10.0.1.2", 50001, "c,S2,d", T0)]))
    probed = [("10.0.0.1", "10.0.1.1", 50000)]
    for h in range(1, 4):  # only the first tuple is still on a pinglist
        t = attach_paths(_probes(probed, T0 + h * HOUR_NS), index)
        assert t["fwd_hops"].to_pylist() == ["a,S1,b"]
    assert len(index) == 1 and index.evicted == 1  # the second: unused since T0, > 2 h ago
    assert index.latest["src_port"].to_pylist() == [50000]
    # traced again (a new job uses it): back, with its new path
    index.update(_paths([("forward", "10.0.0.2", "10.0.1.2", 50001, "c,S3,d", T0 + 4 * HOUR_NS)]))
    t = attach_paths(_probes([("10.0.0.2", "10.0.1.2", 50001)], T0 + 4 * HOUR_NS), index)
    assert t["fwd_hops"].to_pylist() == ["c,S3,d"]


def _traced(rows: list[tuple], complete: list[bool]) -> pa.Table:
    return _paths(rows).append_column("complete", pa.array(complete))


def test_an_incomplete_trace_is_resolved_on_arrival_and_again_only_when_the_fabric_teaches_something_new():
    # two ToRs (T1: R1, R2; T2: R3, R4) under spines S1, S2; addresses 10.0.0.N of RN
    index = PathIndex()
    resolved: list[list[int]] = []
    resolve = index._resolve

    def spy(entries: list[int]) -> None:
        resolved.append(list(entries))
        resolve(entries)

    index._resolve = spy  # type: ignore[method-assign]
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.3", 1, "R1,T1,S1,T2,R3", T0),
                          ("forward", "10.0.0.2", "10.0.0.4", 2, "R2,T1,S2,T2,R4", T0)], [True, True]))
    assert resolved == []  # no incomplete trace: nothing to resolve
    # S1 answered, then nothing: T2 is R4's ToR and S1's only way down to T2 is known, so the tail is filled in
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.4", 3, "R1,T1,S1", T0 + 1)], [False]))
    # T1 answered, then nothing: which spine is next is not unique, but each of S1 and S2 goes straight down to
    # T2 (R3's ToR), so the path is T1,*,T2: the pseudo-links T1->* and T2->* (a link up from T1 or up from T2)
    index.update(_traced([("forward", "10.0.0.2", "10.0.0.3", 4, "R2,T1", T0 + 2)], [False]))
    assert resolved == [[2], [3]]  # each on arrival, alone
    hops = dict(zip(index.latest["src_port"].to_pylist(), index.latest["hops"].to_pylist(), strict=True))
    assert hops[3] == "R1,T1,S1,T2,R4" and hops[4] == "T1,*,T2"
    # new complete traces over known links and addresses teach nothing: the held incomplete ones stay as they are
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.3", 5, "R1,T1,S1,T2,R3", T0 + 3)], [True]))
    assert resolved == [[2], [3]]
    # a new RNIC (R5 on T2, 10.0.0.5) is news: every held incomplete trace is resolved again
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.5", 6, "R1,T1,S2,T2,R5", T0 + 4)], [True]))
    assert resolved == [[2], [3], [2, 3]]
    # a complete trace of a tuple replaces its incomplete one: it is no longer resolved
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.4", 3, "R1,T1,S1,T2,R4", T0 + 5),
                          ("forward", "10.0.0.1", "10.0.0.6", 7, "R1,T1,S1,T2,R6", T0 + 5)], [True, True]))
    assert resolved == [[2], [3], [2, 3], [3]]


def test_lookups_are_the_same_past_the_direct_pair_ids(monkeypatch):
    """Past 2**DIRECT_BITS addresses the index numbers address pairs in a table (converted once): every lookup,
    the ACK path by the reverse 5-tuple included, and eviction give what they gave before."""
    import streams.pingmesh.path_index as path_index

    monkeypatch.setattr(path_index, "DIRECT_BITS", 2)  # 4 addresses
    index = PathIndex()
    index.update(_paths([("forward", "10.0.0.1", "10.0.1.1", 50000, "a,S1,b", T0),
                         ("reverse", "10.0.1.1", "10.0.0.1", 50000, "b,S2,a", T0)]))
    assert index._direct
    probe = [("10.0.0.1", "10.0.1.1", 50000)]
    before = attach_paths(_probes(probe, T0), index).select(["fwd_hops", "rev_hops"]).to_pylist()
    assert before == [{"fwd_hops": "a,S1,b", "rev_hops": "b,S2,a"}]
    index.update(_paths([("forward", f"10.0.2.{i}", f"10.0.3.{i}", 50001, f"c{i},S3,d{i}", T0) for i in range(3)]))
    assert not index._direct  # 8 addresses
    assert attach_paths(_probes(probe, T0), index).select(["fwd_hops", "rev_hops"]).to_pylist() == before
    got = attach_paths(_probes([(f"10.0.2.{i}", f"10.0.3.{i}", 50001) for i in range(3)], T0), index)
    assert got["fwd_hops"].to_pylist() == [f"c{i},S3,d{i}" for i in range(3)]
    for h in range(1, 4):  # only the first tuple is still probed: the others are evicted, the pair table compacted
        attach_paths(_probes(probe, T0 + h * HOUR_NS), index)
    assert len(index) == 2 and len(index._pair_keys) == 2
    assert attach_paths(_probes(probe, T0 + 4 * HOUR_NS), index).select(["fwd_hops", "rev_hops"]).to_pylist() == before


def test_a_newer_incomplete_trace_off_the_held_path_replaces_a_stale_complete_one():
    # two ToRs (T1: R1; T2: R3, R4) under spines S1, S2; tuple 1 was traced complete over S1
    index = PathIndex()
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.3", 1, "R1,T1,S1,T2,R3", T0),
                          ("forward", "10.0.0.1", "10.0.0.4", 2, "R1,T1,S2,T2,R4", T0)], [True, True]))

    def hops() -> dict[int, str]:
        return dict(zip(index.latest["src_port"].to_pylist(), index.latest["hops"].to_pylist(), strict=True))

    # the same hops as the held path, then silence: a silent fault on the known path; the complete trace stays
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.3", 1, "R1,T1,*", T0 + 1)], [False]))
    assert hops()[1] == "R1,T1,S1,T2,R3"
    # rerouted over S2 (answered), then silence: the held S1 trace is stale; S2's only way down to T2 is known
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.3", 1, "R1,T1,S2,*", T0 + 2)], [False]))
    assert hops()[1] == "R1,T1,S2,T2,R3"
    # an older off-path trace arriving late changes nothing
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.4", 2, "R1,T1,S1", T0 - 1)], [False]))
    assert hops()[2] == "R1,T1,S2,T2,R4"


def test_a_bounced_probes_incomplete_trace_ends_in_the_pseudo_link_above_its_last_answer():
    # R1 (10.0.0.1) under T1 bounces off S1 (to its own address); S1's way down to T1 is known, but a trace
    # that stops at S1 says the link above S1 did not answer: the tail is S1->*, never the way back down
    index = PathIndex()
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.3", 1, "R1,T1,S1,T2,R3", T0)], [True]))
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.1", 2, "R1,T1,S1", T0 + 1)], [False]))
    hops = dict(zip(index.latest["src_port"].to_pylist(), index.latest["hops"].to_pylist(), strict=True))
    assert hops[2] == "S1,*"


def test_a_hop_whose_answer_was_lost_neither_reroutes_the_tuple_nor_names_a_link():
    # a lossy link drops the ICMP answer of S1 alone: the later hops answered, so the tuple stays on its path
    index = PathIndex()
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.3", 1, "R1,T1,S1,T2,R3", T0),
                          ("forward", "10.0.0.1", "10.0.0.4", 2, "R1,T1,S2,T2,R4", T0)], [True, True]))
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.3", 1, "R1,T1,*,T2,R3", T0 + 1)], [False]))
    hops = dict(zip(index.latest["src_port"].to_pylist(), index.latest["hops"].to_pylist(), strict=True))
    assert hops[1] == "R1,T1,S1,T2,R3"
    # a tuple first traced with a gap: only the hops before it are known (T1 has two spines: no unique way), and
    # that one switch lies between T1 and R4's ToR T2: the pseudo-links T1->* and T2->*, no link named
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.4", 3, "R1,T1,*,T2,R4", T0 + 2)], [False]))
    hops = dict(zip(index.latest["src_port"].to_pylist(), index.latest["hops"].to_pylist(), strict=True))
    assert hops[3] == "T1,*,T2"


def test_a_trace_stopped_at_its_tor_spans_one_unknown_switch_only_where_every_switch_above_goes_straight_down():
    """Two pods of a three-tier Clos: ToRs T1 (pod 0) and T3 (pod 1), aggregation switches P0S1 above T1 and P1S1
    above T3, core X1. Within pod 0 (T1 to T2 over P0S1) one switch lies between the ToRs; across pods three do,
    and a trace that stopped at T1 keeps its one pseudo-link."""
    index = PathIndex()
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.2", 1, "R1,T1,P0S1,T2,R2", T0),
                          ("forward", "10.0.0.1", "10.0.0.3", 2, "R1,T1,P0S1,X1,P1S1,T3,R3", T0)], [True, True]))
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.2", 3, "R1,T1", T0 + 1),
                          ("forward", "10.0.0.1", "10.0.0.3", 4, "R1,T1", T0 + 1)], [False, False]))
    hops = dict(zip(index.latest["src_port"].to_pylist(), index.latest["hops"].to_pylist(), strict=True))
    assert hops[3] == "T1,*,T2" and hops[4] == "T1,*"
    # a second switch above T1 never seen going down to T2: the way is not known to be one switch
    index.update(_traced([("forward", "10.0.0.1", "10.0.0.3", 5, "R1,T1,P0S2,X2,P1S1,T3,R3", T0 + 2)], [True]))
    hops = dict(zip(index.latest["src_port"].to_pylist(), index.latest["hops"].to_pylist(), strict=True))
    assert hops[3] == "T1,*"
