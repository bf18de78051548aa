"""Triage step 3a, busy host: the busy-host veto (R-Pingmesh §5; digest Figure 3).

Added by the paper's authors after their evaluation, where CPU contention caused 30 of the 50 RNIC
reports: when several RNICs of one host are flagged together by the RNIC rule and the host's successful
probes show responder or prober delay far above baseline, the verdict is ``busy_host``, not ``rnic``
(:func:`busy_host_veto`); a host that slow whose RNICs stay below the rule is busy too
(:func:`busy_by_delay`). The delay is judged from the 5 s slot in which the host's failures started
(:func:`failure_onset`), not the window median (a host busy for the last 8 s of a window has an unmoved
window median). A ``busy_host`` verdict revises the earlier ``rnic`` and ``host_unreachable`` verdicts of
the host (``revision_of``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import Key, group, key, to_numpy
from streams.pingmesh.context import WindowContext, isin, lookup_per_code, probe_evidence, saturating
from streams.pingmesh.partial import coded_quantile
from streams.pingmesh.rnic_rule import RnicFinding, findings_by_host
from streams.pingmesh.triage_config import TriageConfig


def host_delay_p50(delays: pa.Table, from_slot: Mapping[str, int] | None = None,
                   keys: tuple[Key, Key] | None = None) -> dict[tuple[str, str], float]:
    """Median responder / prober delay (ns) per (host, role) from the window's histograms.

    Args:
        delays: ``host``, ``role``, ``slot``, ``bucket``, ``n`` (:attr:`WindowPartial.delays`).
        from_slot: per host, the first 5 s slot to count (the slot its failures started in):
            a host busy for the last half of a window has its median over that half, not
            over the window (whose median has not moved yet). Hosts not named count from 0.
        keys: codes of ``delays``' ``host`` and ``role`` (:func:`schemas.group_codes.key`, e.g. the reducer
            fold's), or None to code them here.
    """
    if delays.num_rows == 0:
        return {}
    host, role = keys if keys is not None else (key(delays["host"]), key(delays["role"]))
    if from_slot:  # each host's first slot, looked up once per distinct host
        first = pc.fill_null(lookup_per_code(host, from_slot), 0)
        keep = to_numpy(delays["slot"]).astype(np.int64) >= to_numpy(first).astype(np.int64)[host.codes]
        if not keep.any():
            return {}
        delays, host, role = delays.filter(pa.array(keep)), host.take(keep), role.take(keep)
    # (host, role) groups on integer codes, each group's histogram read in bucket order (one int64 sort)
    g = group([host, role])
    gids, p50 = coded_quantile(g.gid, g.n_groups, to_numpy(delays["bucket"]), to_numpy(delays["n"]), 0.5)
    hosts, roles = host.values(g.codes[0]).to_pylist(), role.values(g.codes[1]).to_pylist()
    return {(str(hosts[i]), str(roles[i])): float(v) for i, v in zip(gids.tolist(), p50.tolist(), strict=True)}


def failure_onset(slots: pa.Table, hosts: set[str], share: float = 0.5) -> dict[str, int]:
    """First 5 s slot of the window in which each host's timeouts started.

    The onset is the first slot whose timeout ratio reaches ``share`` of the host's worst
    slot's ratio (a stray background timeout earlier does not count). Hosts without
    timeouts are left out.

    Args:
        slots: ``host``, ``slot``, ``n``, ``n_timeout`` (:attr:`WindowPartial.slots`).
        hosts: hosts to look at.
    """
    if slots.num_rows == 0 or not hosts:
        return {}
    t = slots.filter(pc.is_in(slots["host"], pa.array(sorted(hosts), pa.string())))
    out: dict[str, int] = {}
    by: dict[str, list[tuple[int, float]]] = {}
    for h, s, n, f in zip(t["host"].to_pylist(), t["slot"].to_pylist(), t["n"].to_pylist(),
                          t["n_timeout"].to_pylist(), strict=True):
        by.setdefault(h, []).append((int(s), f / max(n, 1)))
    for h, rows in by.items():
        worst = max(r for _, r in rows)
        if worst > 0:
            out[h] = min(s for s, r in rows if r >= share * worst)
    return out


def fleet_baseline(p50: Mapping[tuple[str, str], float], baseline: Mapping[tuple[str, str], float]
                   ) -> dict[str, float]:
    """The delay baseline (ns) per role of a host that has none of its own: the median of the baselines
    learned for that role (``baseline``: EWMAs over windows in which the host was not judged busy), else,
    before any is learned, the median of the window's ``p50`` per (host, role).

    The window's median counts the busy hosts' delays: with half of a fleet busy (Panel 1, three of six
    hosts) it lies between the healthy and the busy delays, and a host busy since before its baseline was
    learned is then not 10x over it, window after window (seed 1317, scenario 145: ``H5`` named in the
    first window only, when it was the one busy host). The learned baselines leave busy windows out.
    """
    out: dict[str, float] = {}
    for role in ("responder", "prober"):
        vals = [v for (_, r), v in baseline.items() if r == role] or [v for (_, r), v in p50.items() if r == role]
        if vals:
            out[role] = float(np.median(vals))
    return out


@dataclass(frozen=True)
class BusyHost:
    """A host vetoed as busy: its flagged RNICs and the delay evidence (ns)."""

    host: str
    rnics: tuple[str, ...]
    delay_p50_ns: float
    baseline_ns: float
    role: str


def busy_host_veto(findings: list[RnicFinding], rnic_host: Mapping[str, str], delays: pa.Table,
                   baseline: Mapping[tuple[str, str], float], cfg: TriageConfig,
                   onset: Mapping[str, int] | None = None, keys: tuple[Key, Key] | None = None) -> list[BusyHost]:
    """The busy-host veto inside step 3: which flagged RNICs are really one busy host.

    A host qualifies when at least ``min(busy_min_rnics, its RNIC count)`` of its
    RNICs are flagged and the p50 responder or prober delay of its successful
    probes in the window exceeds ``busy_delay_factor`` × baseline and
    ``busy_min_delay_ns``. The baseline of a (host, role) is the given one when
    known, else the fleet's (:func:`fleet_baseline`). Timed-out probes
    carry no t4−t3, so only successful probes count. With ``onset`` (host → first slot of
    its failures, :func:`failure_onset`) a host's median counts from its onset. ``keys``: as
    :func:`host_delay_p50`'s.
    """
    if not cfg.busy_host_veto or not findings:
        return []
    p50 = host_delay_p50(delays, keys=keys)
    fleet = fleet_baseline(p50, baseline)
    if onset:
        p50.update(host_delay_p50(delays, onset, keys))
    n_rnics: dict[str, int] = {}
    for h in rnic_host.values():
        n_rnics[h] = n_rnics.get(h, 0) + 1
    by_host: dict[str, list[str]] = {}
    for fnd in findings:
        h = rnic_host.get(fnd.rnic)
        if h is not None:
            by_host.setdefault(h, []).append(fnd.rnic)
    out = []
    for h, rnics in sorted(by_host.items()):
        if len(rnics) < min(cfg.busy_min_rnics, n_rnics.get(h, 1)):
            continue
        for role in ("responder", "prober"):
            d = p50.get((h, role))
            b = baseline.get((h, role), fleet.get(role))
            if d is None or b is None:
                continue
            if d > cfg.busy_delay_factor * b and d > cfg.busy_min_delay_ns:
                out.append(BusyHost(h, tuple(sorted(rnics)), d, b, role))
                break
    return out


def busy_by_delay(delays: pa.Table, baseline: Mapping[tuple[str, str], float], exclude: set[str],
                  cfg: TriageConfig, onset: Mapping[str, int] | None = None,
                  keys: tuple[Key, Key] | None = None) -> list[BusyHost]:
    """Hosts whose successful probes show responder or prober delay p50 above ``busy_delay_factor`` ×
    baseline, even though none of their RNICs passed the RNIC rule.

    The analyzer charges such a host's timeouts to it (``busy_host``) instead of voting
    them onto its access links: host delay is a host problem, never a network one. ``onset``
    and ``keys`` as in :func:`busy_host_veto`.
    """
    if not cfg.busy_host_veto:
        return []
    p50 = host_delay_p50(delays, keys=keys)
    fleet = fleet_baseline(p50, baseline)
    if onset:
        p50.update(host_delay_p50(delays, onset, keys))
    out = []
    for (h, role), d in sorted(p50.items()):
        b = baseline.get((h, role), fleet.get(role))
        if h in exclude or b is None or any(x.host == h for x in out):
            continue
        if d > cfg.busy_delay_factor * b and d > cfg.busy_min_delay_ns:
            out.append(BusyHost(h, (), d, b, role))
    return out


def busy_host_step(ctx: WindowContext, findings: list[RnicFinding], cfg: TriageConfig, background: float,
                   min_votes: int) -> tuple[set[str], set[str]]:
    """Step 3a: the RNIC rule's findings judged per host, before any RNIC is blamed: ``busy_host`` claims.

    Runs the busy-host veto (from each host's failure onset) and the veto's wider half
    (:func:`busy_by_delay`: a slow host whose RNICs' timeouts are below the rule, with at least
    ``min_votes`` timeouts at its RNICs).

    Returns:
        (RNICs whose timeouts the busy hosts explain: every RNIC of each, busy hosts).
    """
    p = ctx.partial
    failing = p.failing
    f_before = ctx.taken_failing("host_down", "stale_qpn")
    by_host = findings_by_host(findings, ctx.rnic_host)
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
    return out_rnics, {b.host for b in busy}


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
    conf = saturating(over, 0.5) * probe_evidence(failed, total, background, n_hosts)
    ev = {"rnics": sorted(b.rnics) or ctx.rnics_of(b.host), "role": b.role, "delay_p50_ns": round(b.delay_p50_ns),
          "baseline_ns": round(b.baseline_ns), "onset_slot": int(onset_slot), **extra}
    ctx.emit("busy_host", b.host, failed, conf, failed, total, ev)
    ctx.revise([("rnic", rn) for rn in ctx.rnics_of(b.host)] + [("host_unreachable", b.host)],
               "busy_host", b.host, failed, conf, failed, total, {"delay_p50_ns": ev["delay_p50_ns"]})
