"""Triage step 3b, host unreachable: most RNICs of one host fail the RNIC rule together while its agent
keeps uploading and its delays are normal (R-Pingmesh §5: when every RNIC of a host fails at once, the
cause is the host, not N RNICs). One claim about the host; the next window confirms it (again
``host_unreachable``) or revises it (``host_down`` or ``busy_host`` with ``revision_of`` set).
"""

from __future__ import annotations

import math

from streams.pingmesh.context import WindowContext, probe_evidence
from streams.pingmesh.rnic_rule import RnicFinding, findings_by_host, tor_mesh_sums
from streams.pingmesh.triage_config import TriageConfig


def host_unreachable_step(ctx: WindowContext, findings: list[RnicFinding], busy_rnics: set[str],
                          busy_hosts: set[str], cfg: TriageConfig, background: float
                          ) -> tuple[list[RnicFinding], set[str]]:
    """Step 3b: ``host_unreachable`` claims: at least ``host_share`` of a host's RNICs, and two, fail the
    RNIC rule together (or at half its ratio beside flagged ones) while its agent uploads.

    Args:
        findings: the RNIC rule's findings (:func:`streams.pingmesh.rnic_rule.rnic_findings`).
        busy_rnics, busy_hosts: what :func:`streams.pingmesh.busy_host.busy_host_step` explained.

    Returns:
        (findings left for ``rnic`` verdicts in the rule's order, RNICs whose timeouts the busy and
        unreachable hosts explain).
    """
    by_host = findings_by_host(findings, ctx.rnic_host)
    by_rnic = {f.rnic: f for f in findings}
    n_hosts = max(len({h for h in ctx.rnic_host.values()}), 1)
    out_rnics = set(busy_rnics)
    rest: list[RnicFinding] = []
    below = _below_rule_sums(ctx, set(by_rnic) | busy_rnics, cfg)  # a busy prober's timeouts are the host's
    still = _still_failing_charged(ctx, findings, busy_rnics, cfg)
    for h, fs in sorted(by_host.items()):
        # a peer seen failing only by a busy host's RNICs is not an RNIC fault: the busy prober
        # timed out on it (it took its replies late), so the RNIC rule's two probers are not there;
        # unless the rule flagged it before the host got busy and its other probers still see it fail
        fs = [f for f in fs if f.rnic not in out_rnics and (
            len(set(f.probers) - busy_rnics) >= cfg.rnic_min_probers or f.rnic in still)]
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
            conf = share * probe_evidence(failed, total, background, n_hosts)
            ctx.emit("host_unreachable", h, failed, conf, failed, total,
                     {"rnics": sorted([*(f.rnic for f in fs), *dirty]), "below_rnic_rule": dirty,
                      "rnics_of_host": n_rn, "ratio": round(failed / max(total, 1), 6), "agent_uploading": True})
            out_rnics |= {f.rnic for f in fs} | set(dirty)
        else:
            rest.extend(fs)
    rest.sort(key=lambda f: [x.rnic for x in findings].index(f.rnic))
    return rest, out_rnics


def _below_rule_sums(ctx: WindowContext, flagged: set[str], cfg: TriageConfig) -> dict[str, tuple[int, int]]:
    """RNIC → (timeouts, probes) of the RNICs whose ToR-mesh probes time out at half the RNIC rule's ratio
    or more, counted as the rule counts them: probes no earlier step took, from probers not in ``flagged``."""
    return {r: (f, t) for r, (f, t) in tor_mesh_sums(ctx, flagged).items() if t and f / t > cfg.rnic_loss_ratio / 2}


def _still_failing_charged(ctx: WindowContext, findings: list[RnicFinding], busy_rnics: set[str],
                           cfg: TriageConfig) -> set[str]:
    """The findings a busy host's probers would leave below the rule's two probers, kept as RNIC faults:
    RNICs still charged from an earlier claim (``rnic_charge_ns``), whose ToR-mesh probes from the probers
    that are not busy time out over the rule's ratio. A flapping RNIC whose ToR peer host turns busy stays
    named: the earlier claim had two probers, and the ones left still see it fail.

    Returns:
        The RNICs of ``findings`` kept so (empty when no prober is busy).
    """
    if not busy_rnics:
        return set()
    charged = ctx.charged_rnics()
    short = [f.rnic for f in findings if f.rnic in charged
             and len(set(f.probers) - busy_rnics) < cfg.rnic_min_probers]
    if not short:
        return set()
    clean = tor_mesh_sums(ctx, busy_rnics)
    return {r for r in short if clean.get(r, (0, 0))[1] and clean[r][0] / clean[r][1] > cfg.rnic_loss_ratio}
