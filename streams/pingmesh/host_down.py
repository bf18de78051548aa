"""Triage step 1, host down: the target's agent went silent (R-Pingmesh §5; digest Figure 3).

The paper's rule waits 20 s of silence (:func:`down_hosts`); here a host whose agent missed two uploads
(``TriageConfig.host_silent_ns``, 10 s) inside the window *and* whose RNICs time out is down in that same
window (:func:`host_down_step`), so a host dying mid-window is never charged to its RNICs. A ``host_down``
verdict revises the ``rnic`` / ``busy_host`` / ``host_unreachable`` verdicts of the host in earlier windows
(``revision_of``).
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow.compute as pc

from streams.pingmesh.context import WindowContext, isin, probe_evidence, saturating, sums_by
from streams.pingmesh.triage_config import TriageConfig

UPLOAD_NS = 5_000_000_000
"""Agent upload period (R-Pingmesh §5: every 5 s), ns."""


def down_hosts(window_end_ns: int, host_last_upload: Mapping[str, int], targets: set[str],
               cfg: TriageConfig) -> set[str]:
    """Step 1: target hosts whose agent has been silent for more than ``host_down_ns`` at the window end.

    A target never seen uploading counts as silent since forever.
    """
    return {h for h in targets if window_end_ns - host_last_upload.get(h, -(2**62)) > cfg.host_down_ns}


def host_down_step(ctx: WindowContext, cfg: TriageConfig, background: float) -> set[str]:
    """Step 1: hosts whose agent went silent; returns them and takes their probes.

    A target is down when its agent has been silent for more than ``host_down_ns`` at the
    window end (the paper's rule), or when it stopped uploading inside the window: at the
    upload due 5 s after the window's end (the one carrying its last 5 s), it has been silent
    for at least ``host_silent_ns`` (two uploads missed), while the probes to its RNICs time
    out (at least ``min_failed`` of them, on most of its RNICs). Event time only: the same
    verdict whenever the window closes and whatever arrived by then.

    Confidence: missed uploads (each a tenth of the odds that a live agent merely lags) times the
    significance of the timeouts to its RNICs against the background loss.
    """
    pairs = ctx.partial.pairs
    targets = set(pc.unique(pairs["responder_host"]).to_pylist())
    down = down_hosts(ctx.we, ctx.uploads, targets, cfg)
    quiet: dict[str, int] = {}
    due = ctx.we + UPLOAD_NS
    for h in targets - down:
        last = ctx.uploads.get(h)
        if last is None or last >= ctx.we:
            continue
        if due - last >= cfg.host_silent_ns:
            quiet[h] = due - last
    if quiet:
        sums = sums_by(pairs, isin(pairs, "responder_host", set(quiet)), "responder_rnic")
        for h in sorted(quiet):
            rn = ctx.rnics_of(h)
            hit = [r for r in rn if sums.get(r, (0, 0))[0] > 0]
            failed = sum(sums.get(r, (0, 0))[0] for r in rn)
            if failed >= cfg.min_failed and 2 * len(hit) > len(rn):
                down.add(h)
    p_down = isin(pairs, "responder_host", down)
    ctx.take("host_down", p_down, isin(ctx.partial.failing, "responder_host", down))
    host_sums = sums_by(pairs, p_down, "responder_host")
    n_hosts = max(len(targets), 1)
    for h in sorted(down):
        failed, total = host_sums.get(h, (0, 0))
        silent = min(ctx.we - ctx.uploads.get(h, -(2**62)), 2**62)  # at the window's end (the paper's)
        missed = min(due - ctx.uploads.get(h, -(2**62)), 2**62) / UPLOAD_NS
        conf = (1.0 - 0.1 ** max(missed, 0.0)) * (probe_evidence(failed, total, background, n_hosts)
                                                  if total else saturating(missed, 2.0))
        ev = {"silent_ns": int(min(silent, 2**62)), "timeouts": failed,
              "within_window": bool(h in quiet)}
        ctx.emit("host_down", h, failed, conf, failed, total, ev)
        ctx.revise([(k, loc) for rn in ctx.rnics_of(h) for k, loc in (("rnic", rn),)]
                   + [("busy_host", h), ("host_unreachable", h)],
                   "host_down", h, failed, conf, failed, total, {"silent_ns": ev["silent_ns"]})
    return down
