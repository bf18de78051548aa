"""Hostping analyzer: path states from a bandwidth matrix, and link states by Algorithm 1.

Pure functions over numpy arrays; no Kafka, no Faust. Citations are to Hostping
(Liu et al., NSDI 2023):

- idle mode (§4.2): full-mesh loopback; a path is abnormal when its bandwidth is more
  than ``ABNORMAL_TH`` (20 %) below its baseline (:func:`idle_path_states`);
- busy mode (§4.3): service traffic slows every path of an RNIC alike, so a path is
  compared with its peers: bandwidth/baseline more than 20 % below the RNIC's median
  ratio is abnormal; 15 % stays normal (:func:`busy_path_states`);
- Algorithm 1 (Eq. 4, y_j = Π x_i over links of path j): links on a normal path are
  normal; links on an abnormal path and on no normal path are abnormal (``abnormal_cnt``);
  an abnormal path whose links are all normal turns its links gray; a link gray in
  ``FLAP_GRAYS`` (3) consecutive rounds is flapping (:func:`algorithm1`);
- bus monitor (§3.4): a degraded link whose utilisation exceeds ``UTIL_HIGH`` (90 %) is
  congested, otherwise failed; without a utilisation reading its cause is unknown (:func:`bus_cause`).

The loopback equations and the outstanding-read model (Eq. 1-3, Figure 4) live in
:mod:`schemas.intrahost` (the agent needs them too) and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from schemas.intrahost import (
    IntraHostTopology,
    bw_host_gbps,
    fit_outstanding_read,
    lat_host_us,
    loopback_latency_us,
    outstanding_read_bw_gbps,
)

__all__ = [
    "ABNORMAL_TH",
    "FLAP_GRAYS",
    "UNKNOWN_NO_COUNTERS",
    "UNKNOWN_NO_LINK_COUNTER",
    "UTIL_HIGH",
    "BandwidthMatrix",
    "LinkHistory",
    "Round",
    "algorithm1",
    "bus_cause",
    "busy_path_states",
    "bw_host_gbps",
    "fit_outstanding_read",
    "idle_path_states",
    "incidence",
    "lat_host_us",
    "loopback_latency_us",
    "outstanding_read_bw_gbps",
]

ABNORMAL_TH = 0.20
UTIL_HIGH = 0.90
FLAP_GRAYS = 3
LINK_STATES = ("normal", "abnormal", "gray", "flapping")


@dataclass(frozen=True)
class BandwidthMatrix:
    """Loopback bandwidth (Gb/s) per (RNIC, endpoint); NaN where the pair was not tested."""

    rnics: tuple[str, ...]
    endpoints: tuple[str, ...]
    gbps: np.ndarray

    def __post_init__(self) -> None:
        if self.gbps.shape != (len(self.rnics), len(self.endpoints)):
            raise ValueError(
                f"bandwidth matrix is {self.gbps.shape}, expected (rnics={len(self.rnics)}, "
                f"endpoints={len(self.endpoints)})"
            )

    def at(self, rnic: str, endpoint: str) -> float:
        return float(self.gbps[self.rnics.index(rnic), self.endpoints.index(endpoint)])


def incidence(topo: IntraHostTopology, rnics: tuple[str, ...], endpoints: tuple[str, ...]) -> np.ndarray:
    """Boolean ``[len(rnics) * len(endpoints), len(topo.links)]``: path j (row-major) crosses link i."""
    links = {name: i for i, name in enumerate(topo.links)}
    a = np.zeros((len(rnics) * len(endpoints), len(links)), dtype=bool)
    for r, rnic in enumerate(rnics):
        for e, ep in enumerate(endpoints):
            a[r * len(endpoints) + e, [links[x] for x in topo.path(rnic, ep)]] = True
    return a


def idle_path_states(m: BandwidthMatrix, baseline: np.ndarray, abnormal_th: float = ABNORMAL_TH) -> np.ndarray:
    """Idle mode: 1.0 normal, 0.0 abnormal (bandwidth < (1 - th) x baseline), NaN untested."""
    out = np.where(m.gbps >= (1 - abnormal_th) * baseline, 1.0, 0.0)
    return np.where(np.isnan(m.gbps), np.nan, out)


def busy_path_states(
    m: BandwidthMatrix,
    baseline: np.ndarray,
    abnormal_th: float = ABNORMAL_TH,
    idle_rnics: frozenset[str] = frozenset(),
) -> np.ndarray:
    """Busy mode: each path's bandwidth/baseline against the median ratio of its RNIC's tested paths.

    Rows of ``idle_rnics`` (RNICs without service traffic) are judged against the baseline
    itself, as in idle mode (Hostping §4.3: an idle RNIC's results as baseline).
    """
    ratio = m.gbps / baseline
    with np.errstate(all="ignore"):
        ref = np.nanmedian(ratio, axis=1, keepdims=True)
    idle = np.array([r in idle_rnics for r in m.rnics])[:, None]
    ref = np.where(idle, 1.0, ref)
    out = np.where(ratio >= (1 - abnormal_th) * ref, 1.0, 0.0)
    return np.where(np.isnan(m.gbps), np.nan, out)


@dataclass(frozen=True)
class LinkHistory:
    """Per-link counters carried between rounds: consecutive gray rounds and abnormal rounds."""

    gray_streak: dict[str, int] = field(default_factory=dict)
    abnormal_cnt: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Round:
    """Result of one Algorithm 1 round.

    ``state`` holds every link crossed by a tested path (untested links are absent);
    ``abnormal_paths``/``gray_paths`` list ``(rnic, endpoint)``.
    """

    state: dict[str, str]
    abnormal_paths: tuple[tuple[str, str], ...]
    gray_paths: tuple[tuple[str, str], ...]
    history: LinkHistory


def algorithm1(
    topo: IntraHostTopology,
    m: BandwidthMatrix,
    path_state: np.ndarray,
    history: LinkHistory | None = None,
    flap_grays: int = FLAP_GRAYS,
) -> Round:
    """Hostping Algorithm 1 over one round of path states (1 normal, 0 abnormal, NaN untested)."""
    history = history or LinkHistory()
    links = topo.links
    a = incidence(topo, m.rnics, m.endpoints)
    y = path_state.reshape(-1)
    tested = ~np.isnan(y)
    good = tested & (y == 1.0)
    bad = tested & (y == 0.0)
    normal = (a & good[:, None]).any(axis=0)
    on_bad = (a & bad[:, None]).any(axis=0)
    abnormal = on_bad & ~normal
    gray_path = bad & ~(a & ~normal[None, :]).any(axis=1)
    gray = (a & gray_path[:, None]).any(axis=0)
    streak = np.array([history.gray_streak.get(x, 0) for x in links]) + 1
    streak = np.where(gray, streak, 0)
    cnt = np.array([history.abnormal_cnt.get(x, 0) for x in links]) + abnormal
    crossed = normal | on_bad
    state = {}
    for i, link in enumerate(links):
        if not crossed[i]:
            continue
        if streak[i] >= flap_grays:
            state[link] = "flapping"
        elif abnormal[i]:
            state[link] = "abnormal"
        elif gray[i]:
            state[link] = "gray"
        else:
            state[link] = "normal"
    n_e = len(m.endpoints)
    pairs = [(m.rnics[j // n_e], m.endpoints[j % n_e]) for j in range(len(y))]
    return Round(
        state,
        tuple(p for p, b in zip(pairs, bad, strict=True) if b),
        tuple(p for p, g in zip(pairs, gray_path, strict=True) if g),
        LinkHistory(
            {x: int(s) for x, s in zip(links, streak, strict=True) if s},
            {x: int(c) for x, c in zip(links, cnt, strict=True) if c},
        ),
    )


#: Cause of an abnormal link when the bus monitor has no reading to judge it by (never "failure":
#: without a utilisation, congestion cannot be ruled out).
UNKNOWN_NO_COUNTERS = "unknown (no bus counters on this host)"
UNKNOWN_NO_LINK_COUNTER = "unknown (no bus counter for this link)"


def bus_cause(utilisation: float | None, util_high: float = UTIL_HIGH, host_has_counters: bool = True) -> str:
    """Bus monitor (§3.4): ``congestion`` when the link's utilisation (0..1) exceeds ``util_high``,
    ``failure`` when it was read and is below it.

    Without a reading the cause is unknown, never ``failure``: :data:`UNKNOWN_NO_COUNTERS` when the host
    published no bus utilisation at all (``host_has_counters`` False: no perf uncore, NVML or RNIC
    counter readable there), else :data:`UNKNOWN_NO_LINK_COUNTER`.
    """
    if utilisation is None:
        return UNKNOWN_NO_LINK_COUNTER if host_has_counters else UNKNOWN_NO_COUNTERS
    return "congestion" if utilisation > util_high else "failure"
