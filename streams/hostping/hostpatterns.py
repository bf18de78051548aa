"""Name the Hostping bottleneck pattern of one round from the matrix, topology and bus utilisation.

Input is only what the analyzer sees: the bandwidth matrix and its baseline, the
intra-host topology, the Algorithm 1 round (:mod:`streams.hostping.hostlink`), the bus monitor's
utilisation per link, and optionally the RNICs' configuration registers. Patterns
(Hostping §6, Figures 8-10, bottlenecks #1-#12):

- ``acs_enabled`` (#7): only peer-to-peer paths (turning at a PCIe switch) are abnormal and
  all their links are normal elsewhere: GDR is redirected through the root complex;
- ``ats_disabled`` (#8): every GPU path abnormal while every memory path is normal;
- RNIC-wide (#1 vs #9/#10): every path of one RNIC is abnormal. If its bandwidth is flat
  across endpoints (a capped link) it is ``rnic_pcie_link_failure``; if it keeps the
  baseline's shape scaled down (bandwidth/baseline constant: fewer bytes in flight, the
  outstanding-read model with a smaller W) no link is at fault: ``rnic_config`` naming
  slow start and TX window, or the one the RNIC's registers show enabled
  (``rnic_slow_start``, ``rnic_small_tx_window``);
- abnormal links by type and bus monitor: ``gpu_pcie_link_failure`` (#2),
  ``memory_channel_failure``/``memory_channel_overload`` (#3/#12), ``upi_failure``/
  ``upi_overload`` (#4/#11) (``*_degraded`` when the bus monitor has no reading for the link),
  ``cpu_root_port_failure`` (#5: paths through the root port
  degraded, peer-to-peer paths below it normal);
- flapping links: ``memory_channel_flapping`` (#6) and likewise ``<type>_flapping``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from schemas.intrahost import IntraHostTopology
from streams.hostping.hostlink import BandwidthMatrix, Round, bus_cause

#: (link type, bus monitor cause) -> pattern.
LINK_PATTERNS = {
    ("rnic_pcie", "failure"): "rnic_pcie_link_failure",
    ("rnic_pcie", "congestion"): "rnic_pcie_congestion",
    ("gpu_pcie", "failure"): "gpu_pcie_link_failure",
    ("gpu_pcie", "congestion"): "gpu_pcie_congestion",
    ("root_port", "failure"): "cpu_root_port_failure",
    ("root_port", "congestion"): "cpu_root_port_congestion",
    ("switch_pcie", "failure"): "switch_pcie_link_failure",
    ("switch_pcie", "congestion"): "switch_pcie_congestion",
    ("mem_channel", "failure"): "memory_channel_failure",
    ("mem_channel", "congestion"): "memory_channel_overload",
    ("upi", "failure"): "upi_failure",
    ("upi", "congestion"): "upi_overload",
    # the bus monitor had no utilisation for the link: degraded, cause unknown (failure or congestion)
    ("rnic_pcie", "unknown"): "rnic_pcie_link_degraded",
    ("gpu_pcie", "unknown"): "gpu_pcie_link_degraded",
    ("root_port", "unknown"): "cpu_root_port_degraded",
    ("switch_pcie", "unknown"): "switch_pcie_link_degraded",
    ("mem_channel", "unknown"): "memory_channel_degraded",
    ("upi", "unknown"): "upi_degraded",
}
FLAP_NAMES = {"mem_channel": "memory_channel", "upi": "upi", "root_port": "cpu_root_port"}
RNIC_CONFIG_CANDIDATES = ("slow_start", "tx_window")
SHAPE_CV = 0.10


@dataclass(frozen=True)
class PatternMatch:
    """One named pattern: where (link, RNIC, switch or host), why (failure/congestion/config), evidence."""

    pattern: str
    location: str
    cause: str
    evidence: dict[str, object] = field(default_factory=dict)


def _cv(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(np.std(x) / np.mean(x)) if x.size and np.mean(x) > 0 else 0.0


def name_patterns(
    topo: IntraHostTopology,
    m: BandwidthMatrix,
    baseline: np.ndarray,
    rnd: Round,
    bus_util: dict[str, float] | None = None,
    rnic_config: dict[str, dict[str, bool]] | None = None,
) -> list[PatternMatch]:
    """Every pattern present in one round; ``[]`` when all paths and links are normal.

    Args:
        topo: the host's intra-host topology.
        m: measured bandwidth matrix (Gb/s); ``baseline``: the healthy matrix of this host model.
        rnd: :func:`streams.hostping.hostlink.algorithm1` over the same matrix.
        bus_util: link -> utilisation 0..1 from the bus monitor; empty or ``None`` when the host has no
            readable bus counter (an abnormal link's cause is then unknown, never ``failure``).
        rnic_config: rnic -> ``{"slow_start": bool, "tx_window": bool}`` when the registers were read.
    """
    bus_util = bus_util or {}
    rnic_config = rnic_config or {}
    out: list[PatternMatch] = []
    bad = set(rnd.abnormal_paths)
    gray = set(rnd.gray_paths)
    explained_links: set[str] = set()

    p2p_bad = {p for p in bad if topo.is_p2p(*p)}
    if bad and p2p_bad == bad and bad <= gray:
        switches = sorted({topo.parent[r] for r, _ in bad})
        out.append(
            PatternMatch(
                "acs_enabled",
                ",".join(switches),
                "config",
                {"p2p_paths_abnormal": sorted(bad), "note": "links normal on other paths; clear ACSCtl redirect"},
            )
        )
        bad = set()

    gpus = [e for e in m.endpoints if topo.kinds[e] == "gpu"]
    mems = [e for e in m.endpoints if topo.kinds[e] == "mem"]
    tested = {(r, e) for i, r in enumerate(m.rnics) for j, e in enumerate(m.endpoints) if not np.isnan(m.gbps[i, j])}
    gpu_paths = {p for p in tested if p[1] in gpus}
    mem_paths = {p for p in tested if p[1] in mems}
    if len({e for _, e in gpu_paths}) >= 2 and gpu_paths and gpu_paths <= bad and mem_paths and not mem_paths & bad:
        out.append(
            PatternMatch(
                "ats_disabled",
                topo.host,
                "config",
                {"gpu_paths_abnormal": len(gpu_paths), "memory_paths_normal": len(mem_paths)},
            )
        )
        explained_links |= {f"{topo.parent[g]}->{g}" for g in gpus}
        bad -= gpu_paths

    for i, rnic in enumerate(m.rnics):
        row = {p for p in tested if p[0] == rnic}
        others_ok = any(p[0] != rnic for p in tested - bad)
        if len(row) < 3 or not row <= bad or not others_ok:
            continue
        bw = m.gbps[i]
        ratio = bw / baseline[i]
        link = f"{topo.parent[rnic]}->{rnic}"
        if _cv(ratio) < _cv(bw) and _cv(ratio) < SHAPE_CV:
            cfg = rnic_config.get(rnic)
            enabled = [c for c in RNIC_CONFIG_CANDIDATES if cfg and cfg.get(c)]
            pattern = {"slow_start": "rnic_slow_start", "tx_window": "rnic_small_tx_window"}.get(
                enabled[0] if len(enabled) == 1 else "", "rnic_config"
            )
            out.append(
                PatternMatch(
                    pattern,
                    rnic,
                    "config",
                    {
                        "candidates": enabled or list(RNIC_CONFIG_CANDIDATES),
                        "config_read": cfg is not None,
                        "ratio_to_baseline": round(float(np.nanmean(ratio)), 3),
                        "ratio_cv": round(_cv(ratio), 3),
                        "note": "every path below baseline by the same factor; no link at fault",
                    },
                )
            )
            explained_links.add(link)
        bad -= row

    for link, state in sorted(rnd.state.items()):
        if link in explained_links:
            continue
        kind = topo.link_kind(link)
        if state == "flapping":
            out.append(
                PatternMatch(
                    f"{FLAP_NAMES.get(kind, kind)}_flapping",
                    link,
                    "failure",
                    {"gray_rounds": rnd.history.gray_streak.get(link, 0)},
                )
            )
        elif state == "abnormal":
            cause = bus_cause(bus_util.get(link), host_has_counters=bool(bus_util))
            out.append(
                PatternMatch(
                    LINK_PATTERNS[(kind, cause.split(" ", 1)[0])],
                    link,
                    cause,
                    {
                        "utilisation": bus_util.get(link),
                        "abnormal_rounds": rnd.history.abnormal_cnt.get(link, 0),
                        "link_type": kind,
                    },
                )
            )
    return out


def host_link_rows(
    topo: IntraHostTopology, rnd: Round, verdicts: list[PatternMatch], round_ns: int
) -> list[dict[str, object]]:
    """``host_link.v1`` rows (schemas.records.HOST_LINK_V1): one per link crossed by a tested path.

    ``cause`` comes from the verdict naming the link (failure/congestion), '' otherwise.
    """
    by_link = {v.location: v for v in verdicts}
    rows = []
    for link, state in sorted(rnd.state.items()):
        v = by_link.get(link)
        rows.append(
            {
                "host": topo.host,
                "link": link,
                "state": state,
                "cause": v.cause if v and state in ("abnormal", "flapping") else "",
                "round_ns": round_ns,
                "evidence": json.dumps(
                    {
                        "link_type": topo.link_kind(link),
                        "pattern": v.pattern if v else "",
                        "gray_streak": rnd.history.gray_streak.get(link, 0),
                        "abnormal_cnt": rnd.history.abnormal_cnt.get(link, 0),
                    },
                    sort_keys=True,
                ),
            }
        )
    return rows
