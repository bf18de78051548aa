"""Host before RNIC: the triage steps that judge a whole host (R-Pingmesh §5; digest Figure 3).

When every RNIC of a host fails at once, the cause is the host, not N RNICs:

* ``host_down``: the host's agent stopped uploading and its RNICs stopped answering. The
  paper's rule waits 20 s of silence; here a host whose agent missed two uploads
  (``TriageConfig.host_silent_ns``, 10 s) inside the window *and* whose RNICs time out is
  down in that same window, so a host dying mid-window is never charged to its RNICs.
* ``busy_host``: the busy-host veto (CPU contention, 30 of the paper's 50 RNIC reports),
  judged from the 5 s slot in which the host's failures started, not the window median
  (a host busy for the last 8 s of a window has an unmoved window median).
* ``host_unreachable``: most RNICs of one host fail the RNIC rule together while its agent
  keeps uploading and its delays are normal. One claim about the host; the next window
  confirms it (again ``host_unreachable``) or revises it (``host_down`` or ``busy_host``
  with ``revision_of`` set).

A ``host_down`` or ``busy_host`` verdict revises the ``rnic`` / ``busy_host`` /
``host_unreachable`` verdicts of the host's RNICs in earlier windows (``revision_of``).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow.compute as pc

from streams.pingmesh.context import WindowContext, isin, log_poisson_tail, saturating, significance, sums_by
from streams.pingmesh.triage import (
    BusyHost,
    RnicFinding,
    TriageConfig,
    busy_by_delay,
    busy_host_veto,
    down_hosts,
    failure_onset,
    tor_mesh_sums,
)

UPLOAD_NS = 5_000_000_000
"""Agent upload period (R-Pingmesh §5: every 5 s), ns."""


def _probe_evidence(failed: int, total: int, q: float, tests: int) -> float:
    """Significance of ``failed`` timeouts among ``total`` probes against background loss ``q``."""
    if total <= 0:
        return 0.0
    return significance(float(log_poisson_tail(failed, total * q)[0]), tests)


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
        conf = (1.0 - 0.1 ** max(missed, 0.0)) * (_probe_evidence(failed, total, background, n_hosts)
                                                  if total else saturating(missed, 2.0))
        ev = {"silent_ns": int(min(silent, 2**62)), "timeouts": failed,
              "within_window": bool(h in quiet)}
        ctx.emit("host_down", h, failed, conf, failed, total, ev)
        ctx.revise([(k, loc) for rn in ctx.rnics_of(h) for k, loc in (("rnic", rn),)]
                   + [("busy_host", h), ("host_unreachable", h)],
                   "host_down", h, failed, conf, failed, total, {"silent_ns": ev["silent_ns"]})
    return down


def host_step(ctx: WindowContext, findings: list[RnicFinding], cfg: TriageConfig, background: float,
              min_votes: int) -> tuple[list[RnicFinding], set[str], set[str]]:
    """Step 3a: the RNIC rule's findings judged per host, before any RNIC is blamed.

    Runs the busy-host veto (from each host's failure onset), the veto's wider half
    (:func:`streams.pingmesh.triage.busy_by_delay`: a slow host whose RNICs' timeouts are
    below the rule), and the ``host_unreachable`` grouping (at least ``host_share`` of a
    host's RNICs, and two, flagged together).

    Returns:
        (findings left for ``rnic`` verdicts, RNICs whose timeouts this step explained, busy hosts).
    """
    p = ctx.partial
    failing = p.failing
    f_before = ctx.taken_failing("host_down", "stale_qpn")
    by_host: dict[str, list[RnicFinding]] = {}
    for f in findings:
        h = ctx.rnic_host.get(f.rnic)
        if h is not None:
            by_host.setdefault(h, []).append(f)
    onset = failure_onset(p.slots, set(by_host) | _hosts_with_timeouts(ctx, f_before))
    delay_keys = (ctx.key("delays", "host"), ctx.key("delays", "role")) if p.delays.num_rows else None
    busy = busy_host_veto(findings, ctx.rnic_host, p.delays, ctx.state.host_baseline, cfg, onset, delay_keys)
    out_rnics: set[str] = set()
    by_rnic = {f.rnic: f for f in findings}
    n_hosts = max(len({h for h in ctx.rnic_host.values()}), 1)
    for b in busy:
        failed = sum(by_rnic[r].failed for r in b.rnics)
        total = sum(by_rnic[r].total for r in b.rnics)
        _emit_busy(ctx, b, failed, total, background, n_hosts, onset.get(b.host, 0), {})
        # every timeout at a busy host is the host's, flagged RNIC or not (none may reach the vote)
        out_rnics |= set(ctx.rnics_of(b.host))
    for b in busy_by_delay(p.delays, ctx.state.host_baseline, {b.host for b in busy}, cfg, onset, delay_keys):
        rn = set(ctx.rnics_of(b.host))
        hit = (isin(failing, "responder_rnic", rn) | isin(failing, "prober_rnic", rn)) & ~f_before
        failed = int(failing["n"].to_numpy()[hit].sum()) if failing.num_rows else 0
        if failed >= min_votes:
            busy.append(b)
            out_rnics |= rn
            flagged = sorted(f.rnic for f in by_host.get(b.host, []))
            _emit_busy(ctx, b, failed, failed, background, n_hosts, onset.get(b.host, 0),
                       {"below_rnic_rule": not flagged, "rnics": sorted(rn), "flagged_rnics": flagged})
    busy_hosts = {b.host for b in busy}
    busy_rnics = set(out_rnics)
    rest: list[RnicFinding] = []
    below = _below_rule_sums(ctx, set(by_rnic), cfg)
    for h, fs in sorted(by_host.items()):
        # a peer seen failing only by a busy host's RNICs is not an RNIC fault: the busy prober
        # timed out on it (it took its replies late), so the RNIC rule's two probers are not there
        fs = [f for f in fs if f.rnic not in out_rnics and len(set(f.probers) - busy_rnics) >= cfg.rnic_min_probers]
        n_rn = len(ctx.rnics_of(h))
        if h in busy_hosts or not fs:
            continue
        # the host's other RNICs failing at half the rule's ratio or more count with the flagged ones: a
        # host that stops answering late in the window fails every RNIC's probes a little, and the rule
        # flags only the RNICs whose share happens to cross it
        dirty = sorted(r for r in ctx.rnics_of(h) if r in below and r not in by_rnic and r not in out_rnics)
        members = len(fs) + len(dirty)
        if members >= 2 and members >= math.ceil(cfg.host_share * n_rn):
            failed = sum(f.failed for f in fs) + sum(below[r][0] for r in dirty)
            total = sum(f.total for f in fs) + sum(below[r][1] for r in dirty)
            share = members / max(n_rn, 1)
            conf = share * _probe_evidence(failed, total, background, n_hosts)
            ctx.emit("host_unreachable", h, failed, conf, failed, total,
                     {"rnics": sorted([*(f.rnic for f in fs), *dirty]), "below_rnic_rule": dirty,
                      "rnics_of_host": n_rn, "ratio": round(failed / max(total, 1), 6), "agent_uploading": True})
            out_rnics |= {f.rnic for f in fs} | set(dirty)
        else:
            rest.extend(fs)
    rest.sort(key=lambda f: [x.rnic for x in findings].index(f.rnic))
    return rest, out_rnics, busy_hosts


def _below_rule_sums(ctx: WindowContext, flagged: set[str], cfg: TriageConfig) -> dict[str, tuple[int, int]]:
    """RNIC → (timeouts, probes) of the RNICs whose ToR-mesh probes time out at half the RNIC rule's ratio
    or more, counted as the rule counts them: probes no earlier step took, from probers not flagged."""
    return {r: (f, t) for r, (f, t) in tor_mesh_sums(ctx, flagged).items() if t and f / t > cfg.rnic_loss_ratio / 2}


def _hosts_with_timeouts(ctx: WindowContext, exclude: np.ndarray) -> set[str]:
    f = ctx.partial.failing
    if f.num_rows == 0:
        return set()
    keep = ~exclude
    return set(np.asarray(f["responder_host"].to_pylist(), dtype=object)[keep]) | \
        set(np.asarray(f["prober_host"].to_pylist(), dtype=object)[keep])


def _emit_busy(ctx: WindowContext, b: BusyHost, failed: int, total: int, background: float, n_hosts: int,
               onset_slot: int, extra: dict) -> None:
    """A ``busy_host`` claim, and its revisions of earlier ``rnic`` verdicts at the host's RNICs.

    Confidence: how far the delay is over the veto's factor (log scale) times the significance
    of the timeouts against the background loss.
    """
    over = math.log(max(b.delay_p50_ns / max(b.baseline_ns, 1.0), 1.0)) / math.log(10.0)
    conf = saturating(over, 0.5) * _probe_evidence(failed, total, background, n_hosts)
    ev = {"rnics": sorted(b.rnics) or ctx.rnics_of(b.host), "role": b.role, "delay_p50_ns": round(b.delay_p50_ns),
          "baseline_ns": round(b.baseline_ns), "onset_slot": int(onset_slot), **extra}
    ctx.emit("busy_host", b.host, failed, conf, failed, total, ev)
    ctx.revise([("rnic", rn) for rn in ctx.rnics_of(b.host)] + [("host_unreachable", b.host)],
               "busy_host", b.host, failed, conf, failed, total, {"delay_p50_ns": ev["delay_p50_ns"]})
