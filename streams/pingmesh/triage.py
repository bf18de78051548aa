"""Triage of a window's timeouts in R-Pingmesh's fixed order (§4.3 and §5; digest Figure 3).

1. ``host_down``: the target's agent uploaded nothing for more than 20 s.
2. ``stale_qpn``: the probe carried a QPN the registry no longer lists for the
   target (it restarted): probe noise, dropped.
3. ``rnic``: more than 10 % of the ToR-mesh probes to one RNIC timed out, seen
   from at least two probers that are not themselves suspects; its timeouts are
   charged to it for 60 s and kept out of voting. Inside this step the
   *busy-host veto* (added by the paper's authors after their evaluation, where
   CPU contention caused 30 of the 50 RNIC reports): when several RNICs of one
   host are flagged together and the host's successful probes show responder or
   prober delay far above baseline, the verdict is ``busy_host``, not ``rnic``.
4. Everything else goes to the vote (:mod:`streams.pingmesh.tomography`).

All functions take the merged counts of a window (:mod:`streams.pingmesh.partial`) and
are vectorised over pairs; the RNIC rule loops once per flagged RNIC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import Key, group, key, run_starts, sort_order, to_numpy
from streams.pingmesh.context import WindowContext, isin, log_poisson_tail, saturating, significance, sums_by
from streams.pingmesh.partial import bucket_value


@dataclass(frozen=True)
class TriageConfig:
    """Thresholds of the triage; defaults are the paper's (§5) where it gives one.

    Attributes:
        host_down_ns: an agent silent longer than this is down (20 s).
        rnic_loss_ratio: share of ToR-mesh probes to an RNIC that must time out (0.10).
        rnic_min_probers: distinct non-suspect probers that must see the loss (2).
        rnic_charge_ns: how long an RNIC's timeouts stay charged to it (60 s).
        busy_host_veto: apply the busy-host veto (on).
        busy_delay_factor: host delay p50 over baseline that makes a host busy (10x).
        busy_min_delay_ns: and at least this p50 host delay (200 µs).
        busy_min_rnics: flagged RNICs of one host needed ("several": 2, or all if fewer).
        host_silent_ns: an agent that stopped uploading inside the window and has been silent
            this long (two missed 5 s uploads) is down when its RNICs time out too (10 s).
        min_failed: timeouts to a host's RNICs that make such a silent host down (2).
        host_share: share of a host's RNICs flagged together that makes the claim one about the
            host (``host_unreachable``), never one ``rnic`` verdict per RNIC (0.5).
        background_floor: per-probe background timeout rate assumed at least (1e-3; a healthy
            link loses 1e-5..1e-4 of packets and a probe crosses up to 8 links each way).
    """

    host_down_ns: int = 20_000_000_000
    rnic_loss_ratio: float = 0.10
    rnic_min_probers: int = 2
    rnic_charge_ns: int = 60_000_000_000
    busy_host_veto: bool = True
    busy_delay_factor: float = 10.0
    busy_min_delay_ns: int = 200_000
    busy_min_rnics: int = 2
    host_silent_ns: int = 10_000_000_000
    min_failed: int = 2
    host_share: float = 0.5
    background_floor: float = 1e-3


def down_hosts(window_end_ns: int, host_last_upload: Mapping[str, int], targets: set[str],
               cfg: TriageConfig) -> set[str]:
    """Step 1: target hosts whose agent has been silent for more than ``host_down_ns`` at the window end.

    A target never seen uploading counts as silent since forever.
    """
    return {h for h in targets if window_end_ns - host_last_upload.get(h, -(2**62)) > cfg.host_down_ns}


def _lookup_per_code(k: Key, mapping: Mapping[str, int]) -> pa.Array:
    """``mapping``'s value (int64) for each distinct value of ``k``, indexed by code (null where the name is not
    in ``mapping``): one lookup per distinct name, not per row."""
    at = pc.index_in(k.values(np.arange(k.card, dtype=np.int64)), value_set=pa.array(list(mapping), pa.string()))
    return pc.take(pa.array(list(mapping.values()), pa.int64()), at)


def stale_mask(t: pa.Table, registry: Mapping[str, int], responder: Key | None = None) -> np.ndarray:
    """Step 2: rows whose ``qpn`` differs from the registry's current QPN of ``responder_rnic``.

    RNICs missing from the registry are not judged stale (no evidence). ``responder``: codes of ``t``'s
    ``responder_rnic`` (:func:`schemas.group_codes.key`), or None to code them here; the registry is looked up
    once per distinct RNIC, not per row.
    """
    if t.num_rows == 0 or not registry:
        return np.zeros(t.num_rows, dtype=bool)
    rk = responder if responder is not None else key(t["responder_rnic"])
    cur_of = _lookup_per_code(rk, registry).to_numpy(zero_copy_only=False)
    cur = np.asarray(cur_of, dtype=np.float64)[rk.codes]  # NaN: not registered
    qpn = np.asarray(t["qpn"].to_numpy(zero_copy_only=False), dtype=np.float64)
    return ~np.isnan(cur) & (cur != qpn)


@dataclass(frozen=True)
class RnicFinding:
    """An RNIC flagged by the ToR-mesh rule: probes to it in the window, timeouts, the probers seeing it."""

    rnic: str
    failed: int
    total: int
    probers: tuple[str, ...]


def rnic_rule(tor_mesh: pa.Table, cfg: TriageConfig, keys: tuple[Key, Key] | None = None) -> list[RnicFinding]:
    """Step 3: RNICs with more than ``rnic_loss_ratio`` of their ToR-mesh probes timed out.

    Peels suspects one at a time: the responder seen failing by the most distinct
    probers (then the highest ratio, then the name) is flagged, and every probe it
    sent or answered leaves the counts before the next round, so a faulty prober
    never makes its peers look faulty and two bad RNICs under one ToR are both found.

    Args:
        tor_mesh: per-pair counts with ``prober_rnic``, ``responder_rnic``, ``n``, ``n_timeout``
            (stale-QPN and host-down rows already removed).
        keys: codes of its ``prober_rnic`` and ``responder_rnic`` (:func:`schemas.group_codes.key`, e.g. the
            reducer fold's), or None to code them here. The rounds run over (prober, responder) groups of
            integer codes; names are looked up for the flagged RNICs only.

    Returns:
        Findings in flagging order.
    """
    if tor_mesh.num_rows == 0:
        return []
    pk, rk = keys if keys is not None else (key(tor_mesh["prober_rnic"]), key(tor_mesh["responder_rnic"]))
    g = group([pk, rk])
    p, r = g.codes  # per (prober, responder) group; responder codes are ranks: their order is the names'
    n = np.bincount(g.gid, weights=to_numpy(tor_mesh["n"]), minlength=g.n_groups).round().astype(np.int64)
    f = np.bincount(g.gid, weights=to_numpy(tor_mesh["n_timeout"]), minlength=g.n_groups).round().astype(np.int64)
    names = rk.values(np.arange(rk.card, dtype=np.int64))
    prober_names = pk.values(np.arange(pk.card, dtype=np.int64))
    as_prober = to_numpy(pc.fill_null(pc.index_in(names, value_set=prober_names), -1)).astype(np.int64)
    active = np.ones(len(p), dtype=bool)
    found: list[RnicFinding] = []
    while True:
        tot = np.bincount(r, weights=n * active, minlength=rk.card)
        bad = np.bincount(r, weights=f * active, minlength=rk.card)
        seen = np.bincount(r, weights=(f > 0) & active, minlength=rk.card)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(tot > 0, bad / tot, 0.0)
        cand = np.flatnonzero((ratio > cfg.rnic_loss_ratio) & (seen >= cfg.rnic_min_probers))
        if not len(cand):
            return found
        i = cand[np.lexsort((cand, -ratio[cand], -seen[cand]))[0]]  # most probers, highest ratio, first name
        sel = active & (r == i) & (f > 0)
        probers = tuple(sorted(map(str, prober_names.take(pa.array(p[sel], pa.int64())).to_pylist())))
        found.append(RnicFinding(str(names[int(i)].as_py()), int(bad[i]), int(tot[i]), probers))
        active &= (p != as_prober[i]) & (r != i)


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
        first = pc.fill_null(_lookup_per_code(host, from_slot), 0)
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


def coded_quantile(gid: np.ndarray, n_groups: int, bucket: np.ndarray, n: np.ndarray, q: float,
                   min_tail: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """:func:`group_quantile` of histogram rows in any order whose groups are integer codes ``gid`` in
    ``[0, n_groups)``: the rows are put in (group, bucket) order by one int64 sort. Returns (the groups
    present, ascending; values in ns)."""
    bucket, n = np.asarray(bucket, np.int64), np.asarray(n, np.int64)
    lo, width = int(bucket.min()), int(bucket.max() - bucket.min()) + 1
    srt = sort_order(gid * width + (bucket - lo))[0] if n_groups * width < 2**62 else np.lexsort((bucket, gid))
    return group_quantile(gid[srt], bucket[srt], n[srt], q, min_tail)


def group_quantile(key: np.ndarray, bucket: np.ndarray, n: np.ndarray, q: float,
                    min_tail: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Quantile per group of sorted (key, bucket) histogram rows; returns (keys, values in ns).

    With ``min_tail`` > 0 a group of ``total`` samples uses ``min(q, 1 - min_tail/total)``: the
    highest quantile that still has ``min_tail`` samples above it (the P99 of 15 samples is
    their maximum, i.e. one outlier).
    """
    start = np.flatnonzero(run_starts(key))  # the rows are sorted by key: each group is one run, no sort needed
    uniq = key[start]
    end = np.append(start[1:], len(key))
    cum = np.cumsum(n)
    base = np.where(start > 0, cum[start - 1], 0)
    total = cum[end - 1] - base
    q_eff = np.minimum(q, 1.0 - min_tail / np.maximum(total, 1)) if min_tail else np.full(len(total), q)
    target = base + np.ceil(q_eff * total).astype(np.int64)
    pos = np.searchsorted(cum, target, side="left")
    pos = np.minimum(np.maximum(pos, start), end - 1)
    return uniq, bucket_value(bucket[pos])


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
    known, else the fleet median of that role in the window. Timed-out probes
    carry no t4−t3, so only successful probes count. With ``onset`` (host → first slot of
    its failures, :func:`failure_onset`) a host's median counts from its onset. ``keys``: as
    :func:`host_delay_p50`'s.
    """
    if not cfg.busy_host_veto or not findings:
        return []
    p50 = host_delay_p50(delays, keys=keys)
    fleet: dict[str, float] = {}
    for role in ("responder", "prober"):
        vals = [v for (h, r), v in p50.items() if r == role]
        if vals:
            fleet[role] = float(np.median(vals))
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
    fleet = {role: float(np.median([v for (h, r), v in p50.items() if r == role]))
             for role in ("responder", "prober") if any(r == role for (_, r) in p50)}
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


def tor_mesh_mask(pairs: pa.Table) -> np.ndarray:
    """Which rows of ``pairs`` are ToR-mesh probes (bool per row)."""
    return (pc.equal(pairs["pinglist"], "tor_mesh").to_numpy(zero_copy_only=False)
            if pairs.num_rows else np.zeros(0, bool))


def tor_mesh_sums(ctx: WindowContext, exclude: set[str]) -> dict[str, tuple[int, int]]:
    """Responder RNIC → (timeouts, probes) of its ToR-mesh probes as the RNIC rule judges RNICs: probes no
    earlier step took, from probers not in ``exclude`` (suspects of their own)."""
    pairs = ctx.partial.pairs
    return sums_by(pairs, tor_mesh_mask(pairs) & ~ctx.taken_pairs() & ~isin(pairs, "prober_rnic", exclude),
                   "responder_rnic")


def live_probers(pairs: pa.Table, mask: np.ndarray, keys: tuple[Key, Key] | None = None) -> dict[str, int]:
    """Responder RNIC → distinct prober RNICs with at least one probe to it among ``pairs[mask]``.

    ``keys``: codes of ``pairs``' ``responder_rnic`` and ``prober_rnic`` (all its rows), or None to code them."""
    if pairs.num_rows == 0 or not mask.any():
        return {}
    rk, pk = keys if keys is not None else (key(pairs["responder_rnic"]), key(pairs["prober_rnic"]))
    rows = np.flatnonzero(mask)
    g = group([rk.take(rows), pk.take(rows)])
    counts = np.bincount(g.codes[0], minlength=rk.card)
    present = np.flatnonzero(counts)
    return dict(zip(rk.values(present).to_pylist(), counts[present].tolist(), strict=True))


def rnic_hosts(pairs: pa.Table) -> dict[str, str]:
    """RNIC → host, as the probe rows name them (prober and responder sides)."""
    out: dict[str, str] = {}
    for rc, hc in (("prober_rnic", "prober_host"), ("responder_rnic", "responder_host")):
        if pairs.num_rows == 0:
            continue
        g = pairs.group_by([rc, hc]).aggregate([])
        out.update(zip(g[rc].to_pylist(), g[hc].to_pylist(), strict=True))
    return out


# ---- the steps analyze_window runs ---------------------------------------------------------


def stale_qpn_step(ctx: WindowContext, registry: Mapping[str, int], background: float) -> None:
    """Step 2: timeouts of probes that carried a QPN the registry no longer lists (probe noise).

    Confidence: the significance of the stale probes' timeouts against the background loss,
    times the share of the RNIC's timeouts that carried a stale QPN (the rest need another cause).
    """
    pairs, failing = ctx.partial.pairs, ctx.partial.failing
    p_stale = stale_mask(pairs, registry, ctx.key("pairs", "responder_rnic")) & ~ctx.taken_pairs("host_down")
    ctx.take("stale_qpn", p_stale, stale_mask(failing, registry) & ~ctx.taken_failing("host_down"))
    stale_sums = sums_by(pairs, p_stale, "responder_rnic")
    if not stale_sums:
        return
    all_sums = sums_by(pairs, np.ones(pairs.num_rows, bool), "responder_rnic")
    for rn, (failed, stale_total) in sorted(stale_sums.items()):
        if failed:
            # significance of the stale probes' timeouts, times the share of the RNIC's timeouts they are
            conf = failed / max(all_sums[rn][0], 1) * significance(
                float(log_poisson_tail(failed, stale_total * background)[0]), len(all_sums))
            ctx.emit("stale_qpn", rn, failed, conf, failed, all_sums[rn][1],
                     {"stale_timeouts": failed, "stale_probes": stale_total,
                      "registry_qpn": int(registry.get(rn, -1))})


def rnic_findings(ctx: WindowContext, cfg: TriageConfig) -> list[RnicFinding]:
    """Step 3 (rule only): :func:`rnic_rule` over the ToR-mesh pairs no earlier step explained."""
    pairs = ctx.partial.pairs
    tm = tor_mesh_mask(pairs) & ~ctx.taken_pairs()
    rows = np.flatnonzero(tm)
    return rnic_rule(pairs.filter(pa.array(tm)), cfg,
                     (ctx.key("pairs", "prober_rnic").take(rows), ctx.key("pairs", "responder_rnic").take(rows)))


def rnic_step(ctx: WindowContext, findings: list[RnicFinding], host_rnics: set[str], cfg: TriageConfig,
              background: float) -> None:
    """Step 3 (claims): ``rnic`` verdicts for the findings no host explained; charge them for 60 s;
    take the timeouts of flagged, host-explained and still-charged RNICs out of the vote.

    Confidence: significance of the RNIC's timeouts against the background loss, times the
    probers' agreement (two probers are the minimum; each more makes a prober-side cause less
    likely), times the share of the host's other RNICs that are clean (a host problem hits them all).
    """
    flagged: set[str] = set()
    n_rnics = max(len(ctx.rnic_host), 1)
    pairs = ctx.partial.pairs
    suspects = {f.rnic for f in findings} | host_rnics
    # the host's other RNICs, judged as the rule judges RNICs: ToR-mesh probes from probers that are
    # not suspects themselves (inter-ToR probes also cross switch links, faulty or not)
    tm = tor_mesh_mask(pairs)
    sums = tor_mesh_sums(ctx, suspects)
    for f in findings:
        flagged.add(f.rnic)
        h = ctx.rnic_host.get(f.rnic)
        others = [r for r in ctx.rnics_of(h) if r != f.rnic] if h else []
        dirty = sum(1 for r in others
                    if sums.get(r, (0, 1))[0] / max(sums.get(r, (0, 1))[1], 1) > cfg.rnic_loss_ratio / 2)
        clean = 1.0 - dirty / len(others) if others else 1.0
        ratio = f.failed / max(f.total, 1)
        conf = (significance(float(log_poisson_tail(f.failed, f.total * background)[0]), n_rnics)
                * saturating(len(f.probers) - 1, 0.3) * clean)
        ctx.emit("rnic", f.rnic, f.failed, conf, f.failed, f.total,
                 {"probers": list(f.probers), "ratio": round(ratio, 6), "host_rnics_dirty": dirty})
        ctx.state.charged[f.rnic] = max(ctx.state.charged.get(f.rnic, 0),
                                        ctx.we + cfg.rnic_charge_ns - ctx.window_ns)
    # a charged RNIC keeps its timeouts out of the vote only while the rule can still judge it: with fewer
    # than two live ToR-mesh probers left (its ToR peers down), the vote's access-link claim is what
    # names it again, or leaves it undetermined
    judged = live_probers(pairs, tm & ~ctx.taken_pairs(),
                          (ctx.key("pairs", "responder_rnic"), ctx.key("pairs", "prober_rnic")))
    charged = {r for r, until in ctx.state.charged.items()
               if until >= ctx.ws and judged.get(r, 0) >= cfg.rnic_min_probers}
    ctx.state.charged = {r: u for r, u in ctx.state.charged.items() if u >= ctx.we}
    out = flagged | host_rnics | charged
    failing = ctx.partial.failing
    ctx.take("rnic", None, (isin(failing, "responder_rnic", out) | isin(failing, "prober_rnic", out))
             & ~ctx.taken_failing("host_down", "stale_qpn"))
