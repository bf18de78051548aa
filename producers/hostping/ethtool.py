"""Collector for ``ethtool -S <netdev>``: per-priority counters (mlx5 names) and physical-layer errors.

mlx5 exposes ``{rx,tx}_prio<N>_{bytes,packets,pause,pause_duration,discards}``
per priority and port-wide ``rx_discards_phy``/``{rx,tx}_pause_ctrl_phy``. The
hardware monitor (Hostping §3.2) derives the Tx pause duration ratio and drops
from their deltas; :mod:`.lossy_roce` judges which priority carries RoCE (a rule of the
second stage, :mod:`.correlate`, since it also needs ``hw_counters``).

Physical layer (parsed with or without priority counters, e.g. ``ethtool -S eth5 | grep err``):

- uncorrectable errors (``rx_crc_errors_phy``, ``rx_symbol_err_phy``, ``rx_pcs_symbol_err_phy``,
  FEC ``uncorrectable`` blocks, plain ``rx_crc_errors``) lose packets: ``phy_errors`` (error);
  the same count on every lane (``rx_err_lane_<i>_phy``) points at the module or port, one
  lane at a connector or fiber of that lane (field case 25);
- corrected bits/blocks alone are FEC doing its job, normal on PAM4 links (50G per lane and
  faster): ``phy_fec_corrected`` (info);
- ``link_down_events_phy`` > 0: the port went down since driver load (``rnic``,
  subkind ``port_flapping``, warning: cumulative, confirm with a second read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

NAME = "ethtool"
READS = "ethtool -S <netdev> (whole or grepped: priority counters, *_phy error and FEC counters)"

_STAT = re.compile(r"^\s*(?P<k>[A-Za-z][\w.\[\]-]*):\s+(?P<v>-?\d+)\s*$")
_PRIO = re.compile(r"^(?P<dir>rx|tx)_prio(?P<p>[0-7])_(?P<what>\w+)$")
_IFACE = re.compile(r"^(?:\S*[#$>]\s*)?(?:sudo\s+)?ethtool\s+-S\s+(?P<if>[\w.:-]+)", re.M)
_LANE = re.compile(r"^rx_err_lane_(?P<i>\d+)_phy$")
UNCORRECTABLE = ("rx_crc_errors_phy", "rx_symbol_err_phy", "rx_pcs_symbol_err_phy", "rx_crc_errors", "rx_fcs_errors")
_UNCORR = re.compile(r"uncorrect", re.I)
_CORR = re.compile(r"(?<!un)corrected", re.I)
FLAP_COUNTERS = ("link_down_events_phy",)


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

    def lanes(self) -> dict[int, int]:
        """``{lane: rx_err_lane_<i>_phy}``."""
        return {int(m["i"]): v for k, v in self.counters.items() if (m := _LANE.match(k))}


def _is_phy_counter(key: str) -> bool:
    return (
        key in UNCORRECTABLE
        or key in FLAP_COUNTERS
        or bool(_LANE.match(key) or _UNCORR.search(key))
        or (bool(_CORR.search(key)) and ("phy" in key or "fec" in key))
    )


def parse(text: str) -> EthtoolStats:
    """Counters of one ``ethtool -S`` output (``name: integer`` lines).

    The netdev name is taken from an ``ethtool -S <if>`` command line in the text, else ``netdev``.
    """
    m = _IFACE.search(text) or re.search(r"ethtool\s+-S\s+(?P<if>[\w.:-]+)", text)
    stats = EthtoolStats(m["if"] if m else "netdev")
    for n, line in enumerate(text.splitlines(), start=1):
        s = _STAT.match(line)
        if s:
            stats.counters[s["k"]] = int(s["v"])
            stats.line = stats.line or n
    return stats


def findings(stats: EthtoolStats) -> list[Finding]:
    """Physical-layer rules (uncorrectable errors, FEC-corrected only, link down events)."""
    out: list[Finding] = []
    c = stats.counters
    unc = {k: v for k, v in c.items() if v > 0 and (k in UNCORRECTABLE or _UNCORR.search(k))}
    corr = {k: v for k, v in c.items() if v > 0 and _is_phy_counter(k) and k not in unc and k not in FLAP_COUNTERS}
    lanes = stats.lanes()
    line = str(stats.line) if stats.line else ""
    if unc:
        bad = {i: v for i, v in lanes.items() if v > 0}
        ev: dict[str, object] = {"uncorrectable": unc, "lanes": lanes, "cumulative": True}
        where = ""
        if len(bad) >= 2 and len(bad) == len(lanes) and max(bad.values()) <= 1.1 * min(bad.values()):
            ev["pattern"] = "all_lanes_equal"
            where = (
                f" The errors are equal on all {len(bad)} lanes: the transceiver/module or the port itself, "
                "not one dirty connector or fiber."
            )
        elif len(bad) == 1 or (len(bad) >= 2 and max(bad.values()) >= 0.9 * sum(bad.values())):
            lane = max(bad, key=lambda i: bad[i])
            ev["pattern"] = "one_lane"
            ev["worst_lane"] = lane
            share = bad[lane] / sum(bad.values())
            where = f" Lane {lane} carries {share:.0%} of the lane errors: a connector or fiber of that lane."
        out.append(
            Finding(
                "phy_errors",
                stats.netdev,
                "error",
                f"Physical-layer errors FEC could not correct on {stats.netdev} ("
                + ", ".join(f"{k}={v}" for k, v in unc.items())
                + "): every one is a lost packet; for RoCE that means retransmissions and timeouts."
                + where
                + " Counters are cumulative: confirm they still rise, then clean/replace the optic or cable.",
                ev,
                "failure",
                line,
            )
        )
    elif corr:
        out.append(
            Finding(
                "phy_fec_corrected",
                stats.netdev,
                "info",
                f"Only FEC-corrected errors on {stats.netdev} ({', '.join(f'{k}={v}' for k, v in corr.items())}): "
                "normal on PAM4 links (50G per lane and faster), nothing is lost. Alert on uncorrectable counters "
                "or a rising corrected-bit rate, not on this.",
                {"corrected": corr, "cumulative": True},
                "",
                line,
            )
        )
    flaps = {k: c[k] for k in FLAP_COUNTERS if c.get(k, 0) > 0}
    if flaps:
        out.append(
            Finding(
                "rnic",
                stats.netdev,
                "warning",
                f"{stats.netdev} went down {flaps.get('link_down_events_phy', 0)} time(s) since the driver loaded: "
                "a flapping port, cable or transceiver. Compare with a second read before draining.",
                {"subkind": "port_flapping", **flaps, "cumulative": True},
                "failure",
                line,
            )
        )
    return out


def detect(text: str) -> bool:
    """True when the text holds a ``{rx,tx}_prio<N>_*`` counter or a physical-layer error/FEC counter."""
    return any((s := _STAT.match(x)) and (_PRIO.match(s["k"]) or _is_phy_counter(s["k"])) for x in text.splitlines())


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
    return parse(p.stdout).counters, ""
