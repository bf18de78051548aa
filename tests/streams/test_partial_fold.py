"""The reducer's fold of a window's partials as they arrive equals the merge of all of them at the close.

:class:`streams.pingmesh.partial_fold.PartialFold` keeps integer-coded sums per window and folds partials in
chunks; :func:`streams.pingmesh.partial.merge` (the close as it was) concatenates and groups every partial
at once. Checked table for table (schemas and metadata too) by hand, on simulated windows in any order and
chunking, and through the reducer: the verdicts and coverage of each closed window equal those of the old
close on the same partials and the same analyzer state.
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pyarrow as pa
import pytest

sim = pytest.importorskip("producers.sim")
from analyzer_sim import T0, S, run  # noqa: E402
from test_partial_by_hand import INDEX_ROWS, PROBES, WS, _paths, _probes  # noqa: E402

import streams.pingmesh.reducer as reducer  # noqa: E402
from bench.scale import build_simulator  # noqa: E402
from bench.sim_reducer import SimPipeline  # noqa: E402
from producers.sim.fabrics import random_clos  # noqa: E402
from schemas.group_codes import key  # noqa: E402
from streams.pingmesh.analyzer import analyze_window  # noqa: E402
from streams.pingmesh.partial import SUM_KEYS, PartialKeys, WindowPartial, merge, summarize  # noqa: E402
from streams.pingmesh.partial_fold import PartialFold  # noqa: E402
from streams.pingmesh.path_index import PathIndex  # noqa: E402

TABLES = [*SUM_KEYS, "uploads"]


def _fold(parts: list[WindowPartial], min_rows: int) -> WindowPartial:
    f = PartialFold(parts[0].window_start_ns, min_rows=min_rows)
    for p in parts:
        f.add(p)
    return f.result()


def _assert_equal(a: WindowPartial, b: WindowPartial) -> None:
    assert a.window_start_ns == b.window_start_ns
    for name in TABLES:
        x, y = getattr(a, name), getattr(b, name)
        assert x.equals(y, check_metadata=True), (name, x.schema, y.schema, x.slice(0, 3), y.slice(0, 3))


def _assert_keys(p: WindowPartial, keys: PartialKeys) -> None:
    """Each key the fold gives codes its table's column as :func:`key` does: the same values, the same order and
    equality (the codes need not be dense)."""
    for name, cols in keys.items():
        t = getattr(p, name)
        assert set(cols) == set(SUM_KEYS[name][0])
        for c, k in cols.items():
            assert len(k.codes) == t.num_rows and (k.codes < k.card).all()
            assert k.values(k.codes).equals(t[c].combine_chunks()), (name, c)
            assert np.array_equal(_dense(k.codes), _dense(key(t[c]).codes)), (name, c)


def _dense(codes: np.ndarray) -> np.ndarray:
    """Codes renumbered 0, 1, ... in their order."""
    return np.unique(codes, return_inverse=True)[1].reshape(-1)


def test_two_partials_fold_to_the_counts_worked_out_by_hand():
    index = PathIndex(_paths(INDEX_ROWS))
    first = summarize(WS, _probes(PROBES[:3]), index)  # A1->B2: ok, ok, timeout
    second = summarize(WS, _probes(PROBES[3:] + PROBES[:1]), index)  # A1->C1 twice, D1 timeout, A1->B2 ok
    for min_rows in (1, 1 << 40):  # folded at each partial, or only at the result
        p = _fold([first, second], min_rows)
        pairs = {(r["pinglist"], r["responder_rnic"], r["qpn"]): (r["n"], r["n_timeout"]) for r in p.pairs.to_pylist()}
        assert pairs == {("tor_mesh", "B2", 7): (4, 1), ("tor_mesh", "C1", 8): (1, 0),
                         ("tor_mesh", "D1", 9): (1, 1), ("service", "C1", 8): (1, 0)}
        # network RTT 1000 ns three times on A1->B2 (bucket floor(8 * log2(1000)) = 79), 4000 twice on A1->C1
        flows = {(r["pinglist"], r["responder_rnic"], r["bucket"]): r["n"] for r in p.flows.to_pylist()}
        assert flows == {("tor_mesh", "B2", 79): 3, ("tor_mesh", "C1", 95): 1, ("service", "C1", 95): 1}
        assert p.service.to_pylist()[0]["job_id"] == "job1" and p.service["n"].to_pylist() == [1]
        assert p.failing["n"].to_pylist() == [1, 1]  # one timeout per failing group (B2 traced, D1 untraced)
        _assert_equal(p, merge([first, second]))
        f = PartialFold(WS, min_rows=min_rows)
        f.add(first), f.add(second)
        coded, keys = f.coded_result()
        _assert_equal(coded, p)
        _assert_keys(coded, keys)
        assert set(keys) == set(SUM_KEYS)  # every table had rows


def test_a_table_whose_schema_changes_is_merged_as_before():
    index = PathIndex(_paths(INDEX_ROWS))
    a, b = summarize(WS, _probes(PROBES[:3]), index), summarize(WS, _probes(PROBES[3:]), index)
    b.pairs = b.pairs.cast(b.pairs.schema.set(b.pairs.schema.get_field_index("qpn"), pa.field("qpn", pa.int64())))
    for min_rows in (1, 1 << 40):
        _assert_equal(_fold([a, b, a], min_rows), merge([a, b, a]))
        f = PartialFold(WS, min_rows=min_rows)
        for p in (a, b, a):
            f.add(p)
        coded, keys = f.coded_result()
        assert "pairs" not in keys and "flows" in keys  # a table merged raw has no codes; the others keep theirs
        _assert_keys(coded, keys)


def test_a_partial_of_another_window_and_an_empty_fold_are_refused():
    p = summarize(WS, _probes(), PathIndex(_paths(INDEX_ROWS)))
    f = PartialFold(WS + 20 * 10**9)
    with pytest.raises(ValueError, match="folded into window"):
        f.add(p)
    with pytest.raises(ValueError, match="at least one"):
        f.result()


def _random_clos_windows() -> None:
    inv = random_clos(5, n_tors=5, n_spines=4, hosts_per_tor=2, rnics_per_host=2)
    tors = list(inv.tors)
    run(inv, [sim.LinkDown(a=tors[0], b="S1"), sim.LossyLink(a=tors[1], b="S2", rate=0.05),
              sim.LatencyLink(a=tors[2], b="S3")], seconds=40)


def _rnic_windows() -> None:
    """Faults the RNIC rule and the host steps judge: two dead RNICs under one ToR, a host restarting (stale QPNs)."""
    inv = random_clos(3, n_tors=4, n_spines=2, hosts_per_tor=3, rnics_per_host=2)
    tors = list(inv.tors)
    under = inv.rnics_under_tor(tors[0])
    restart = inv.rnics[inv.rnics_under_tor(tors[2])[0]].host
    run(inv, [sim.RnicDown(rnic=under[0]), sim.RnicDown(rnic=under[-1]),
              sim.HostRestart(host=restart, start_ns=T0 + 25 * S)], seconds=60)


def _bench_scale_windows() -> None:
    pipe = SimPipeline(build_simulator(128, 0.2), workers=2)  # two steps (partitions) per round
    pipe.run(1_796_061_300_000_000_000, 40)


@pytest.mark.parametrize("windows", [_random_clos_windows, _rnic_windows, _bench_scale_windows],
                         ids=["random_clos", "rnic_faults", "bench_scale"])
def test_the_fold_gives_the_old_close_on_simulated_windows(monkeypatch, windows):
    received: dict[int, list[WindowPartial]] = {}
    decode = reducer.from_bytes

    def recorded(blob: bytes) -> WindowPartial:
        p = decode(blob)
        received.setdefault(p.window_start_ns, []).append(p)
        return p

    closes = []
    analyze = reducer.analyze_window

    def both(partial: WindowPartial, **kw: object):  # noqa: ANN202 - analyze_window's result
        keys = kw.pop("keys")
        assert keys and set(keys["flows"]) == set(SUM_KEYS["flows"][0])  # the fold's codes are handed on
        _assert_keys(partial, keys)
        before = copy.deepcopy(kw)  # the old close on the same state: merged, every key column hashed
        old = analyze_window(merge(received[partial.window_start_ns]), **before)
        new = analyze(partial, keys=keys, **kw)
        closes.append((partial, old, new))
        return new

    monkeypatch.setattr(reducer, "from_bytes", recorded)
    monkeypatch.setattr(reducer, "analyze_window", both)
    windows()
    assert len(closes) >= 2
    rng = random.Random(7)
    for partial, old, new in closes:
        parts = received[partial.window_start_ns]
        merged = merge(parts)
        _assert_equal(partial, merged)
        assert new.verdicts.equals(old.verdicts, check_metadata=True)
        assert new.coverage.equals(old.coverage) and new.stats == old.stats
        shuffled = rng.sample(parts, len(parts))
        for min_rows in (1, rng.randint(2, 400), 1 << 40):
            _assert_equal(_fold(shuffled, min_rows), merged)
    assert sum(c[1].verdicts.num_rows for c in closes) > 0  # the faults gave verdicts to compare
    assert max(len(received[c[0].window_start_ns]) for c in closes) >= 3  # windows of several partials


def test_the_result_can_be_taken_again_and_folding_goes_on_after_it():
    index = PathIndex(_paths(INDEX_ROWS))
    parts = [summarize(WS, _probes(PROBES[i:i + 2]), index) for i in range(0, len(PROBES), 2)]
    f = PartialFold(WS, min_rows=1 << 40)
    f.add(parts[0]), f.add(parts[1])
    _assert_equal(f.result(), merge(parts[:2]))
    _assert_equal(f.result(), merge(parts[:2]))
    f.add(parts[2]), f.add(parts[0])
    _assert_equal(f.result(), merge([*parts, parts[0]]))
