"""The latency rule's per-flow baselines: EWMA of non-slow windows, bounded by when each flow was last probed."""

from __future__ import annotations

import pyarrow as pa
import pytest

from streams.pingmesh.latency import LatencyConfig, latency_cover, update_baseline

HOUR = 3_600_000_000_000


def _marked(flows: list[str], p99: list[float], slow: list[bool], n: int = 10) -> pa.Table:
    return pa.table({"flow": flows, "p99_ns": pa.array(p99, pa.float64()), "n": pa.array([n] * len(flows), pa.int64()),
                     "slow": slow})


def _rows(t: pa.Table) -> dict[str, tuple[float, int, int]]:
    return {f: (b, w, last) for f, b, w, last in zip(*(t[c].to_pylist() for c in
                                                      ("flow", "baseline_ns", "windows", "last_ns")), strict=True)}


def test_ewma_and_last_probed_window() -> None:
    cfg = LatencyConfig()  # ewma 0.2, idle 2 h
    b = update_baseline(None, _marked(["a", "b"], [10_000.0, 20_000.0], [False, False]), cfg, now_ns=0)
    assert _rows(b) == {"a": (10_000.0, 1, 0), "b": (20_000.0, 1, 0)}
    # a: a new sample (0.8 * 10,000 + 0.2 * 15,000 = 11,000); b: probed but slow (baseline kept, stamped);
    # c: new and not slow
    b = update_baseline(b, _marked(["a", "b", "c"], [15_000.0, 90_000.0, 5_000.0], [False, True, False]), cfg,
                        now_ns=20 * 10**9)
    assert _rows(b) == {"a": (pytest.approx(11_000.0), 2, 20 * 10**9), "b": (20_000.0, 1, 20 * 10**9),
                        "c": (5_000.0, 1, 20 * 10**9)}


def test_flows_not_probed_for_the_idle_limit_are_dropped() -> None:
    cfg = LatencyConfig(baseline_idle_ns=2 * HOUR)
    b = update_baseline(None, _marked(["mesh", "rotated"], [7_000.0, 12_000.0], [False, False]), cfg, now_ns=0)
    b = update_baseline(b, _marked(["mesh"], [7_000.0], [False]), cfg, now_ns=2 * HOUR)  # exactly at the limit
    assert set(_rows(b)) == {"mesh", "rotated"}
    b = update_baseline(b, _marked(["mesh", "new"], [7_000.0, 9_000.0], [False, False]), cfg, now_ns=2 * HOUR + 1)
    assert set(_rows(b)) == {"mesh", "new"}


def test_a_flow_slow_from_its_first_window_gets_no_baseline() -> None:
    b = update_baseline(None, _marked(["a"], [10_000.0], [False]), now_ns=0)
    b = update_baseline(b, _marked(["a", "slow"], [10_000.0, 99_000.0], [False, True]), now_ns=1)
    assert set(_rows(b)) == {"a"}


def test_without_a_time_nothing_is_dropped() -> None:
    b = update_baseline(None, _marked(["a", "b"], [1.0, 2.0], [False, False]))
    b = update_baseline(b, _marked(["a"], [1.0], [False]))
    assert set(_rows(b)) == {"a", "b"}


def _flows_through(access: list[str], slow_on: dict[str, set[int]], n: int = 10, k: int = 8) -> pa.Table:
    """``k`` flows from each RNIC in ``access`` (flow i to responder Xi over spine S{i%2}); the flows of
    r numbered in ``slow_on[r]`` are slow."""
    rows: dict[str, list] = {"flow": [], "fwd_hops": [], "rev_hops": [], "n": [], "p99_ns": [], "slow": []}
    for r in access:
        for i in range(k):
            rows["flow"].append(f"tor_mesh|{r}|X{i}|{1000 + i}")
            rows["fwd_hops"].append(f"{r},T,S{i % 2},T2,X{i}")
            rows["rev_hops"].append(f"X{i},T2,S{i % 2},T,{r}")
            rows["n"].append(n)
            rows["p99_ns"].append(1e6 if i in slow_on.get(r, set()) else 1e4)
            rows["slow"].append(i in slow_on.get(r, set()))
    return pa.table(rows)


def test_a_few_slow_flows_through_a_link_name_nothing() -> None:
    # scheduler noise as the netns lab once had it: 2 of the 8 flows through A1's access link slow
    marked = _flows_through(["A1", "A2", "A3"], {"A1": {0, 1}})
    cover = latency_cover(marked)
    assert cover.suspects == []
    assert cover.unexplained == 2
    loose = latency_cover(marked, cfg=LatencyConfig(min_slow_share=0.0))  # the share is what decides
    assert [(s.link, s.failed, s.crossing) for s in loose.suspects] == [("A1->T", 2, 8)]


def test_most_flows_through_an_access_link_slow_name_it() -> None:
    cover = latency_cover(_flows_through(["A1", "A2", "A3"], {"A1": {0, 1, 2, 3, 4, 5, 6}}))
    assert [(s.link, s.access_rnic, s.failed, s.crossing) for s in cover.suspects] == [("A1->T", "A1", 7, 8)]


def test_sparse_flows_neither_vote_nor_dilute() -> None:
    t = _flows_through(["A1", "A2"], {"A1": {0, 1, 2, 3}})
    sparse = _flows_through(["A1"], {}, n=2)  # too few samples to be judged; 4 of 16 would be slow
    cover = latency_cover(pa.concat_tables([t, sparse]))
    assert [(s.link, s.failed, s.crossing) for s in cover.suspects] == [("A1->T", 4, 8)]
