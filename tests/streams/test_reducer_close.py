"""The reducer's close on integer codes equals the string computations it replaced (same inputs, same tables).

The references below are the earlier implementations, kept here only to compare: links of each probe by
splitting every row's hop strings and grouping by (row, link) strings; probes per link by a group-by
over those strings; flow quantiles by sorting rows on the flow key string and Arrow group-bys and a join;
job footprints by a Python step per row and per link crossed; host delay medians by a string group-by.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

sim = pytest.importorskip("producers.sim")
from analyzer_sim import run  # noqa: E402

import streams.pingmesh.reducer as reducer  # noqa: E402
from bench.scale import build_simulator  # noqa: E402
from bench.sim_reducer import SimPipeline  # noqa: E402
from producers.sim.fabrics import random_clos  # noqa: E402
from streams.pingmesh.busy_host import host_delay_p50  # noqa: E402
from streams.pingmesh.impact import Footprint, footprints  # noqa: E402
from streams.pingmesh.latency import LatencyConfig, flow_quantiles  # noqa: E402
from streams.pingmesh.links import explode_links, probe_link_codes, probe_links  # noqa: E402
from streams.pingmesh.partial import FLOW_KEYS, bucket_value, group_quantile, link_counts  # noqa: E402


def _probe_links_by_strings(fwd_hops: pa.Array, rev_hops: pa.Array) -> pa.Table:
    n = len(fwd_hops)
    both = pa.concat_arrays([a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in (fwd_hops, rev_hops)])
    ex = explode_links(both)
    row = pc.if_else(pc.less(ex["path"], n), ex["path"], pc.subtract(ex["path"], n))
    t = pa.table({"row": row, "link": ex["link"], "access_rnic": ex["access_rnic"]})
    if t.num_rows == 0:
        return t
    g = t.group_by(["row", "link"]).aggregate([("access_rnic", "max")])
    g = g.select(["row", "link", "access_rnic_max"]).rename_columns(["row", "link", "access_rnic"])
    return g.sort_by([("row", "ascending"), ("link", "ascending")])


def _link_counts_by_strings(groups: pa.Table) -> pa.Table:
    pl = _probe_links_by_strings(groups["fwd_hops"], groups["rev_hops"])
    if pl.num_rows == 0:
        return pa.table({"link": pa.array([], pa.string()), "n": pa.array([], pa.int64())})
    n = groups["n"].to_numpy()
    t = pa.table({"link": pl["link"], "n": pa.array(n[pl["row"].to_numpy()])})
    return t.group_by("link").aggregate([("n", "sum")]).rename_columns(["link", "n"]).sort_by("link")


def _flow_quantiles_by_strings(flows: pa.Table, cfg: LatencyConfig = LatencyConfig()) -> pa.Table:
    parts = [pc.cast(flows[c], pa.string()) for c in ("pinglist", "prober_rnic", "responder_rnic", "src_port")]
    t = flows.append_column("flow", pc.binary_join_element_wise(*parts, "|"))
    t = t.sort_by([("flow", "ascending"), ("bucket", "ascending")])
    key = np.array(t["flow"].to_pylist(), dtype=object)
    keys, q = group_quantile(key, t["bucket"].to_numpy(), t["n"].to_numpy(), cfg.quantile, cfg.min_tail_samples)
    g = t.group_by(["flow", *FLOW_KEYS]).aggregate([("n", "sum")])
    g = g.select(["flow", *FLOW_KEYS, "n_sum"]).rename_columns(["flow", *FLOW_KEYS, "n"])
    g = g.group_by(["flow"], use_threads=False).aggregate([(c, "max") for c in FLOW_KEYS] + [("n", "sum")])
    g = g.select(["flow", *[f"{c}_max" for c in FLOW_KEYS], "n_sum"]).rename_columns(["flow", *FLOW_KEYS, "n"])
    qt = pa.table({"flow": pa.array(keys.astype(str), pa.string()), "p99_ns": pa.array(q, pa.float64())})
    return g.join(qt, "flow").sort_by("flow")


def _footprints_row_by_row(service: pa.Table) -> dict[str, Footprint]:
    out: dict[str, Footprint] = {}
    if service.num_rows == 0:
        return out
    pl = _probe_links_by_strings(service["fwd_hops"], service["rev_hops"])
    jobs = service["job_id"].to_pylist()
    for row, link in zip(pl["row"].to_pylist(), pl["link"].to_pylist(), strict=True):
        out.setdefault(jobs[row], Footprint()).links.add(link)
    cols = [service[c].to_pylist() for c in ("prober_rnic", "responder_rnic", "prober_host",
                                             "responder_host", "src_port")]
    for j, pr, rr, ph, rh, sp in zip(jobs, *cols, strict=True):
        fp = out.setdefault(j, Footprint())
        fp.rnics.update((pr, rr))
        fp.hosts.update((ph, rh))
        fp.flows.add(f"{pr}|{rr}|{sp}")
    return out


def _host_delay_p50_by_strings(delays: pa.Table, from_slot: dict[str, int] | None = None) -> dict:
    if delays.num_rows == 0:
        return {}
    if from_slot:
        j = delays.join(pa.table({"host": pa.array(list(from_slot), pa.string()),
                                  "_from": pa.array(list(from_slot.values()), pa.int64())}), "host",
                        join_type="left outer")
        delays = j.filter(pc.greater_equal(j["slot"], pc.fill_null(j["_from"], 0)))
        if delays.num_rows == 0:
            return {}
    t = delays.group_by(["host", "role", "bucket"]).aggregate([("n", "sum")]).rename_columns(
        ["host", "role", "bucket", "n"])
    t = t.sort_by([("host", "ascending"), ("role", "ascending"), ("bucket", "ascending")])
    key = np.array([f"{h}\t{r}" for h, r in zip(t["host"].to_pylist(), t["role"].to_pylist(), strict=True)],
                   dtype=object)
    return {tuple(str(k).split("\t", 1)): float(v)
            for k, v in zip(*group_quantile(key, t["bucket"].to_numpy(), t["n"].to_numpy(), 0.5), strict=True)}


def test_host_delay_medians_by_hand():
    # H1 responder: 3 samples in bucket 100 (slot 0) and 4 in 110 (slot 2): 7 samples, the 4th -> 110;
    # counting from slot 2 only the 4 in 110. H1 prober: 1 sample in 90. H10 sorts after H1.
    delays = pa.table({"host": ["H1", "H1", "H1", "H10"], "role": ["responder", "responder", "prober", "prober"],
                       "slot": pa.array([0, 2, 0, 1], pa.int64()), "bucket": pa.array([100, 110, 90, 95], pa.int64()),
                       "n": pa.array([3, 4, 1, 2], pa.int64())})
    v = lambda b: float(bucket_value(np.array([b]))[0])  # noqa: E731
    got = host_delay_p50(delays)
    assert got == {("H1", "prober"): v(90), ("H1", "responder"): v(110), ("H10", "prober"): v(95)}
    assert list(got) == list(_host_delay_p50_by_strings(delays))
    assert host_delay_p50(delays, {"H1": 2}) == {("H1", "responder"): v(110), ("H10", "prober"): v(95)}
    assert host_delay_p50(delays, {"H1": 2}) == _host_delay_p50_by_strings(delays, {"H1": 2})


def test_footprints_by_hand():
    service = pa.table({
        "job_id": ["j2", "j1", "j1"], "prober_host": ["H1", "H1", "H2"], "prober_rnic": ["A1", "A1", "A2"],
        "responder_host": ["H3", "H3", "H3"], "responder_rnic": ["B1", "B1", "B2"],
        "src_port": pa.array([7, 7, 9], pa.uint16()), "fwd_hops": ["A1,A,S1,B,B1", "A1,A,S1,B,B1", ""],
        "rev_hops": ["B1,B,S2,A,A1", "B1,B,S2,A,A1", "B2,B,S1,A,A2"]})
    fps = footprints(service)
    assert sorted(fps) == ["j1", "j2"]
    assert fps["j1"] == Footprint(links={"A1->A", "A->S1", "B->S1", "B1->B", "B->S2", "A->S2", "A2->A", "B2->B"},
                                  rnics={"A1", "A2", "B1", "B2"}, hosts={"H1", "H2", "H3"},
                                  flows={"A1|B1|7", "A2|B2|9"})
    assert fps["j2"].flows == {"A1|B1|7"} and fps["j2"].hosts == {"H1", "H3"}
    assert fps == _footprints_row_by_row(service)


def test_flow_quantiles_by_hand():
    # flow x|a|b|99: 10 samples in bucket 100 and 5 in bucket 120 over two path pairs (re-traced
    # mid-window); min_tail 3: q = min(0.99, 1 - 3/15) = 0.8 -> the 12th sample -> bucket 120.
    # flow x|a|b|100 (sorts first as a string): 4 samples in bucket 90 -> q = 0.25 -> bucket 90.
    flows = pa.table({
        "pinglist": ["x", "x", "x"], "prober_rnic": ["a", "a", "a"], "responder_rnic": ["b", "b", "b"],
        "src_port": pa.array([99, 99, 100], pa.uint16()), "fwd_hops": ["a,T,b", "a,U,b", "a,T,b"],
        "rev_hops": ["b,T,a", "b,U,a", "b,T,a"], "ts_source": ["hardware", "hardware", "software"],
        "bucket": pa.array([100, 120, 90], pa.int64()), "n": pa.array([10, 5, 4], pa.int64())})
    fq = flow_quantiles(flows)
    assert fq["flow"].to_pylist() == ["x|a|b|100", "x|a|b|99"]
    assert fq["n"].to_pylist() == [4, 15]
    assert fq["p99_ns"].to_pylist() == [float(bucket_value(np.array([90]))[0]), float(bucket_value(np.array([120]))[0])]
    assert fq["fwd_hops"].to_pylist() == ["a,T,b", "a,U,b"]  # the largest of the flow's paths
    assert fq.equals(_flow_quantiles_by_strings(flows))


def test_links_of_each_probe_by_hand():
    fwd = pa.array(["A1,A,S3,B,B2", "A1,A,*", None, "", "tor-1,tor,S,tor2,r2", "A,S3,B,B2"])
    rev = pa.array(["B2,B,S3,A,A1", "", "A2,A,A1", "x", None, "B2,B,S3,A,A1"])
    t = probe_links(fwd, rev).to_pylist()
    got = [(r["row"], r["link"], r["access_rnic"]) for r in t]
    assert got == [
        # a link on both paths of a probe counts once for it; access links name their RNIC
        (0, "A->S3", None), (0, "A1->A", "A1"), (0, "B->S3", None), (0, "B2->B", "B2"),
        (1, "A->*", None), (1, "A1->A", "A1"),  # an unanswered tail: the pseudo-link, not an access link
        (2, "A1->A", "A1"), (2, "A2->A", "A2"),  # an ACK path alone (untraced forward)
        # string order of the names ("tor-1->tor" sorts before "tor->S" although "tor" < "tor-1")
        (4, "r2->tor2", "r2"), (4, "tor-1->tor", "tor-1"), (4, "tor->S", None), (4, "tor2->S", None),
        # a trace from the ToR: A->S3 is its first link (access "A") and a middle one of the ACK path
        # (none); the probe's access RNIC is the larger, as a group-by max over strings gives it
        (5, "A->S3", "A"), (5, "A1->A", "A1"), (5, "B->S3", None), (5, "B2->B", "B2"),
    ]
    n = pa.array([5, 2, 7, 1, 3, 4], pa.int64())
    c = link_counts(pa.table({"fwd_hops": fwd, "rev_hops": rev, "n": n}))
    assert dict(zip(c["link"].to_pylist(), c["n"].to_pylist(), strict=True)) == {
        "A->*": 2, "A->S3": 5 + 4, "A1->A": 5 + 2 + 7 + 4, "A2->A": 7, "B->S3": 5 + 4, "B2->B": 5 + 4,
        "r2->tor2": 3, "tor-1->tor": 3, "tor->S": 3, "tor2->S": 3}
    assert c["link"].to_pylist() == sorted(c["link"].to_pylist())


def test_no_paths_give_empty_tables_of_the_same_schema():
    empty = pa.array([], pa.string())
    assert probe_links(empty, empty).equals(_probe_links_by_strings(empty, empty))
    g = pa.table({"fwd_hops": empty, "rev_hops": empty, "n": pa.array([], pa.int64())})
    assert link_counts(g).equals(_link_counts_by_strings(g))
    assert len(probe_link_codes(pa.array(["", None]), pa.array([None, "x"])).row) == 0


def _random_clos_windows() -> bool:
    # a dead link (incomplete traces: resolved tails and X->* pseudo-links), a lossy one, a slow one
    inv = random_clos(5, n_tors=5, n_spines=4, hosts_per_tor=2, rnics_per_host=2)
    tors = list(inv.tors)
    run(inv, [sim.LinkDown(a=tors[0], b="S1"), sim.LossyLink(a=tors[1], b="S2", rate=0.05),
              sim.LatencyLink(a=tors[2], b="S3")], seconds=40)
    return False  # no service pinglist


def _bench_scale_windows() -> bool:
    # the `bench scale` fabric (three pinglists, jobs of 64 RNICs, a dead ToR uplink) at 128 RNICs
    SimPipeline(build_simulator(128, 0.2)).run(1_796_061_300_000_000_000, 40)
    return True


@pytest.mark.parametrize("windows", [_random_clos_windows, _bench_scale_windows], ids=["random_clos", "bench_scale"])
def test_codes_equal_the_string_expansion_on_simulated_windows(monkeypatch, windows):
    # every merged window's flows, service connections and failing groups
    merged = []
    analyze = reducer.analyze_window
    monkeypatch.setattr(reducer, "analyze_window",
                        lambda partial, **kw: merged.append(partial) or analyze(partial, **kw))
    has_jobs = windows()
    assert len(merged) >= 2
    dark = 0
    for p in merged:
        for t in (p.flows, p.service, p.failing):
            assert probe_links(t["fwd_hops"], t["rev_hops"]).equals(
                _probe_links_by_strings(t["fwd_hops"], t["rev_hops"]))
            g = t.append_column("one", pa.array(np.ones(t.num_rows, np.int64)))
            g = g.select(["fwd_hops", "rev_hops", "n"])
            assert link_counts(g).equals(_link_counts_by_strings(g))
        assert flow_quantiles(p.flows).equals(_flow_quantiles_by_strings(p.flows))
        assert footprints(p.service) == _footprints_row_by_row(p.service)
        assert host_delay_p50(p.delays) == _host_delay_p50_by_strings(p.delays)
        onset = {h: 2 for h in p.delays["host"].to_pylist()[::3]}
        assert host_delay_p50(p.delays, onset) == _host_delay_p50_by_strings(p.delays, onset)
        dark += sum("*" in h for h in p.failing["fwd_hops"].to_pylist())
    assert dark > 0  # the pseudo-links were exercised
    assert sum(p.flows.num_rows for p in merged) > 100
    assert (sum(len(footprints(p.service)) for p in merged) >= 2) == has_jobs
