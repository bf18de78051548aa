"""The window reducer: merges the workers' partials of a window and analyzes it once (R-Pingmesh §4.3).

Workers partitioned over ``probes.raw`` each see part of a window. Each worker step sends
one :class:`~streams.pingmesh.step_message.Step` (its serialised
:class:`~streams.pingmesh.partial.WindowPartial` per window, its upload marks and the raw
offset ranges it covers). The one reducer keeps the global watermark from the marks, so a
window closes only when every live agent has uploaded past its end (or the grace passed),
then runs :func:`streams.pingmesh.analyzer.analyze_window` on its merged partials (folded into
integer-coded sums as they arrive, :class:`~streams.pingmesh.partial_fold.PartialFold`, so the close
does not re-merge them). Merging partials is exact, so the verdict equals the one-worker verdict. A
step whose raw offsets were already merged (a restarted worker's replay, a zombie's resend) is dropped
by its ranges. No Kafka here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streams.pingmesh.analyzer import AnalyzerConfig, AnalyzerState, WindowResult, analyze_window
from streams.pingmesh.impact import JobThreshold
from streams.pingmesh.partial import from_bytes, summarize, to_bytes
from streams.pingmesh.partial_fold import PartialFold
from streams.pingmesh.path_index import PathIndex
from streams.pingmesh.qpn_history import QpnHistory
from streams.pingmesh.step_message import (
    Step,
    StepFormatError,
    UploadMark,
    decode_body,
    encode_step,
    part_of,
)
from streams.pingmesh.windows import WatermarkTracker, split_by_window, window_starts

__all__ = ["StepFormatError", "UploadMark", "WindowReducer", "batch_marks", "batch_partials", "worker_messages",
           "worker_step"]


def batch_partials(enriched: pa.Table, paths: PathIndex, window_ns: int,
                   encoded: Mapping[str, pa.DictionaryArray] | None = None,
                   buckets: Mapping[str, np.ndarray] | None = None) -> dict[int, bytes]:
    """Worker side: ``{window_start_ns: serialised partial}`` of one ``probe_enriched.v1`` batch.

    ``encoded``, ``buckets``: optional dictionary-encoded key columns and latency store buckets of the same
    rows (the step's, shared with the minute tier: :func:`schemas.group_codes.dictionaries`,
    :func:`schemas.probe_rows.minute_tier.latency_buckets`), split by window with the rows."""
    windows = split_by_window(enriched, window_ns)
    if (encoded or buckets) and len(windows) > 1:
        starts = window_starts(enriched, window_ns)
        out = {}
        for ws, rows in windows.items():
            mask = starts == ws
            enc = {c: d.filter(pa.array(mask)) for c, d in (encoded or {}).items()}
            out[ws] = to_bytes(summarize(ws, rows, paths, enc, {c: b[mask] for c, b in (buckets or {}).items()}))
        return out
    return {ws: to_bytes(summarize(ws, rows, paths, encoded, buckets)) for ws, rows in windows.items()}


def batch_marks(enriched: pa.Table) -> list[UploadMark]:
    """Upload marks of a ``probe_enriched.v1`` batch: newest upload per (agent, prober host)."""
    if enriched.num_rows == 0:
        return []
    g = enriched.group_by(["agent_id", "prober_host"]).aggregate([("upload_ns", "max")])
    return [UploadMark(a, int(u), h) for a, h, u in
            zip(g["agent_id"].to_pylist(), g["prober_host"].to_pylist(), g["upload_ns_max"].to_pylist(),
                strict=True)]


def worker_step(enriched: pa.Table, paths: PathIndex, window_ns: int, ranges: Mapping[int, tuple[int, int]],
                partition: int = 0) -> Step:
    """Worker side: the :class:`~streams.pingmesh.step_message.Step` of one step over ``enriched`` (the rows
    of the raw messages in ``ranges``, all read from raw ``partition``)."""
    marks = [(partition, m) for m in batch_marks(enriched)]
    parts = batch_partials(enriched, paths, window_ns) if enriched.num_rows else {}
    return Step(dict(ranges), parts, marks)


def worker_messages(enriched: pa.Table, paths: PathIndex, window_ns: int, ranges: Mapping[int, tuple[int, int]],
                    partition: int = 0) -> list[tuple[list[tuple[str, bytes]], bytes]]:
    """Worker side: the ``window.partials`` messages ``[(headers, value)]`` of :func:`worker_step`, as the
    Faust worker sends them (:meth:`WindowReducer.receive` takes them in this order)."""
    return encode_step(worker_step(enriched, paths, window_ns, ranges, partition))


@dataclass
class _Assembly:
    """The parts of a multi-part step received so far."""

    ranges: dict[int, tuple[int, int]]
    parts: list[bytes | None]


@dataclass
class WindowReducer:
    """Reducer side: partials in, :class:`~streams.pingmesh.analyzer.WindowResult` of each closed window out.

    The watermark is kept per source partition of ``probes.raw`` (the skew between
    partitions is unbounded when a recorded stream is replayed at full speed, so one
    tracker over all of them would close windows before a lagging partition's
    partials arrive). The global watermark is the minimum over the partitions that
    are active. Processing time is used for one thing only, as in Flink's idleness:
    a partition that has sent nothing for ``idle_s`` seconds (no live agent hashes to
    it) stops holding the watermark back; until every one of ``partitions`` has been
    seen or ``idle_s`` has passed since start, nothing closes. When every partition is
    idle (the input ended), a partition counts unless its newest upload is over the
    liveness time behind the newest of all, as an agent within one. A step marks every
    partition it covers as seen before its marks move the watermark: otherwise the
    first big step after a stall (a restarted worker's backlog) would close windows on
    the marks of its first partition while the others, in the same step, still counted
    as idle (their hosts then looked silent: spurious ``host_down``).

    Attributes:
        late_partials: partials that arrived after their window closed (counted, not analyzed).
    """

    config: AnalyzerConfig = field(default_factory=AnalyzerConfig)
    partitions: int = 1
    idle_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    trackers: dict[int, WatermarkTracker] = field(default_factory=dict)
    last_seen: dict[int, float] = field(default_factory=dict)
    open_windows: set[int] = field(default_factory=set)
    closed_before: int = -(2**62)
    state: AnalyzerState = field(default_factory=AnalyzerState)
    registry: dict[str, int] = field(default_factory=dict)
    """RNIC → newest QPN registered."""
    qpns: QpnHistory = field(default_factory=QpnHistory)
    """The registrations over event time: a window's stale QPNs are judged against its own time."""
    thresholds: dict[str, JobThreshold] = field(default_factory=dict)
    job_metrics: pa.Table | None = None
    pending: dict[int, PartialFold] = field(default_factory=dict)
    """open window → its partials so far, folded as they arrive (the close only takes the result)."""
    late_partials: int = 0
    started: float | None = None
    first_upload_ns: int | None = None
    registered_hosts: set[str] = field(default_factory=set)
    raw_merged: dict[int, int] = field(default_factory=dict)
    """raw partition → highest ``probes.raw`` offset whose step was applied (the step dedup)."""
    assembling: dict[str, _Assembly] = field(default_factory=dict)
    dropped_steps: dict[str, int] = field(default_factory=lambda: {"replay": 0, "overlap": 0})
    """Steps not applied: ``replay`` (every offset already merged), ``overlap`` (some were)."""
    last_step: Step | None = None
    """The step applied last (its marks feed the worker's per-agent metrics)."""

    def on_registry(self, rows: pa.Table) -> None:
        """``registry.v1`` rows: the newest QPN per RNIC replaces the old one; their hosts are known."""
        if rows.num_rows:
            t = rows.sort_by([("upload_ns", "ascending")])
            self.qpns.update(zip(t["rnic"].to_pylist(), t["qpn"].to_pylist(), t["upload_ns"].to_pylist(),
                                 strict=True))
            self.registry.update(self.qpns.latest)
            self.registered_hosts.update(h for h in t["host"].to_pylist() if h)

    def on_job_metrics(self, rows: pa.Table) -> None:
        """``jobmetric.v1`` rows (``job_id``, ``sample_ns``, ``value``)."""
        rows = rows.select(["job_id", "sample_ns", "value"])
        self.job_metrics = rows if self.job_metrics is None else pa.concat_tables([self.job_metrics, rows])

    def receive(self, headers: Mapping[str, bytes], value: bytes) -> list[tuple[int, WindowResult]]:
        """One ``window.partials`` message (a step, or one part of a step): the windows it closed.

        Raises:
            StepFormatError: not a step message of :mod:`streams.pingmesh.step_message`'s format.
        """
        part = part_of(headers)
        if self._novelty(part.ranges) != "new":
            self.assembling.pop(part.step_id, None)
            if part.index == part.count - 1:  # count a step once, at its last part
                self.dropped_steps[self._novelty(part.ranges)] += 1
            return []
        if part.count == 1:
            body = value
        else:
            a = self.assembling.setdefault(part.step_id, _Assembly(part.ranges, [None] * part.count))
            if len(a.parts) != part.count or a.ranges != part.ranges:
                raise StepFormatError(f"step {part.step_id}: part {part.index}/{part.count} does not match "
                                      f"its earlier parts")
            a.parts[part.index] = value
            if any(p is None for p in a.parts):
                return []
            del self.assembling[part.step_id]
            body = b"".join(a.parts)  # type: ignore[arg-type]
        return self.apply_step(decode_body(part.ranges, body))

    def _novelty(self, ranges: Mapping[int, tuple[int, int]]) -> Literal["new", "replay", "overlap"]:
        """``new``: no offset merged yet; ``replay``: all merged; ``overlap``: some merged (a zombie
        worker racing the partition's new owner; a merged aggregate cannot be split, so it is dropped)."""
        merged = [(a, b, self.raw_merged.get(p, -1)) for p, (a, b) in ranges.items()]
        if all(b <= hwm for _, b, hwm in merged):
            return "replay"
        return "overlap" if any(a <= hwm for a, _, hwm in merged) else "new"

    def apply_step(self, step: Step) -> list[tuple[int, WindowResult]]:
        """Merge a step that covers no merged raw offset: its partials first, then its marks, oldest upload
        first, each as one message at a time would bring it (so the watermark never passes a window before
        the step's rows for it are in, and the verdicts do not depend on how messages were grouped into
        steps: tests/streams/test_step_grouping.py). A replayed step is dropped (counted in ``dropped_steps``).
        """
        novelty = self._novelty(step.ranges)
        if novelty != "new":
            self.dropped_steps[novelty] += 1
            return []
        now = self._input_at()
        for p, (_, b) in step.ranges.items():
            self.raw_merged[p] = b
        for p in {*step.ranges, *(p for p, _ in step.marks)}:
            self.last_seen[p] = now  # every partition of the step is alive, whichever mark comes first
        if self.assembling:  # a step whose last parts never came (its worker died) is superseded now
            self.assembling = {k: a for k, a in self.assembling.items() if self._novelty(a.ranges) == "new"}
        self.last_step = step
        for ws, blob in sorted(step.partials.items()):
            self.add(None, ws, blob, min(step.ranges))
        out: list[tuple[int, WindowResult]] = []
        # Oldest upload first, as one message at a time would bring them: an agent's newest upload
        # jumping ahead of a laggard's intermediate uploads would eject the laggard from the live set
        # (windows.WatermarkTracker.live_agents) and close a window before the laggard's rows came in.
        for p, m in sorted(step.marks, key=lambda pm: (pm[1].upload_ns, pm[0], pm[1].agent_id)):
            out += self.add(m, None, None, p)
        return out

    def _input_at(self) -> float:
        """Processing time now; the first call starts the reducer's clock (the unseen-partition rule)."""
        now = self.clock()
        if self.started is None:
            self.started = now
        return now

    def add(self, mark: UploadMark | None, window_start_ns: int | None, partial: bytes | None,
            partition: int = 0) -> list[tuple[int, WindowResult]]:
        """A partial of one window (no dedup: :meth:`apply_step` does that) and/or an upload mark (an idle
        agent's heartbeat, when alone) from raw ``partition``; the windows that closed.
        """
        now = self._input_at()
        if window_start_ns is not None and partial is not None:
            if window_start_ns < self.closed_before:
                self.late_partials += 1
            else:
                fold = self.pending.get(window_start_ns)
                if fold is None:
                    fold = self.pending[window_start_ns] = PartialFold(window_start_ns)
                fold.add(from_bytes(partial))
                self.open_windows.add(window_start_ns)
        if mark is None:
            return []
        self.first_upload_ns = min(self.first_upload_ns or mark.upload_ns, mark.upload_ns)
        tracker = self.trackers.get(partition)
        if tracker is None:  # not setdefault: that would build a tracker per mark
            tracker = self.trackers[partition] = WatermarkTracker(window_ns=self.config.window_ns)
        tracker.heartbeat(mark.agent_id, mark.upload_ns, mark.host)
        self.last_seen[partition] = now
        return self.close_ready()

    def host_last_upload(self) -> dict[str, int]:
        """Newest upload (ns) per prober host over all partitions (the host-down rule reads it).

        A registered host not heard from yet counts as last heard at the first upload this reducer
        saw: when the pipeline (re)starts, an agent that has not uploaded yet is not down until the
        stream has run 20 s without it. An unregistered host never heard from stays silent for ever.
        """
        out: dict[str, int] = {}
        for t in self.trackers.values():
            for h, u in t.host_last_upload.items():
                out[h] = max(out.get(h, u), u)
        if self.first_upload_ns is not None:
            for h in self.registered_hosts - out.keys():
                out[h] = self.first_upload_ns
        return out

    def watermark(self) -> int | None:
        """Event time (ns) up to which every active partition is complete, or None while waiting."""
        now = self.clock()
        if self.started is None:
            return None
        if len(self.trackers) < self.partitions and now - self.started < self.idle_s:
            return None  # a partition not heard from yet may still be catching up
        active = [t.watermark() for p, t in self.trackers.items() if now - self.last_seen[p] < self.idle_s]
        active = [w for w in active if w is not None]
        if active or not self.trackers:
            return min(active) if active else None
        # The whole input has been quiet for idle_s (the end of a replay; every worker waiting): no partition
        # is behind in processing any more, so one is left out as an agent is inside a partition
        # (WatermarkTracker.live_agents): when its newest upload is over the liveness time behind the newest.
        # Without this a partition whose only agent died held every later window open once the input ended.
        newest = {p: n for p, t in self.trackers.items() if (n := t.newest()) is not None}
        top = max(newest.values(), default=None)
        if top is None:
            return None
        live = [self.trackers[p].watermark() for p, n in newest.items()
                if top - n <= self.trackers[p].liveness_ns]
        return min((w for w in live if w is not None), default=None)

    def _registry_at(self, ws: int) -> dict[str, int]:
        """The registry as of the window's end (event time); entries set directly on ``registry`` (tests,
        recovery) count as registered from the beginning."""
        return {**self.registry, **self.qpns.at(ws + self.config.window_ns)} if self.qpns.latest else self.registry

    def close_ready(self) -> list[tuple[int, WindowResult]]:
        """Analyze every window the watermark has passed, oldest first: ``[(window_start_ns, result)]``."""
        wm = self.watermark()
        if wm is None:
            return []
        out = []
        for ws in sorted(w for w in self.open_windows if w + self.config.window_ns <= wm):
            self.open_windows.discard(ws)
            self.closed_before = max(self.closed_before, ws + self.config.window_ns)
            fold = self.pending.pop(ws, None)
            if fold is not None:
                merged, keys = fold.coded_result()  # the fold's codes: the analyzer does not hash the keys again
                out.append((ws, analyze_window(merged, registry=self._registry_at(ws),
                                               host_last_upload=self.host_last_upload(), state=self.state,
                                               job_metrics=self.job_metrics, thresholds=self.thresholds,
                                               config=self.config, keys=keys)))
        if self.job_metrics is not None and out:
            self.job_metrics = self.job_metrics.filter(
                pc.greater_equal(self.job_metrics["sample_ns"], self.closed_before))
        return out
