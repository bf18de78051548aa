"""The production window-closing path fed like the Faust app feeds it: one worker, and several workers
(source partitions) whose serialised partials the one reducer merges, give the same verdicts."""

from __future__ import annotations

import pytest

sim = pytest.importorskip("producers.sim")
from analyzer_sim import T0  # noqa: E402

from bench.sim_reducer import SimPipeline  # noqa: E402
from producers.sim.fabrics import panel1  # noqa: E402


def _verdicts(faults, workers):
    s = sim.Simulator(panel1(), seed=3, faults=faults, inter_tor="even")
    pipe = SimPipeline(s, workers=workers)  # agents alternate over the partitions
    return pipe.run(T0, 40, tag=f"w{workers}")


@pytest.mark.parametrize(("faults", "expected"), [
    ([sim.LinkDown(a="A", b="S3")], {("switch", "A->S3")}),
    ([sim.BusyHost(host="H1")], {("busy_host", "H1")}),
], ids=["link_down", "busy_host"])
def test_one_worker_and_two_workers_give_the_same_verdicts(faults, expected):
    one = _verdicts(faults, 1)
    two = _verdicts(faults, 2)
    assert [ws for ws, _ in one] == [ws for ws, _ in two] == [T0, T0 + 20 * 10**9]
    for (_, a), (_, b) in zip(one, two, strict=True):
        assert a.verdicts.equals(b.verdicts)
    kinds = {(v["kind"], v["location"]) for _, r in one for v in r.verdicts.to_pylist()}
    assert kinds == expected
