"""Triage step 3, the RNIC rule: more than 10 % of the ToR-mesh probes to one RNIC timed out, seen from
at least two probers that are not themselves suspects (R-Pingmesh §5; digest Figure 3).

:func:`rnic_findings` runs the rule (:func:`rnic_rule`) over what steps 1 and 2 left; the findings are judged
per host first (:mod:`streams.pingmesh.busy_host`, :mod:`streams.pingmesh.host_unreachable`), and
:func:`rnic_step` makes ``rnic`` verdicts of the rest, charges them for 60 s and keeps their timeouts out of
the vote. The rule loops once per flagged RNIC; everything else is vectorised over pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import Key, group, key, to_numpy
from streams.pingmesh.context import WindowContext, isin, log_poisson_tail, saturating, significance, sums_by
from streams.pingmesh.triage_config import TriageConfig


@dataclass(frozen=True)
class RnicFinding:
    """An RNIC flagged by the ToR-mesh rule: probes to it in the window, timeouts, the probers seeing it."""

    rnic: str
    failed: int
    total: int
    probers: tuple[str, ...]


def findings_by_host(findings: list[RnicFinding], rnic_host: Mapping[str, str]) -> dict[str, list[RnicFinding]]:
    """Host → its RNICs' findings, in flagging order (RNICs of no known host left out)."""
    by_host: dict[str, list[RnicFinding]] = {}
    for f in findings:
        h = rnic_host.get(f.rnic)
        if h is not None:
            by_host.setdefault(h, []).append(f)
    return by_host


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
