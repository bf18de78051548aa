"""Named fault scenarios for demos and scoring, the faulted element drawn by a seed.

The names, what each injects and the verdict it should produce are :data:`schemas.scenarios.CATALOGUE`,
which the netns lab shares: the demo scenarios of ``fabricscope demo`` (``healthy``, ``switch-link-down``,
``switch-link-lossy``, ``partial-5tuple``, ``rnic-down``, ``host-down``,
``host-restart``, ``busy-host``) plus faults only the simulator can make
(``flapping-link``, ``flapping-rnic``, ``latency-link``). The simulator makes every one.
"""

from __future__ import annotations

import random

from producers.controller import udp_sport_from_flow_label
from producers.sim.engine import Simulator
from producers.sim.faults import (
    BusyHost,
    Fault,
    FlappingLink,
    HostDown,
    HostRestart,
    LatencyLink,
    LinkDown,
    LossyLink,
    PartialTupleLoss,
    RnicDown,
)
from schemas.inventory import Inventory
from schemas.scenarios import NAMES

SCENARIOS: tuple[str, ...] = NAMES


def scenario_faults(name: str, inv: Inventory, seed: int, start_ns: int | None = None) -> list[Fault]:
    """The faults of scenario ``name`` on ``inv``; which link, RNIC or host is drawn from ``seed``.

    Faults start at ``start_ns`` (None: from the beginning) and never end, except the
    host restart (a single event). Loss rates are large enough to be seen in one 20 s
    window: lossy link 10 %, partial loss of half the 5-tuples on the link.

    Raises:
        ValueError: unknown scenario name (the message lists the known ones).
    """
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}")
    rng = random.Random(f"{seed}/{name}")
    link = inv.links[rng.randrange(len(inv.links))] if inv.links else None
    rnic = sorted(inv.rnics)[rng.randrange(len(inv.rnics))]
    host = sorted(inv.hosts)[rng.randrange(len(inv.hosts))]
    t = {"start_ns": start_ns}
    if name == "healthy":
        return []
    if name in ("switch-link-down", "switch-link-lossy", "partial-5tuple", "flapping-link", "latency-link"):
        if link is None:
            raise ValueError(f"scenario {name!r} needs switch links; the inventory has none")
        a, b = link.a, link.b
        return {
            "switch-link-down": [LinkDown(a, b, **t)],
            "switch-link-lossy": [LossyLink(a, b, rate=0.1, **t)],
            "partial-5tuple": [PartialTupleLoss(a, b, fraction=0.5, **t)],
            "flapping-link": [FlappingLink(a, b, period_s=10.0, down_s=3.0, **t)],
            "latency-link": [LatencyLink(a, b, extra_us=300.0, prob=0.3, **t)],
        }[name]
    if name == "rnic-down":
        return [RnicDown(rnic, **t)]
    if name == "flapping-rnic":
        return [FlappingLink(rnic, inv.tor_of(rnic), period_s=10.0, down_s=4.0, **t)]
    if name == "host-down":
        return [HostDown(host, **t)]
    if name == "host-restart":
        return [HostRestart(host, start_ns=start_ns or 0)]
    return [BusyHost(host, **t)]


def panel1_job_connections(sim: Simulator, job_id: str = "job-h1h3") -> list[dict]:
    """The digest's job H1 + H3 on Panel 1: one flow A2 → B2 through S3, one A1 → B1 through S1.

    Returns connection dicts for :func:`producers.controller.service` (flow labels chosen
    with :meth:`Simulator.find_flow_label` so the ECMP hash puts them on those switches).
    """
    out = []
    for src, dst, via in (("A2", "B2", "S3"), ("A1", "B1", "S1")):
        fl = sim.find_flow_label(src, dst, via)
        out.append(
            {
                "job_id": job_id,
                "src_rnic": src,
                "dst_rnic": dst,
                "flow_label": fl,
                "src_port": udp_sport_from_flow_label(fl),
            }
        )
    return out
