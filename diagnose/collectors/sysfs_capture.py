"""Collector for sysfs captures (``tail -v``, ``grep ""``, ``cat`` transcripts) and sysfs root directories.

One snapshot feeds every sysfs reader: PCIe links walked to the root port
(:mod:`producers.hostping.sysfs_pcie`), AER counters (:mod:`producers.hostping.aer_sysfs`), RDMA port counters
(:mod:`producers.hostping.hw_counters`) and GID tables with their RoCE types (:mod:`.gid_table`).
"""

from __future__ import annotations

import os

from diagnose.collectors import gid_table
from producers.hostping import aer_sysfs, hw_counters, sysfs, sysfs_pcie
from producers.hostping.findings import Finding
from producers.hostping.sysfs import SysfsSnapshot

NAME = "sysfs"
READS = (
    'sysfs files captured with `tail -v -n +1`, `grep ""` or `cat` (PCIe link files, aer_dev_*, '
    "infiniband hw_counters/counters, gids + gid_attrs/types), or a sysfs root directory"
)


def detect(text: str) -> bool:
    """True when the text holds a capture of files below ``/sys``."""
    return sysfs.detect(text)


def parse(text: str) -> SysfsSnapshot:
    """The captured files as a :class:`SysfsSnapshot`."""
    return SysfsSnapshot.from_text(text)


def parse_root(root: str | os.PathLike[str]) -> SysfsSnapshot:
    """A live or copied sysfs tree. Raises FileNotFoundError naming the root if it is missing."""
    return SysfsSnapshot.from_root(root)


def findings(snap: SysfsSnapshot) -> list[Finding]:
    """PCIe path downgrades, AER counters, RDMA port flaps, and which GID is RoCE v2 routable."""
    out: list[Finding] = []
    if sysfs_pcie.detect(snap):
        out += sysfs_pcie.findings(snap)
    out += aer_sysfs.findings(snap)
    out += hw_counters.findings(snap)
    out += gid_table.findings(gid_table.from_snapshot(snap))
    return out
