"""How the CPU benchmarks repeat: `bench profile`'s step figures are medians with their spread, not the best
run; `bench.step_pair` alternates which tree steps first."""

from __future__ import annotations

import itertools

import pytest

from bench import profile as bp
from bench import step_pair as sp


def test_step_cpu_reports_the_median_and_the_range_not_the_best_repeat():
    clock = itertools.accumulate([0.0, 0.3, 0.0, 0.1, 0.0, 0.2, 0.0, 0.5, 0.0, 0.4])  # each call's CPU s
    ticks = iter(clock)
    samples = bp.cpu_samples(lambda: None, rows=100_000, repeat=5, clock=lambda: next(ticks))
    assert samples == pytest.approx([3.0, 1.0, 2.0, 5.0, 4.0])  # µs per row, in order
    s = bp.Spread.of(samples)
    assert (s.median, s.low, s.high, s.first, s.repeats) == pytest.approx((3.0, 1.0, 5.0, 3.0, 5))
    assert str(s) == "3.00 µs (range 1.00-5.00 over 5, first 3.00)"
    with pytest.raises(ValueError, match="at least one sample"):
        bp.Spread.of([])


_ORDER_CHILD = """
import os, sys
print("ready", flush=True)
for _ in sys.stdin:
    with open(os.environ["ORDER_FILE"], "a") as f:
        f.write(os.path.basename(os.environ["PYTHONPATH"]) + "\\n")
    print(1.0 if os.path.basename(os.environ["PYTHONPATH"]) == "old" else 0.5, flush=True)
"""


def test_step_pair_alternates_which_tree_steps_first(tmp_path, monkeypatch):
    order = tmp_path / "order"
    monkeypatch.setenv("ORDER_FILE", str(order))
    r = sp.run(str(tmp_path / "old"), str(tmp_path / "new"), rounds=4, child=_ORDER_CHILD)
    assert order.read_text().split() == ["old", "new", "new", "old", "old", "new", "new", "old"]
    assert r["old"] == [1.0] * 4 and r["new"] == [0.5] * 4 and r["ratios"] == [0.5] * 4
