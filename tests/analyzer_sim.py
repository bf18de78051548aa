"""Drive the analyzer over the ``sim`` backend the way the workers do: tracker → summarize → merge → analyze."""

from __future__ import annotations

from dataclasses import dataclass

from producers.sim import Simulator
from schemas.arrow_pa import table_from_columns
from streams.pingmesh.analyzer import AnalyzerConfig, AnalyzerState, WindowResult, analyze_window
from streams.pingmesh.links import PathIndex
from streams.pingmesh.partial import WindowPartial, merge, summarize
from streams.pingmesh.rtt import decompose
from streams.pingmesh.windows import WatermarkTracker

S = 1_000_000_000
T0 = 1_000_000 * 20 * S


@dataclass
class SimRun:
    sim: Simulator
    results: list[tuple[int, WindowResult]]

    def verdicts(self) -> list[dict]:
        return [r for _, res in self.results for r in res.verdicts.to_pylist()]


def run(inv, faults, *, seconds: int = 40, seed: int = 0, workers: int = 1,
        config: AnalyzerConfig = AnalyzerConfig(), **sim_kw) -> SimRun:
    """Simulate ``seconds`` of uploads from ``T0`` and analyze every window the watermark closes."""
    sim = Simulator(inv, seed=seed, faults=faults, **sim_kw)
    tracker, state = WatermarkTracker(), AnalyzerState()
    parts: dict[int, list[WindowPartial]] = {}
    index = PathIndex()
    out = []
    for k in range(seconds // 5 + 3):
        batches = sim.upload_batches(T0 + k * 5 * S)
        for _, _, path_cols in batches:
            index.update(table_from_columns("path.v1", path_cols))
        for i, (_agent, probe_cols, _path_cols) in enumerate(batches):
            probes = decompose(table_from_columns("probe.v1", probe_cols), f"sim/{k}/{i}")
            routed = tracker.observe(probes)
            for ws, rows in routed.on_time.items():
                parts.setdefault(ws, []).append(summarize(ws, rows, index))
        for ws in tracker.close_ready():
            reg = {r: sim.qpn_at(r, ws + 20 * S) for r in inv.rnics}
            res = analyze_window(merge(parts.pop(ws)), registry=reg, host_last_upload=tracker.host_last_upload,
                                 state=state, config=config)
            if ws >= T0:  # the window before T0 holds only probes of NTP-skewed host clocks
                out.append((ws, res))
        if len(out) * 20 >= seconds:
            break
    return SimRun(sim, out)


def right(v: dict, truth: list[dict], rnic_host: dict[str, str]) -> bool:
    """Whether a verdict names an injected fault (kind and location; stale QPN per RNIC counts for its host)."""
    for t in truth:
        loc = v["location"]
        if v["kind"] == "stale_qpn":
            loc = rnic_host.get(loc, loc)
        if v["revision_of"] is None and v["kind"] == t["kind"] and loc == t["location"]:
            return True
    return False
