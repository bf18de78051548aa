"""Collector for NVLink state: ``nvidia-smi nvlink -s`` (``--status``).

Per GPU (``GPU <index>: <name> (UUID: ...)``) the links as ``Link <n>: <speed> GB/s`` or
``Link <n>: <inactive>``. Rules, per GPU:

- some links inactive while others of the same GPU run: ``nvlink_inactive`` error at that GPU
  (a link that trained down: NVLink traffic falls back to fewer links or PCIe; azhpc-diagnostics#73
  asks for exactly this check on a V100 with links 3 and 5 inactive);
- an active link slower than the GPU's other links: ``nvlink_degraded`` warning;
- every link of a GPU inactive: ``nvlink_inactive`` warning (an NVLink bridge missing, or a
  board without NVLink: compare with ``nvidia-smi topo -m``).

A GPU whose links all run at one speed raises nothing; ``...`` (a cut paste) is skipped. The
error counters of ``nvidia-smi nvlink -e`` are not read (no public capture found in time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

NAME = "nvlink"
READS = "nvidia-smi nvlink -s (per GPU: each link's speed or <inactive>)"

_GPU = re.compile(r"^\s*GPU (?P<idx>\d+): (?P<name>.+?)(?:\s+\(UUID: (?P<uuid>[^)]*)\))?\s*$")
_LINK = re.compile(r"^\s+Link (?P<n>\d+): (?:(?P<gbps>[\d.]+) GB/s|<(?P<inactive>inactive)>)\s*$")


@dataclass
class GpuLinks:
    """One GPU's links: ``{link: GB/s}`` (None = inactive) and the line of the GPU header."""

    index: int
    name: str
    line: int
    links: dict[int, float | None] = field(default_factory=dict)


def parse(text: str) -> list[GpuLinks]:
    """Every GPU block with at least one link line; other lines are skipped."""
    gpus: list[GpuLinks] = []
    cur = None
    for n, line in enumerate(text.splitlines(), start=1):
        if m := _GPU.match(line):
            cur = GpuLinks(int(m["idx"]), m["name"], n)
            gpus.append(cur)
        elif cur is not None and (m := _LINK.match(line)):
            cur.links[int(m["n"])] = None if m["inactive"] else float(m["gbps"])
    return [g for g in gpus if g.links]


def findings(gpus: list[GpuLinks]) -> list[Finding]:
    """``nvlink_inactive`` and ``nvlink_degraded`` per GPU."""
    out = []
    for g in gpus:
        active = {k: v for k, v in g.links.items() if v is not None}
        inactive = sorted(k for k, v in g.links.items() if v is None)
        where = f"GPU {g.index}"
        ev = {"gpu": g.index, "name": g.name, "links": len(g.links), "inactive_links": inactive,
              "active_gbps": sorted(set(active.values()))}
        if inactive and active:
            out.append(Finding(
                "nvlink_inactive", where, "error",
                f"{where} ({g.name}) has {len(inactive)} of {len(g.links)} NVLinks inactive (links "
                f"{', '.join(map(str, inactive))}) while the others run: GPU-to-GPU traffic loses that bandwidth. "
                "Reset the GPU or reboot; if it persists, the baseboard/NVSwitch link or the GPU needs service.",
                ev, "failure", str(g.line),
            ))  # fmt: skip
        elif inactive:
            out.append(Finding(
                "nvlink_inactive", where, "warning",
                f"Every NVLink of {where} ({g.name}) is inactive: a missing NVLink bridge, or a board without "
                "NVLink (compare with nvidia-smi topo -m).",
                ev, "failure", str(g.line),
            ))  # fmt: skip
        if len(set(active.values())) > 1:
            top = max(active.values())
            slow = sorted(k for k, v in active.items() if v < top)
            out.append(Finding(
                "nvlink_degraded", where, "warning",
                f"{where} runs NVLinks {', '.join(map(str, slow))} below {top} GB/s, its other links' speed.",
                {**ev, "slow_links": slow}, "failure", str(g.line),
            ))  # fmt: skip
    return out


def detect(text: str) -> bool:
    """True when the text holds a GPU header followed by ``Link <n>:`` lines."""
    return bool(parse(text))
