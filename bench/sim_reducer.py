"""The simulator's uploads through the production window-closing path, in one process.

What the Faust app does across processes, minus Kafka: each agent's 5 s probe batch is
decomposed (:func:`schemas.probe_rows.decompose.decompose`), turned into the worker's step
(:func:`streams.pingmesh.reducer.worker_step`, one per partition and round, covering that
round's batches as consecutive raw offsets), encoded as the Faust worker sends it to
``window.partials`` (:func:`streams.pingmesh.step_message.encode_step`), and those messages go
to the one :class:`streams.pingmesh.reducer.WindowReducer`, which drops replayed steps, keeps
the watermark and closes, merges and analyzes windows. Traced paths and registry updates arrive first, as
agents and the controller publish them. The benchmark and the analyzer tests drive this;
there is no other copy of the closing path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from producers.controller_loop import SplitLoop
from producers.sim import Simulator
from producers.sim.engine import BATCH_NS
from producers.sim.stream import registry_updates
from schemas.arrow_pa import table_from_columns
from schemas.probe_rows.decompose import decompose
from streams.pingmesh.analyzer import AnalyzerConfig, WindowResult
from streams.pingmesh.partial import from_bytes, link_counts
from streams.pingmesh.path_index import PathIndex
from streams.pingmesh.probe_requests import down_endpoints, named_links, requests_from_verdicts
from streams.pingmesh.reducer import UploadMark, WindowReducer, worker_step
from streams.pingmesh.step_message import Step, encode_step
from streams.pingmesh.tomography import tor_mesh_probes


@dataclass
class SimPipeline:
    """One simulator feeding ``workers`` in-process workers and the production reducer.

    Attributes:
        sim: the simulator (its clock starts where the caller says).
        workers: workers (= source partitions of ``probes.raw``); agent ``a`` goes to
            ``partition_of(a)``.
        reducer: the production :class:`WindowReducer` (a fixed processing clock: no idleness).
    """

    sim: Simulator
    workers: int = 1
    config: AnalyzerConfig = field(default_factory=AnalyzerConfig)
    partition_of: Callable[[str], int] | None = None
    watch: frozenset[str] = frozenset()
    reducer: WindowReducer = field(init=False)
    paths: PathIndex = field(default_factory=PathIndex)
    link_probes: dict[int, dict[str, int]] = field(default_factory=dict)
    """window start → link → probes that crossed it (for the links in ``watch``; ground-truth
    bookkeeping of the benchmark: how many probes a fault on that link could fail)."""
    link_failures: dict[int, dict[str, int]] = field(default_factory=dict)
    """window start → link → timed-out probes whose forward or ACK path crossed it (links in ``watch``)."""
    far_probes: dict[int, int] = field(default_factory=dict)
    """window start → probes that left their ToR (every pinglist but the ToR mesh; counted with ``watch``): what
    the vote measures a switch link's background over (:func:`bench.accuracy.link_test_rate`)."""
    offsets: dict[int, int] = field(default_factory=dict)
    """raw partition → next offset (each agent upload is one raw message)."""
    loop: SplitLoop | None = None
    """The controller's closed loop, in-process: verdicts of a window that closes in round N change the
    probes of round N + 1 (:mod:`producers.controller_loop`); None: the pinglists stay as built."""
    requests: list[dict] = field(default_factory=list)
    """Every probe request the closed windows made (when ``loop`` is set)."""
    standing: list[dict] = field(default_factory=list)
    """Bounced probes kept in the plan from the first round on, beside the loop's entries
    (:func:`producers.controller_ident.standing_bounces`); empty: none."""

    def __post_init__(self) -> None:
        self.reducer = WindowReducer(config=self.config, partitions=self.workers, clock=lambda: 0.0)

    def _partition(self, agent: str, i: int) -> int:
        if self.workers == 1:
            return 0
        return self.partition_of(agent) if self.partition_of else i % self.workers

    def _count(self, ws: int, partial: object) -> None:
        pairs = partial.pairs  # type: ignore[attr-defined]
        if pairs.num_rows:
            far = int(pc.sum(pairs["n"]).as_py() or 0) - tor_mesh_probes(pairs)
            self.far_probes[ws] = self.far_probes.get(ws, 0) + far
        failed = link_counts(partial.failing) if partial.failing.num_rows else None  # type: ignore[attr-defined]
        for book, table in ((self.link_probes, partial.crossing), (self.link_failures, failed)):  # type: ignore[attr-defined]
            d = book.setdefault(ws, {})
            if table is None:
                continue
            for lk, n in zip(table["link"].to_pylist(), table["n"].to_pylist(), strict=True):
                if lk in self.watch:
                    d[lk] = d.get(lk, 0) + int(n)

    def start(self, t_ns: int) -> None:
        """The controller's registry rows as of ``t_ns`` (before the first upload round), and the standing
        bounced probes."""
        self.reducer.on_registry(table_from_columns("registry.v1", self.sim.registry_columns(t_ns)))
        if self.standing:
            self.sim.set_extra(self.standing)

    def round(self, t0_ns: int, tag: str = "") -> list[tuple[int, WindowResult]]:
        """One 5 s upload round starting at ``t0_ns``; returns the windows it closed, oldest first."""
        reg = registry_updates(self.sim, t0_ns, t0_ns + BATCH_NS)
        if reg["rnic"]:
            self.reducer.on_registry(table_from_columns("registry.v1", reg))
        batches = self.sim.upload_batches(t0_ns)
        traced = [table_from_columns("path.v1", c) for _, _, c in batches if len(c["hops"])]
        if traced:  # the round's traces at once (the index re-sorts per update)
            self.paths.update(pa.concat_tables(traced))
        per_part: dict[int, list[pa.Table]] = {}
        idle: list[tuple[int, str]] = []
        for i, (agent, probe_cols, _) in enumerate(batches):
            if len(probe_cols["seq"]):
                per_part.setdefault(self._partition(agent, i), []).append(
                    table_from_columns("probe.v1", probe_cols))
            else:
                idle.append((self._partition(agent, i), agent))
        out: list[tuple[int, WindowResult]] = []
        for part in sorted(per_part):  # one worker step per partition: its agents' batches of the round
            enriched = decompose(pa.concat_tables(per_part[part]), f"sim/{tag}/{t0_ns}/{part}")
            step = worker_step(enriched, self.paths, self.config.window_ns, self._take(part, len(per_part[part])),
                               part)
            if self.watch:
                for ws, blob in step.partials.items():
                    self._count(ws, from_bytes(blob))
            out += self._send(step)
        for part, agent in idle:  # an agent with nothing to send still uploads (a heartbeat)
            out += self._send(Step(self._take(part, 1), {}, [(part, UploadMark(agent, t0_ns + BATCH_NS, agent))]))
        if self.loop is not None:
            now = t0_ns + BATCH_NS
            for _, res in out:
                reqs = requests_from_verdicts(res.verdicts)
                self.requests += reqs
                self.loop.on_named(named_links(res.verdicts), now)
                self.loop.on_down(down_endpoints(res.verdicts), now)
                self.loop.on_requests(reqs, now)
            self.sim.set_extra([*self.standing, *self.loop.entries(now)])
        return out

    def _take(self, part: int, n: int) -> dict[int, tuple[int, int]]:
        """The raw offset range of the next ``n`` messages of ``part``."""
        first = self.offsets.get(part, 0)
        self.offsets[part] = first + n
        return {part: (first, first + n - 1)}

    def _send(self, step: Step) -> list[tuple[int, WindowResult]]:
        out: list[tuple[int, WindowResult]] = []
        for headers, value in encode_step(step):
            out += self.reducer.receive(dict(headers), value)
        return out

    def run(self, t0_ns: int, seconds: int, tag: str = "", max_rounds: int | None = None,
            from_ns: int | None = None) -> list[tuple[int, WindowResult]]:
        """Rounds from ``t0_ns`` until ``seconds // 20`` windows starting at or after ``from_ns`` (default
        ``t0_ns``) have closed (or ``max_rounds``, default ``seconds // 5 + 4``)."""
        self.start(t0_ns - BATCH_NS)
        lo = t0_ns if from_ns is None else from_ns
        want = seconds * 1_000_000_000 // self.config.window_ns
        out: list[tuple[int, WindowResult]] = []
        for k in range(max_rounds if max_rounds is not None else seconds // 5 + 4):
            out += [(ws, r) for ws, r in self.round(t0_ns + k * BATCH_NS, tag) if ws >= lo]
            if len(out) >= want:
                break
        return out[:want]
