"""The one result type of every Hostping rule: a :class:`Finding`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("info", "warning", "error", "critical")
CAUSES = ("failure", "congestion", "config", "")


@dataclass(frozen=True)
class Finding:
    """What a rule concluded from one artifact.

    Attributes:
        kind: what is wrong, e.g. ``pcie_downgrade``, ``acs_redirect``, ``rnic``,
            ``host_down``, ``slow_host``, ``undetermined``; ``pcie_idle_power_saving``
            is informational.
        location: the component to blame: PCI address, ``host/rnic``, host name,
            or ``a->b`` for a link.
        severity: ``info`` (not a problem), ``warning``, ``error``, ``critical``.
        explanation: one or two sentences a person on call can act on.
        evidence: the values behind the conclusion (JSON-serialisable).
        cause: Hostping's cause class: ``failure``, ``congestion``, ``config`` or ``''``.
        source: ``file:line`` of the first line of evidence, when known.
    """

    kind: str
    location: str
    severity: str
    explanation: str
    evidence: dict[str, Any] = field(default_factory=dict)
    cause: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"Finding.severity {self.severity!r} is not one of {SEVERITIES}")
        if self.cause not in CAUSES:
            raise ValueError(f"Finding.cause {self.cause!r} is not one of {CAUSES}")

    @property
    def is_problem(self) -> bool:
        """True unless the finding is informational."""
        return self.severity != "info"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def with_source(findings: list[Finding], name: str) -> list[Finding]:
    """Prefix every finding's ``source`` (a line number or '') with the artifact's name."""
    out = []
    for f in findings:
        src = f"{name}:{f.source}" if f.source else name
        out.append(Finding(f.kind, f.location, f.severity, f.explanation, f.evidence, f.cause, src))
    return out
