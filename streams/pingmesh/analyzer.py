"""One closed window in, verdicts out: the R-Pingmesh Analyzer (§4.3, §5; digest Figure 3).

:func:`analyze_window` takes the merged counts of a window
(:func:`streams.pingmesh.partial.merge` of each worker's :func:`streams.pingmesh.partial.summarize`)
and runs the steps in the paper's fixed order, each living with its concept:

1.-3. the triage (:func:`streams.pingmesh.triage.triage`, one module per step): host down, stale QPN,
   the RNIC rule judged per host first (busy host, host unreachable), then ``rnic`` claims;
4. switch voting (:func:`streams.pingmesh.tomography.vote_step`: normalised greedy cover
   with a per-link test against the background loss);
5. latency anomalies (:func:`streams.pingmesh.latency.latency_step`);
6. impact grading and coverage (:mod:`streams.pingmesh.impact`).

It returns ``verdict.v1`` rows and the per-job coverage rows that ``blame`` needs, and
updates the carried :class:`AnalyzerState`. The one production caller is
:class:`streams.pingmesh.reducer.WindowReducer` (the benchmark and the tests drive it too).

Everything is event time: ``emitted_ns`` is the window's end, so replaying a
stream gives byte-identical verdicts, and ``verdict_id`` is a hash of
(window, kind, location, job, revision_of).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from schemas.arrow_pa import empty_table, table_from_columns
from schemas.verdicts import verdict_id
from streams.pingmesh.blame import COVERAGE_SCHEMA
from streams.pingmesh.busy_host import host_delay_p50
from streams.pingmesh.context import VERDICT, AnalyzerState, WindowContext, rnic_hosts
from streams.pingmesh.impact import (
    CoverageConfig,
    Footprint,
    JobThreshold,
    breaches,
    coverage_row,
    footprints,
    grade,
)
from streams.pingmesh.latency import LatencyConfig, latency_step
from streams.pingmesh.partial import PartialKeys, WindowPartial
from streams.pingmesh.tomography import VoteConfig, vote_step
from streams.pingmesh.triage import triage
from streams.pingmesh.triage_config import TriageConfig
from streams.pingmesh.windows import WINDOW_NS

__all__ = ["VERDICT", "AnalyzerConfig", "AnalyzerState", "WindowResult", "analyze_window", "verdict_id"]

REVISED_KINDS = ("rnic", "busy_host", "host_unreachable")
"""Kinds a later window may revise (``host_down`` / ``busy_host`` with ``revision_of``)."""


@dataclass(frozen=True)
class AnalyzerConfig:
    """All thresholds of the analyzer, grouped by step."""

    window_ns: int = WINDOW_NS
    triage: TriageConfig = TriageConfig()
    vote: VoteConfig = VoteConfig()
    latency: LatencyConfig = LatencyConfig()
    coverage: CoverageConfig = CoverageConfig()
    min_unexplained: int = 3
    """Failing probes left after the cover that make an ``undetermined`` verdict.

    ``undetermined`` verdicts (ties, access links below the RNIC rule, leftovers) make
    no claim, so their ``confidence`` is 0; the best link's is in the evidence."""
    baseline_ewma: float = 0.2


@dataclass
class WindowResult:
    """Output of :func:`analyze_window`: ``verdict.v1`` rows, coverage rows, and counts for logs.

    ``stats`` counts timed-out probes: ``timeouts`` in all, charged to ``host_down``,
    ``stale`` QPNs, ``rnic_charged`` (RNIC rule, host-level claims and 60 s charges), ``voted``,
    and the voted ones left ``unexplained`` or ``untraced``.
    """

    verdicts: pa.Table
    coverage: pa.Table
    stats: dict[str, int]


