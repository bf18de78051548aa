"""NUMA nodes from sysfs: ``/sys/devices/system/node/node<N>/{cpulist,meminfo}``.

One hardware source, read from a root (``--path.sysfs``). Hostping's memory endpoints are the
NUMA nodes (``memN``, §3.1); a loopback to ``memN`` registers host memory bound to node N, and an
uncore PMU is mapped to its socket through the node holding the PMU's ``cpumask`` CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from producers.hostping.sysfs import SysfsSnapshot

NODE_ROOT = "/sys/devices/system/node"
_MEMTOTAL = re.compile(r"MemTotal:\s+(\d+)\s*kB")


@dataclass(frozen=True)
class NumaNode:
    """One node: its id, its CPUs and its memory (bytes; 0 when ``meminfo`` is unreadable)."""

    node: int
    cpus: tuple[int, ...]
    mem_bytes: int


def parse_cpulist(text: str | None) -> tuple[int, ...]:
    """``"0-3,8,10-11"`` -> ``(0, 1, 2, 3, 8, 10, 11)``; empty or unreadable -> ``()``.

    Raises:
        ValueError: a range is malformed (names the text).
    """
    out: list[int] = []
    for part in (text or "").strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ValueError(f"cpulist {text!r}: {part!r} is not N or N-M") from None
    return tuple(out)


def read_nodes(snap: SysfsSnapshot) -> list[NumaNode]:
    """Every ``node<N>`` directory, in node order (a host without NUMA in sysfs gives ``[]``)."""
    out = []
    for name in snap.listdir(NODE_ROOT):
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        base = f"{NODE_ROOT}/{name}"
        m = _MEMTOTAL.search(snap.read(f"{base}/meminfo") or "")
        out.append(NumaNode(int(name[4:]), parse_cpulist(snap.read(f"{base}/cpulist")),
                            int(m.group(1)) * 1024 if m else 0))
    return sorted(out, key=lambda n: n.node)


def node_of_cpu(nodes: list[NumaNode], cpu: int) -> int | None:
    """The node holding ``cpu``, or ``None``."""
    return next((n.node for n in nodes if cpu in n.cpus), None)
