"""The analyzer fed like the Faust app feeds it: one process (:class:`Analyzer`), and several
workers whose serialised partials one reducer merges."""

from __future__ import annotations

import pytest

sim = pytest.importorskip("producers.sim")
from analyzer_sim import T0, S  # noqa: E402

from producers.sim.fabrics import panel1  # noqa: E402
from schemas.arrow_pa import table_from_columns  # noqa: E402
from streams.pingmesh.analyzer import Analyzer, AnalyzerState, analyze_window  # noqa: E402
from streams.pingmesh.links import PathIndex  # noqa: E402
from streams.pingmesh.partial import from_bytes, merge, summarize, to_bytes  # noqa: E402
from streams.pingmesh.rtt import decompose  # noqa: E402
from streams.pingmesh.windows import WatermarkTracker  # noqa: E402


def _stream(faults, seconds=45):
    s = sim.Simulator(panel1(), seed=3, faults=faults, inter_tor="even")
    for k in range(seconds // 5):
        t = T0 + k * 5 * S
        yield t, s.registry_columns(t), s.upload_batches(t)


def _one_process(faults):
    a = Analyzer()
    out = []
    for t, reg, batches in _stream(faults):
        a.on_registry(table_from_columns("registry.v1", reg))
        for _, _, paths in batches:
            a.on_paths(table_from_columns("path.v1", paths))
        for i, (_, probes, _) in enumerate(batches):
            out += a.on_probes(decompose(table_from_columns("probe.v1", probes), f"p/{t}/{i}"))
    return [r for r in out if r.verdicts.num_rows == 0 or r.verdicts["window_start_ns"][0].as_py() >= T0]


def _workers(faults, n_workers):
    trackers = [WatermarkTracker() for _ in range(n_workers)]
    index = PathIndex()  # the paths topic is read by every worker (a global table)
    reducer: dict[int, list[bytes]] = {}
    closer, state, registry, out = WatermarkTracker(), AnalyzerState(), {}, []
    for t, reg, batches in _stream(faults):
        registry.update(zip(reg["rnic"], (int(q) for q in reg["qpn"]), strict=True))
        for _, _, paths in batches:
            index.update(table_from_columns("path.v1", paths))
        for i, (agent, probes, _) in enumerate(batches):
            w = hash(agent) % n_workers if n_workers > 1 else 0
            tab = decompose(table_from_columns("probe.v1", probes), f"p/{t}/{i}")
            closer.observe(tab)
            for ws, rows in trackers[w].observe(tab).on_time.items():
                reducer.setdefault(ws, []).append(to_bytes(summarize(ws, rows, index)))
        for ws in closer.close_ready():
            merged = merge([from_bytes(b) for b in reducer.pop(ws)])
            out.append(analyze_window(merged, registry=registry, host_last_upload=closer.host_last_upload,
                                      state=state))
    return [r for r in out if r.verdicts.num_rows == 0 or r.verdicts["window_start_ns"][0].as_py() >= T0]


@pytest.mark.parametrize("faults", [[sim.LinkDown(a="A", b="S3")], [sim.BusyHost(host="H1")]],
                         ids=["link_down", "busy_host"])
def test_one_process_and_two_workers_give_the_same_verdicts(faults):
    one = _one_process(faults)
    two = _workers(faults, 2)
    assert len(one) == len(two) >= 2
    for a, b in zip(one, two, strict=True):
        assert a.verdicts.equals(b.verdicts)
    kinds = {(v["kind"], v["location"]) for r in one for v in r.verdicts.to_pylist()}
    assert kinds == {("switch", "A->S3")} if faults[0].fault == "link_down" else {("busy_host", "H1")}