def analyze_window(
    partial: WindowPartial,
    *,
    registry: Mapping[str, int],
    host_last_upload: Mapping[str, int],
    state: AnalyzerState,
    job_metrics: pa.Table | None = None,
    thresholds: Mapping[str, JobThreshold] | None = None,
    config: AnalyzerConfig = AnalyzerConfig(),
    keys: PartialKeys | None = None,
) -> WindowResult:
    """Explain every timeout and tail of one closed window; update ``state``.

    Args:
        partial: the window's merged counts (one worker's, or :func:`streams.pingmesh.partial.merge` of all).
        registry: current QPN per RNIC (the compacted ``registry`` topic's newest rows).
        host_last_upload: newest upload time (ns, prober host clock) per host, from the
            watermark tracker (:attr:`streams.pingmesh.windows.WatermarkTracker.host_last_upload`);
            merged here with the window's own uploads.
        state: carried between windows; mutated.
        job_metrics: ``job_id``, ``sample_ns``, ``value`` rows covering the window, or None.
        thresholds: per-job threshold of the metric (P0 vs P1).
        config: thresholds of every step.
        keys: codes of ``partial``'s key columns already known (the reducer's fold of the partials,
            :meth:`streams.pingmesh.partial_fold.PartialFold.coded_result`): the steps group by them instead of
            hashing those columns again. The result does not depend on them.

    Returns:
        :class:`WindowResult` with ``verdict.v1`` rows sorted by (kind, location, job, revision_of).
    """
    cfg = config
    uploads = dict(host_last_upload)
    for h, u in zip(partial.uploads["host"].to_pylist(), partial.uploads["upload_ns"].to_pylist(), strict=True):
        uploads[h] = max(uploads.get(h, u), u)
    state.rnic_host.update(rnic_hosts(partial.pairs))
    ctx = WindowContext(partial, cfg.window_ns, uploads, state.rnic_host, state, keys=keys or {})
    # healthy loss a probe may meet (a floor, not this window's estimate: on a small fabric a busy
    # host and a dead link touch half the RNICs, and claims would be judged against the fault itself)
    background = cfg.triage.background_floor

    found = triage(ctx, registry, cfg.triage, background, cfg.vote.min_votes)    # 1-3
    down, busy_hosts = found.down, found.busy
    cover = vote_step(ctx, cfg.vote, cfg.triage.background_floor, cfg.min_unexplained,  # 4
                      cfg.triage.rnic_loss_ratio, cfg.triage.rnic_charge_ns)
    latency_step(ctx, cfg.latency, cfg.vote)                                   # 5

    # host delay baselines: EWMA of p50 over hosts not judged busy
    delay_keys = (ctx.key("delays", "host"), ctx.key("delays", "role")) if partial.delays.num_rows else None
    for (h, role), v in host_delay_p50(partial.delays, keys=delay_keys).items():
        if h in busy_hosts:
            continue
        old = state.host_baseline.get((h, role))
        state.host_baseline[(h, role)] = v if old is None else (1 - cfg.baseline_ewma) * old + cfg.baseline_ewma * v

    fps = footprints(ctx.partial.service)  # once: grading and coverage read the same
    verdicts = _grade(ctx, fps, job_metrics, thresholds or {}, cfg, state)    # 6
    coverage = _coverage(ctx, fps, down, cfg)
    failing = partial.failing
    fn = failing["n"].to_numpy() if failing.num_rows else np.zeros(0, np.int64)
    f_down, f_stale, f_rnic = (ctx.taken_failing(s) for s in ("host_down", "stale_qpn", "rnic"))
    voted = ~ctx.taken_failing()
    stats = {"timeouts": int(fn.sum()), "host_down": int(fn[f_down].sum()), "stale": int(fn[f_stale].sum()),
             "rnic_charged": int(fn[f_rnic & ~f_down & ~f_stale].sum()), "voted": int(fn[voted].sum()),
             "unexplained": cover.unexplained, "untraced": cover.untraced}
    return WindowResult(verdicts, coverage, stats)


def _grade(ctx: WindowContext, fps: Mapping[str, Footprint], job_metrics: pa.Table | None,
           thresholds: Mapping[str, JobThreshold], cfg: AnalyzerConfig, state: AnalyzerState) -> pa.Table:
    """Step 6: impact of every claim on the jobs it lies on (``fps``: the window's job footprints);
    ``verdict.v1`` rows; remember revisable claims."""
    ws, we = ctx.ws, ctx.we
    breach = breaches(job_metrics, ws, we, thresholds)
    out_rows: list[dict[str, object]] = []
    for c in ctx.claims:
        for impact, job, metric in grade(c.kind, c.location, fps, breach, ctx.rnic_host):
            ev = dict(c.evidence)
            if job is not None:
                ev["job_metric"] = metric
            vid = verdict_id(c.window_start_ns, c.kind, c.location, job, c.revision_of)
            out_rows.append({"kind": c.kind, "location": c.location, "votes": c.votes,
                             "confidence": c.confidence, "failed_probes": c.failed_probes,
                             "total_probes": c.total_probes, "revision_of": c.revision_of,
                             "window_start_ns": c.window_start_ns, "verdict_id": vid,
                             "window_end_ns": c.window_start_ns + cfg.window_ns, "impact": impact,
                             "job_id": job, "evidence": json.dumps(ev, sort_keys=True), "emitted_ns": we})
            if c.kind in REVISED_KINDS and c.revision_of is None:
                state.recent[(c.kind, c.location)] = (vid, c.window_start_ns)
    state.recent = {k: v for k, v in state.recent.items() if v[1] >= ws - cfg.triage.rnic_charge_ns}
    out_rows.sort(key=lambda r: (r["kind"], r["location"], r["job_id"] or "", r["revision_of"] or ""))
    if not out_rows:
        return empty_table(VERDICT)
    names = empty_table(VERDICT).schema.names
    return table_from_columns(VERDICT, {n: [r[n] for r in out_rows] for n in names})


def _coverage(ctx: WindowContext, fps: Mapping[str, Footprint], down: set[str], cfg: AnalyzerConfig) -> pa.Table:
    """Per-job coverage rows of the window (what ``blame`` needs to call the network innocent)."""
    ws, we, state = ctx.ws, ctx.we, ctx.state
    crossing = ctx.vote_crossing if ctx.vote_crossing is not None else ctx.partial.crossing
    cross_map = dict(zip(crossing["link"].to_pylist(), crossing["n"].to_pylist(), strict=True))
    cov_rows = []
    for job in sorted(fps):
        known = state.job_flows.setdefault(job, set())
        cov_rows.append({"window_start_ns": ws, "window_end_ns": we,
                         **coverage_row(job, fps[job], known, cross_map, down, cfg.coverage)})
        known |= fps[job].flows
        state.job_seen_ns[job] = ws
    for job in sorted(set(state.job_flows) - set(fps)):
        if ws - state.job_seen_ns.setdefault(job, ws) >= cfg.coverage.job_retention_ns:  # ended: forget it
            del state.job_flows[job], state.job_seen_ns[job]
            continue
        cov_rows.append({"window_start_ns": ws, "window_end_ns": we, "job_id": job,
                         "connections_expected": len(state.job_flows[job]), "connections_probed": 0,
                         "links_total": 0, "links_covered": 0, "agents_silent": "", "sufficient": False})
    return pa.Table.from_pylist(cov_rows, schema=COVERAGE_SCHEMA)
