"""Parser for ``ethtool -S <netdev>`` statistics, grouped by PFC priority (mlx5 names).

mlx5 exposes ``{rx,tx}_prio<N>_{bytes,packets,pause,pause_duration,discards}``
per priority and port-wide ``rx_discards_phy``/``{rx,tx}_pause_ctrl_phy``. The
hardware monitor (Hostping §3.2) derives the Tx pause duration ratio and drops
from their deltas; :mod:`.lossy_roce` judges which priority carries RoCE.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STAT = re.compile(r"^\s*(?P<k>[A-Za-z][\w.\[\]-]*):\s+(?P<v>-?\d+)\s*$")
_PRIO = re.compile(r"^(?P<dir>rx|tx)_prio(?P<p>[0-7])_(?P<what>\w+)$")
_IFACE = re.compile(r"ethtool\s+-S\s+(?P<if>[\w.:-]+)")


@dataclass
class EthtoolStats:
    """One netdev's counters (cumulative since driver load) and their per-priority view."""

    netdev: str
    counters: dict[str, int] = field(default_factory=dict)
    line: int = 0

    def by_priority(self) -> dict[int, dict[str, int]]:
        """``{prio: {"rx_bytes": .., "tx_pause": .., ...}}`` for every priority with a counter."""
        out: dict[int, dict[str, int]] = {}
        for k, v in self.counters.items():
            m = _PRIO.match(k)
            if m:
                out.setdefault(int(m["p"]), {})[f"{m['dir']}_{m['what']}"] = v
        return out

    def loaded_priorities(self, share: float = 0.01) -> list[int]:
        """Priorities carrying more than ``share`` of all rx+tx bytes."""
        prio = self.by_priority()
        total = {p: c.get("rx_bytes", 0) + c.get("tx_bytes", 0) for p, c in prio.items()}
        s = sum(total.values())
        return sorted(p for p, b in total.items() if s and b / s > share)


def parse(text: str) -> EthtoolStats | None:
    """Counters of one ``ethtool -S`` output; ``None`` when the text has no per-priority counter.

    The netdev name is taken from an ``ethtool -S <if>`` command line in the text, else ``netdev``.
    """
    m = _IFACE.search(text)
    stats = EthtoolStats(m["if"] if m else "netdev")
    for n, line in enumerate(text.splitlines(), start=1):
        s = _STAT.match(line)
        if s:
            stats.counters[s["k"]] = int(s["v"])
            stats.line = stats.line or n
    return stats if stats.by_priority() else None


def detect(text: str) -> bool:
    """True when the text holds at least one ``{rx,tx}_prio<N>_*`` counter line."""
    return any((s := _STAT.match(x)) and _PRIO.match(s["k"]) for x in text.splitlines())


def parse_counters(text: str) -> dict[str, int]:
    """Every ``name: integer`` line of ``ethtool -S`` output (any driver: mlx5, virtio_net, ...)."""
    return {s["k"]: int(s["v"]) for line in text.splitlines() if (s := _STAT.match(line))}


def read_live(netdev: str, timeout_s: float = 2.0) -> tuple[dict[str, int] | None, str]:
    """``ethtool -S <netdev>`` now: ``(counters, "")``, or ``(None, why)`` when ethtool is not installed,
    times out or fails (a driver without statistics says ``no stats available``)."""
    import shutil
    import subprocess

    exe = shutil.which("ethtool")
    if exe is None:
        return None, "ethtool is not installed (apt-get install ethtool)"
    try:
        p = subprocess.run([exe, "-S", netdev], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, f"ethtool -S {netdev} timed out after {timeout_s} s"
    if p.returncode != 0:
        return None, f"ethtool -S {netdev}: {(p.stderr or p.stdout).strip()[:200]}"
    return parse_counters(p.stdout), ""
