"""The demo scenarios (``fabricscope demo``) as lab faults, with the verdict each should produce.

The scenarios and their verdicts are those of :data:`schemas.scenarios.CATALOGUE` the lab can inject
(``on_lab``); this module says which lab fault makes each.

``apply(name, seed)`` draws the faulted link, RNIC or host from ``seed`` and
injects it; the returned :class:`Truth` says what a correct analyzer reports
(R-Pingmesh §5): the fault kind and where.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.lab import faults
from infra.lab.netns import LabError, lab_dir, load
from schemas.scenarios import BY_NAME, LAB_NAMES

# The lab fault that makes each scenario of the catalogue the lab can inject (``healthy``: none).
_LAB_FAULT: dict[str, str | None] = {
    "healthy": None,
    "switch-link-down": "link-down",
    "switch-link-lossy": "link-loss",
    "partial-5tuple": "partial-5tuple",
    "rnic-down": "nic-down",
    "host-down": "host-down",
    "host-restart": "host-restart",
    "busy-host": "busy-host",
}
# scenario -> (lab fault kind or None, expected verdict kind or None), in the catalogue's order
SCENARIOS: dict[str, tuple[str | None, str | None]] = {
    name: (_LAB_FAULT[name], BY_NAME[name].verdict) for name in LAB_NAMES
}


@dataclass(frozen=True)
class Truth:
    """What was injected: scenario, lab fault id, expected verdict kind and location.

    ``location`` is an RNIC (``A3``), a host (``H2``) or a link in both directions
    (``("A->S3", "S3->A")``); the analyzer may name either direction.
    """

    scenario: str
    fault_id: str | None
    kind: str | None
    locations: tuple[str, ...]


def apply(
    name: str, seed: int = 1, directory: str | Path | None = None, *, loss: float = 0.2, fraction: float = 0.5
) -> Truth:
    """Inject scenario ``name`` on the running lab; the target is drawn from ``seed``.

    Raises:
        LabError: unknown scenario (the message lists them) or no lab.
    """
    if name not in SCENARIOS:
        raise LabError(f"unknown scenario {name!r}; scenarios are {', '.join(SCENARIOS)}")
    kind, verdict = SCENARIOS[name]
    if kind is None:
        return Truth(name, None, None, ())
    d = lab_dir(directory)
    fab, _ = load(d)
    target = faults.pick_target(kind, fab, seed)
    rec = faults.inject(kind, d, loss=loss, fraction=fraction, seed=seed, **target)
    if "a" in target:
        tor, spine = rec["target"].split("-")
        locations: tuple[str, ...] = (f"{tor}->{spine}", f"{spine}->{tor}")
    else:
        locations = (rec["target"],)
    return Truth(name, rec["id"], verdict, locations)
