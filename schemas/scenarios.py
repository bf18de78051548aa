"""The named fault scenarios, one catalogue for the simulator and the netns lab: what each injects, the verdict it
should produce, and whether the lab can inject it for real.

The CLI's ``--scenario`` options (``demo``, ``sim``) take these names;
:mod:`producers.sim.scenarios` turns a name into simulator faults and :mod:`infra.lab.scenarios` into a lab
fault, each drawing the faulted link, RNIC or host from a seed. Magnitudes (loss rate, flap period) are the
injector's own. ``verdict`` is the ``kind`` of the ``verdict.v1`` row a correct analyzer reports (R-Pingmesh
§5); ``None`` for the healthy fabric, where it reports none.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    """One named scenario: what is injected, the verdict kind expected, and whether the lab can inject it."""

    name: str
    description: str
    verdict: str | None
    on_lab: bool


# Lab scenarios first, in the order ``--help`` lists them; then those only the simulator can make.
CATALOGUE: tuple[Scenario, ...] = (
    Scenario("healthy", "no fault", None, True),
    Scenario("switch-link-down", "one ToR-spine link drops every packet", "switch", True),
    Scenario("switch-link-lossy", "one ToR-spine link drops a share of its packets", "switch", True),
    Scenario("partial-5tuple", "one ToR-spine link drops the packets of some 5-tuples only", "switch", True),
    Scenario("rnic-down", "one RNIC sends and receives nothing", "rnic", True),
    Scenario("host-down", "one host is off: its agent uploads nothing, its RNICs answer nothing", "host_down", True),
    Scenario("host-restart", "one host restarts once and comes back with new QPNs", "stale_qpn", True),
    Scenario("busy-host", "CPU contention on one host: its agent answers and probes late", "busy_host", True),
    Scenario("flapping-link", "one ToR-spine link goes down and up periodically", "switch", False),
    Scenario("flapping-rnic", "one RNIC's link to its ToR goes down and up periodically", "rnic", False),
    Scenario("latency-link", "one ToR-spine link delays some packets, loses none", "switch_latency", False),
)
BY_NAME: dict[str, Scenario] = {s.name: s for s in CATALOGUE}
NAMES: tuple[str, ...] = tuple(BY_NAME)
LAB_NAMES: tuple[str, ...] = tuple(s.name for s in CATALOGUE if s.on_lab)
