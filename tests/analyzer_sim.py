"""Drive the production window-closing path (:class:`bench.sim_reducer.SimPipeline`: worker messages
into :class:`streams.pingmesh.reducer.WindowReducer`) over the ``sim`` backend, for the analyzer tests."""

from __future__ import annotations

from dataclasses import dataclass

from bench.sim_reducer import SimPipeline
from producers.sim import Simulator
from streams.pingmesh.analyzer import AnalyzerConfig, WindowResult

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
    """Simulate ``seconds`` of uploads from ``T0`` and analyze every window the watermark closes
    (windows before ``T0`` hold only probes of NTP-skewed host clocks and are left out)."""
    sim = Simulator(inv, seed=seed, faults=faults, **sim_kw)
    pipe = SimPipeline(sim, workers=workers, config=config)
    return SimRun(sim, pipe.run(T0, seconds, tag="test"))


def right(v: dict, truth: list[dict], rnic_host: dict[str, str]) -> bool:
    """Whether a verdict names an injected fault (kind and location; stale QPN per RNIC counts for its host)."""
    for t in truth:
        loc = v["location"]
        if v["kind"] == "stale_qpn":
            loc = rnic_host.get(loc, loc)
        if v["revision_of"] is None and v["kind"] == t["kind"] and loc == t["location"]:
            return True
    return False
