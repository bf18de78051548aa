"""The window reducer: merges the workers' partials of a window and analyzes it once (R-Pingmesh §4.3).

Workers partitioned over ``probes.raw`` each see part of a window. Each sends,
per batch, one serialised :class:`~streams.pingmesh.partial.WindowPartial` per window the
batch touches, plus the batch's upload marks (agent, upload time, host). The one
reducer keeps the global watermark from those marks, so a window closes only
when every live agent has uploaded past its end (or the grace passed), then
merges and runs :func:`streams.pingmesh.analyzer.analyze_window`. Merging partials is
exact, so the verdict equals the one-worker verdict. No Kafka here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from streams.pingmesh.analyzer import AnalyzerConfig, AnalyzerState, WindowResult, analyze_window
from streams.pingmesh.impact import JobThreshold
from streams.pingmesh.links import PathIndex
from streams.pingmesh.partial import WindowPartial, from_bytes, merge, summarize, to_bytes
from streams.pingmesh.windows import WatermarkTracker, split_by_window


def batch_partials(enriched: pa.Table, paths: PathIndex, window_ns: int) -> dict[int, bytes]:
    """Worker side: ``{window_start_ns: serialised partial}`` of one ``probe_enriched.v1`` batch."""
    return {ws: to_bytes(summarize(ws, rows, paths)) for ws, rows in split_by_window(enriched, window_ns).items()}


@dataclass
class UploadMark:
    """Who uploaded and when (prober host clock, ns): what moves the watermark."""

    agent_id: str
    upload_ns: int
    host: str | None


def batch_marks(enriched: pa.Table) -> list[UploadMark]:
    """Upload marks of a ``probe_enriched.v1`` batch: newest upload per (agent, prober host)."""
    if enriched.num_rows == 0:
        return []
    g = enriched.group_by(["agent_id", "prober_host"]).aggregate([("upload_ns", "max")])
    return [UploadMark(a, int(u), h) for a, h, u in
            zip(g["agent_id"].to_pylist(), g["prober_host"].to_pylist(), g["upload_ns_max"].to_pylist(),
                strict=True)]


def message_args(headers: Mapping[str, bytes]) -> tuple[UploadMark, int | None, int, int | None]:
    """(mark, window start or None, source partition, source offset or None) of one ``window.partials``
    message's headers.

    Raises:
        KeyError: the headers lack ``agent_id`` or ``upload_ns``.
    """
    ws = headers.get("window_start_ns", b"")
    mark = UploadMark(headers["agent_id"].decode(), int(headers["upload_ns"]),
                      headers.get("host", b"").decode() or None)
    off = headers.get("src_offset", b"")
    return mark, int(ws) if ws else None, int(headers.get("src_partition", b"0")), int(off) if off else None


def worker_messages(enriched: pa.Table, paths: PathIndex, window_ns: int
                    ) -> list[tuple[UploadMark, int | None, bytes | None]]:
    """Worker side: the ``window.partials`` messages of one probe batch, as (mark, window, partial).

    Every mark but the last goes alone; the last rides on each window's partial (or alone
    when the batch touches no window). :meth:`WindowReducer.add` takes them in this order.
    """
    marks = batch_marks(enriched)
    parts = batch_partials(enriched, paths, window_ns) if enriched.num_rows else {}
    out: list[tuple[UploadMark, int | None, bytes | None]] = [(m, None, None) for m in marks[:-1]]
    if marks:
        out += [(marks[-1], ws, blob) for ws, blob in sorted(parts.items())] or [(marks[-1], None, None)]
    return out


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
    seen or ``idle_s`` has passed since start, nothing closes.

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
    thresholds: dict[str, JobThreshold] = field(default_factory=dict)
    job_metrics: pa.Table | None = None
    pending: dict[int, list[WindowPartial]] = field(default_factory=dict)
    late_partials: int = 0
    started: float | None = None
    first_upload_ns: int | None = None
    registered_hosts: set[str] = field(default_factory=set)
    sources: dict[int, set[tuple[int, int]]] = field(default_factory=dict)
    """window → (partition, offset) of the probes.raw batches merged into it (open windows only)."""

    def on_registry(self, rows: pa.Table) -> None:
        """``registry.v1`` rows: the newest QPN per RNIC replaces the old one; their hosts are known."""
        if rows.num_rows:
            t = rows.sort_by([("upload_ns", "ascending")])
            self.registry.update(zip(t["rnic"].to_pylist(), t["qpn"].to_pylist(), strict=True))
            self.registered_hosts.update(h for h in t["host"].to_pylist() if h)

    def on_job_metrics(self, rows: pa.Table) -> None:
        """``jobmetric.v1`` rows (``job_id``, ``sample_ns``, ``value``)."""
        rows = rows.select(["job_id", "sample_ns", "value"])
        self.job_metrics = rows if self.job_metrics is None else pa.concat_tables([self.job_metrics, rows])

    def add(self, mark: UploadMark, window_start_ns: int | None, partial: bytes | None,
            partition: int = 0, source: int | None = None) -> list[tuple[int, WindowResult]]:
        """One message from a worker: a partial of one window (or none, for an idle heartbeat),
        about a batch read from ``partition`` of ``probes.raw`` at offset ``source`` (if known).

        A partial of a window from a (partition, offset) already merged into it is dropped: a worker
        that crashed before committing processes that batch again, and the repeat must count once.
        """
        now = self.clock()
        if self.started is None:
            self.started = now
        if window_start_ns is not None and partial is not None:
            seen = self.sources.get(window_start_ns, set())
            if window_start_ns < self.closed_before:
                self.late_partials += 1
            elif source is None or (partition, source) not in seen:
                if source is not None:
                    self.sources.setdefault(window_start_ns, set()).add((partition, source))
                self.pending.setdefault(window_start_ns, []).append(from_bytes(partial))
                self.open_windows.add(window_start_ns)
        self.first_upload_ns = min(self.first_upload_ns or mark.upload_ns, mark.upload_ns)
        tracker = self.trackers.setdefault(partition, WatermarkTracker(window_ns=self.config.window_ns))
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
        return min(active) if active else None

    def close_ready(self) -> list[tuple[int, WindowResult]]:
        """Analyze every window the watermark has passed, oldest first: ``[(window_start_ns, result)]``."""
        wm = self.watermark()
        if wm is None:
            return []
        out = []
        for ws in sorted(w for w in self.open_windows if w + self.config.window_ns <= wm):
            self.open_windows.discard(ws)
            self.closed_before = max(self.closed_before, ws + self.config.window_ns)
            self.sources.pop(ws, None)
            parts = self.pending.pop(ws, None)
            if parts:
                out.append((ws, analyze_window(merge(parts), registry=self.registry,
                                               host_last_upload=self.host_last_upload(), state=self.state,
                                               job_metrics=self.job_metrics, thresholds=self.thresholds,
                                               config=self.config)))
        if self.job_metrics is not None and out:
            self.job_metrics = self.job_metrics.filter(
                pc.greater_equal(self.job_metrics["sample_ns"], self.closed_before))
        return out
