"""Run every collector and cross-artifact rule over captured artifacts (the library behind ``fabricscope diagnose``).

An input is a text file (command output, log, or a field-case file mixing several
artifacts) or a directory taken as a sysfs root (node_exporter's ``--path.sysfs``).
Stage one: each collector in :data:`diagnose.registry.COLLECTORS` whose
``detect`` accepts the text parses it and applies its own rules, so one file may yield
findings from several collectors. Stage two: :mod:`diagnose.correlate` applies
the rules that span artifacts (over all inputs given together). Every finding's
``source`` names ``file:line``.
"""

from __future__ import annotations

from pathlib import Path

from diagnose.correlate import correlate
from diagnose.registry import Artifact, collect_root, collect_text
from producers.hostping.findings import Finding


def diagnose_text(text: str, name: str = "<text>") -> list[Finding]:
    """All findings from one text artifact (both stages)."""
    return correlate(collect_text(text, name))


def collect_paths(paths: list[Path]) -> list[Artifact]:
    """Stage one over files and sysfs roots, in argument order.

    Raises:
        FileNotFoundError: a path does not exist (the message names it).
        ValueError: a file is not UTF-8 text (the message names it and suggests a capture command).
    """
    arts: list[Artifact] = []
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if p.is_dir():
            arts += collect_root(p, str(p))
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ValueError(
                f"{p}: not UTF-8 text; capture command output as text (e.g. `lspci -vvv > lspci.txt`)"
            ) from None
        arts += collect_text(text, str(p))
    return arts


def diagnose_paths(paths: list[Path]) -> list[Finding]:
    """Findings of every file or sysfs root in ``paths``; cross-artifact rules see all of them together.

    Raises:
        FileNotFoundError, ValueError: as :func:`collect_paths`.
    """
    return correlate(collect_paths(paths))
