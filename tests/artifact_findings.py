"""What ``fabricscope diagnose`` finds in one text or one artifact file, shaped for the collector tests."""

from __future__ import annotations

from diagnose.run import diagnose_paths, diagnose_text
from producers.hostping.findings import Finding

from conftest import REPO

#: real public command outputs, one per file (sources in the README there)
ARTIFACTS = REPO / "tests" / "diagnose" / "fixtures" / "artifacts"


def kinds(text: str) -> list[tuple[str, str, str]]:
    """``(kind, location, severity)`` of every finding in ``text``, in output order."""
    return [(f.kind, f.location, f.severity) for f in diagnose_text(text, "t")]


def problems(text: str) -> list[tuple[str, str]]:
    """``(kind, location)`` of the findings above info in ``text``."""
    return [(f.kind, f.location) for f in diagnose_text(text, "t") if f.is_problem]


def fixture(name: str) -> list[Finding]:
    """Every finding in the artifact file ``name`` of :data:`ARTIFACTS`."""
    return diagnose_paths([ARTIFACTS / name])
