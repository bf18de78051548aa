"""Triage of a window's timeouts in R-Pingmesh's fixed order (§4.3 and §5; digest Figure 3), one module per step:

1. host down (:mod:`streams.pingmesh.host_down`): the target's agent uploaded nothing for more than
   20 s, or stopped inside the window while its RNICs stopped answering;
2. stale QPN (:mod:`streams.pingmesh.stale_qpn`): the probe carried a QPN the registry no longer
   lists for the target (it restarted): probe noise, dropped;
3. the RNIC rule (:mod:`streams.pingmesh.rnic_rule`): more than 10 % of the ToR-mesh probes to one
   RNIC timed out, seen from at least two probers that are not themselves suspects. Its findings are
   judged per host before any RNIC is blamed:

   a. busy host (:mod:`streams.pingmesh.busy_host`): the busy-host veto (the paper's authors added it
      after their evaluation, where CPU contention caused 30 of the 50 RNIC reports): several RNICs
      of one host flagged together while its probes show responder or prober delay far above baseline;
   b. host unreachable (:mod:`streams.pingmesh.host_unreachable`): most RNICs of one host flagged
      together while its agent uploads and its delays are normal;

   then ``rnic`` claims for the rest, charged for 60 s and kept out of voting;
4. everything else goes to the vote (:mod:`streams.pingmesh.tomography`), run by the analyzer after
   :func:`triage`.

Every step takes the merged counts of a window (:mod:`streams.pingmesh.partial`) through a
:class:`~streams.pingmesh.context.WindowContext` and is vectorised over pairs; the RNIC rule loops
once per flagged RNIC. The thresholds are :class:`~streams.pingmesh.triage_config.TriageConfig`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from streams.pingmesh.busy_host import busy_host_step
from streams.pingmesh.context import WindowContext
from streams.pingmesh.host_down import host_down_step
from streams.pingmesh.host_unreachable import host_unreachable_step
from streams.pingmesh.rnic_rule import rnic_findings, rnic_step
from streams.pingmesh.stale_qpn import stale_qpn_step
from streams.pingmesh.triage_config import TriageConfig


@dataclass(frozen=True)
class Triage:
    """What the triage of one window found beyond its claims (those are in the context).

    Attributes:
        down: hosts judged down (step 1); coverage counts their agents silent.
        busy: hosts judged busy (step 3a); their delays stay out of the host delay baselines.
    """

    down: set[str]
    busy: set[str]


def triage(ctx: WindowContext, registry: Mapping[str, int], cfg: TriageConfig, background: float,
           min_votes: int) -> Triage:
    """Steps 1 to 3 over one window, in the paper's order: each emits its claims on ``ctx`` and takes the
    timeouts it explained, so the next sees only the rest (the vote, step 4, takes what is left).

    Args:
        ctx: the window; mutated (claims, taken rows, the carried state's RNIC charges).
        registry: current QPN per RNIC (the stale-QPN rule).
        cfg: the triage's thresholds.
        background: per-probe background timeout rate the claims' confidence is judged against.
        min_votes: timeouts at a slow host's RNICs that make it busy below the RNIC rule (the vote's minimum).
    """
    down = host_down_step(ctx, cfg, background)                                         # 1
    stale_qpn_step(ctx, registry, background)                                           # 2
    findings = rnic_findings(ctx, cfg)                                                  # 3
    busy_rnics, busy = busy_host_step(ctx, findings, cfg, background, min_votes)        # 3a
    findings, host_rnics = host_unreachable_step(ctx, findings, busy_rnics, busy, cfg, background)  # 3b
    rnic_step(ctx, findings, host_rnics, cfg, background)
    return Triage(down, busy)
