"""Run every Hostping parser and rule over captured artifacts (the library behind ``fabricscope diagnose``).

An input is a text file (command output, log, or a field-case file mixing several
artifacts) or a directory taken as a sysfs root (node_exporter's ``--path.sysfs``).
Each parser's ``detect`` decides whether it applies, so one file may yield findings
from several parsers; every finding's ``source`` names ``file:line``.
"""

from __future__ import annotations

from pathlib import Path

from producers.hostping import (
    aer_sysfs,
    dmesg,
    ethtool,
    hw_counters,
    lossy_roce,
    lspci,
    nccl_log,
    nccl_pairs,
    sysfs,
    sysfs_pcie,
)
from producers.hostping.findings import Finding, with_source


def diagnose_text(text: str, name: str = "<text>") -> list[Finding]:
    """All findings from one text artifact."""
    out: list[Finding] = []
    if lspci.detect(text):
        out += lspci.findings(lspci.parse(text))
    snap = sysfs.SysfsSnapshot.from_text(text) if sysfs.detect(text) else sysfs.SysfsSnapshot()
    out += _snapshot_findings(snap)
    stats = ethtool.parse(text) if ethtool.detect(text) else None
    if stats is not None:
        out += lossy_roce.findings(stats, hw_counters.read(snap), str(stats.line))
    if dmesg.detect(text):
        out += dmesg.findings(dmesg.parse(text))
    if nccl_log.detect(text):
        out += nccl_log.findings(nccl_log.parse(text))
    if nccl_pairs.detect(text):
        out += nccl_pairs.findings(nccl_pairs.parse(text))
    return with_source(out, name)


def _snapshot_findings(snap: sysfs.SysfsSnapshot) -> list[Finding]:
    out: list[Finding] = []
    if sysfs_pcie.detect(snap):
        out += sysfs_pcie.findings(snap)
    out += aer_sysfs.findings(snap)
    out += hw_counters.findings(snap)
    return out


def diagnose_paths(paths: list[Path]) -> list[Finding]:
    """Findings of every file or sysfs root in ``paths``, in argument order.

    Raises:
        FileNotFoundError: a path does not exist (the message names it).
        ValueError: a file is not UTF-8 text (the message names it and suggests a capture command).
    """
    out: list[Finding] = []
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if p.is_dir():
            out += with_source(_snapshot_findings(sysfs.SysfsSnapshot.from_root(p)), str(p))
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ValueError(
                f"{p}: not UTF-8 text; capture command output as text (e.g. `lspci -vvv > lspci.txt`)"
            ) from None
        out += diagnose_text(text, str(p))
    return out
