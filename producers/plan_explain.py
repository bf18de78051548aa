"""What a fabric's probe plan can name: the Eq. 1 pinglists' identifiability and what the builder adds.

The pure part of ``fabricscope pinglist explain`` and of ``python -m bench.identify``: the
controller's pinglists for an inventory (R-Pingmesh Eq. 1: ToR-mesh, inter-ToR, service), the
switch links each 5-tuple's forward and ACK paths cross under the simulator's ECMP model
(:func:`producers.sim.plan.entry_links`: the hash the probes take on a fabric of that shape), and
:func:`producers.controller_ident.make_identifiable`'s extra inter-ToR tuples (deTector's probe
selection). On a live fabric the tracer's paths stand in for the model; the report is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from producers import controller as ctl
from producers.controller_ident import Augmented, IdentReport, identifiability, make_identifiable
from producers.sim.plan import entry_links
from producers.sim.routing import Topology
from schemas.inventory import Inventory


@dataclass(frozen=True)
class PlanExplanation:
    """The plan in force before and after the identifiability builder, with its probe budget.

    Attributes:
        augmented: the builder's result (``before``, ``after``, ``extra`` entries).
        eq1_pps: probes per second of Eq. 1's inter-ToR pinglist, all agents together.
        extra_pps: probes per second the builder's extra tuples add.
        two_link: two-link faults that look like another fault under Eq. 1's plan (None: not asked).
        bounce_pps: probes per second of the standing bounced probes (0 unless asked for).
    """

    augmented: Augmented
    eq1_pps: float
    extra_pps: float
    two_link: int | None
    bounce_pps: float = 0.0

    @property
    def before(self) -> IdentReport:
        """Identifiability of Eq. 1's plan alone."""
        return self.augmented.before

    @property
    def after(self) -> IdentReport:
        """Identifiability with the builder's tuples added (the plan the controller publishes)."""
        return self.augmented.after

    def as_dict(self) -> dict:
        """JSON-ready: per plan its counts and ambiguous groups (each ``a|b``), and the budget."""
        def rep(r: IdentReport) -> dict:
            structural = set(r.structural)
            return {"links": len(r.links), "probed_tuples": r.entries, "identifiable": len(r.identifiable),
                    "uncovered": list(r.uncovered), "every_link_identifiable": r.all_identifiable,
                    "ambiguous_groups": [{"links": "|".join(g), "splittable": g not in structural}
                                         for g in r.groups]}
        return {"eq1": rep(self.before), "with_builder": rep(self.after),
                "eq1_inter_tor_tuples": self.augmented.base_entries,
                "extra_inter_tor_tuples": len(self.augmented.extra),
                "eq1_inter_tor_pps": round(self.eq1_pps, 3), "extra_pps": round(self.extra_pps, 3),
                "bounced_tuples": len(self.augmented.bounced), "bounce_pps": round(self.bounce_pps, 3),
                "two_link_ambiguous": self.two_link}


def explain_plan(inv: Inventory, *, seed: int = 1, two_link: bool = False, bounce: bool = False) -> PlanExplanation:
    """Build the controller's pinglists for ``inv`` and report what they can name, before and after the builder.

    Args:
        inv: the fabric (at least two ToRs for an inter-ToR pinglist).
        seed: seeds the registry's QPNs, Eq. 1's source ports and the builder's draw.
        two_link: also count two-link faults Eq. 1's plan cannot tell from another (O(links²); skipped,
            None, over :data:`producers.controller_ident.TWO_LINK_MAX_LINKS` links).
        bounce: keep standing bounced probes for the structural groups
            (:func:`producers.controller_ident.standing_bounces`), as agents that send them can.

    Returns:
        :class:`PlanExplanation`. A pure function of its inputs.
    """
    reg = ctl.Registry.from_inventory(inv, seed=seed)
    lists = ctl.build_pinglists(inv, reg, seed=seed, now_ns=0)
    entries = [e for k in ("tor_mesh", "inter_tor", "service") for e in lists[k]]
    paths_of = entry_links(Topology(inv, seed))
    aug = make_identifiable(inv, reg, entries, paths_of, seed=seed, bounce=bounce)
    two = identifiability(inv, paths_of(entries), two_link=True).two_link_ambiguous if two_link else None
    return PlanExplanation(aug, eq1_pps=sum(e["rate_pps"] for e in lists["inter_tor"]),
                           extra_pps=sum(e["rate_pps"] for e in aug.extra), two_link=two,
                           bounce_pps=sum(e["rate_pps"] for e in aug.bounced))
