"""Property tests: verdicts do not depend on row order or on the split of rows over workers and batches.

Workers each :func:`summarize` their share of a window and one reducer :func:`merge`\\ s the
partials; the verdicts must equal the one-worker verdicts.
"""

from __future__ import annotations

import copy

import numpy as np
from analyzer_fabric import Faults, Job, S, last_uploads, panel1, window
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.pingmesh.analyzer import AnalyzerState, analyze_window
from streams.pingmesh.partial import merge, summarize

START = 1_000 * 20 * S
FAB = panel1()
JOB = Job("J", [("A2", "B2", "S3"), ("A1", "B1", "S1")])
SCENARIOS = {
    "dead_link": Faults(dead_links={"A->S3"}, dead_rnics={"C3"}),
    "two_links_lossy": Faults(dead_links={"B->S4"}, lossy_links={"C->S2": 0.3}),
    "busy": Faults(busy_hosts={"H1"}, restarted={"B1"}),
    "slow": Faults(slow_links={"B->S2": 200_000}, silent_hosts={"H6"}),
}
_CACHE: dict[str, tuple] = {}
_WARM: list[AnalyzerState] = []


def _warm_state() -> AnalyzerState:
    """A state with two healthy windows of history (latency baselines need the flow's own past)."""
    if not _WARM:
        state = AnalyzerState()
        for k in (2, 1):
            ws = START - k * 20 * S
            probes, paths, reg = window(FAB, Faults(), start_ns=ws, jobs=[JOB], seed=5 + k)
            analyze_window(summarize(ws, probes, paths), registry=reg,
                           host_last_upload=last_uploads(FAB, Faults(), ws), state=state)
        _WARM.append(state)
    return copy.deepcopy(_WARM[0])


def _data(name: str):
    if name not in _CACHE:
        faults = SCENARIOS[name]
        probes, paths, reg = window(FAB, faults, start_ns=START, jobs=[JOB], seed=5)
        one = analyze_window(summarize(START, probes, paths), registry=reg,
                             host_last_upload=last_uploads(FAB, faults, START), state=_warm_state())
        _CACHE[name] = (probes, paths, reg, faults, one)
    return _CACHE[name]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(SCENARIOS)), workers=st.integers(1, 4), batches=st.integers(1, 3),
       seed=st.integers(0, 2**32 - 1))
def test_verdicts_do_not_depend_on_row_order_or_partition_split(name, workers, batches, seed):
    probes, paths, reg, faults, one = _data(name)
    rng = np.random.default_rng(seed)
    shuffled = probes.take(rng.permutation(probes.num_rows))
    owner = rng.integers(0, workers * batches, shuffled.num_rows)
    partials = [summarize(START, shuffled.filter(owner == k), paths) for k in range(workers * batches)]
    rng.shuffle(partials)
    # a two-level merge: batches into workers, workers into the reducer
    per_worker = [merge(partials[w::workers]) for w in range(workers) if partials[w::workers]]
    merged = merge(per_worker)
    res = analyze_window(merged, registry=reg, host_last_upload=last_uploads(FAB, faults, START),
                         state=_warm_state())
    assert res.verdicts.num_rows > 0
    assert res.verdicts.equals(one.verdicts)
    assert res.coverage.equals(one.coverage)


def test_scenarios_give_their_faults():
    kinds = {n: sorted({(r["kind"], r["location"]) for r in _data(n)[4].verdicts.to_pylist()}) for n in SCENARIOS}
    assert kinds["dead_link"] == [("rnic", "C3"), ("switch", "A->S3")]
    assert kinds["two_links_lossy"] == [("switch", "B->S4"), ("switch", "C->S2")]
    assert kinds["busy"] == [("busy_host", "H1"), ("stale_qpn", "B1")]
    assert kinds["slow"] == [("host_down", "H6"), ("switch_latency", "B->S2")]
