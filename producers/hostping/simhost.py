"""A simulated host for Hostping: loopback bandwidth matrices with injectable bottlenecks.

Healthy bandwidth follows the outstanding-read model fitted on the paper's Figure 4
(distance 1: 1.0 µs, 195.0 Gb/s; distance 3: 2.2 µs, 125.5 Gb/s), capped at the RNIC's
usable line rate. Host latency per path (µs): peer-to-peer under one PCIe switch 1.0;
GPU via the root complex 2.2; GPU across UPI 2.4 (Figure 4 distances 1/3/4); local
memory 1.0; remote memory 1.6.

Bottlenecks (:class:`Bottleneck`) act on paths the way the fault acts on traffic, and the
analyzer never sees them, only the matrix, the baseline, the topology and the bus
utilisation (:meth:`SimHost.bus_util`):

==============  ====================================================================
``cap``         link carries at most ``value`` Gb/s (PCIe downgrade, failing root port, UPI)
``scale``       paths over the link get ``value`` x bandwidth (failing memory channel)
``flap``        one path over the link (a different RNIC each round) gets ``value`` x
``congest``     like ``scale``, and the link's utilisation reads ``util`` (overload)
``acs``         peer-to-peer paths under switch ``target`` detour via the root complex (2.2 µs)
``ats_off``     every GPU path pays ``value`` µs of IOMMU translation at the root complex
``slow_start``  RNIC ``target`` ramps from a low rate: ``value`` x bandwidth on every path
``tx_window``   RNIC ``target`` keeps ``value`` x W bytes in flight: W'/(Lat + c)
==============  ====================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from schemas.intrahost import (
    IntraHostTopology,
    fit_outstanding_read,
    loopback_latency_us,
    outstanding_read_bw_gbps,
)

FIG4 = (1.0, 195.0, 2.2, 125.5)
LINE_RATE_GBPS = 197.0
BOTTLENECKS = ("cap", "scale", "flap", "congest", "acs", "ats_off", "slow_start", "tx_window")


@dataclass(frozen=True)
class Bottleneck:
    """One injected fault: ``kind`` from :data:`BOTTLENECKS`, ``target`` a link, switch or RNIC."""

    kind: str
    target: str = ""
    value: float = 0.0
    util: float = 0.95

    def __post_init__(self) -> None:
        if self.kind not in BOTTLENECKS:
            raise ValueError(f"Bottleneck.kind {self.kind!r} is not one of {BOTTLENECKS}")


@dataclass
class SimHost:
    """A host with an intra-host topology, a seeded noise source and injected bottlenecks."""

    topo: IntraHostTopology
    bottlenecks: list[Bottleneck] = field(default_factory=list)
    seed: int = 0
    noise: float = 0.01
    base_util: float = 0.2

    def __post_init__(self) -> None:
        self.window_kbit, self.c_us = fit_outstanding_read(*FIG4)
        self._rng = np.random.default_rng(self.seed)

    @property
    def rnics(self) -> tuple[str, ...]:
        return tuple(self.topo.rnics)

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(self.topo.endpoints)

    def lat_host_us(self, rnic: str, endpoint: str, acs_switches: frozenset[str] = frozenset()) -> float:
        """Host latency (µs) of the path, by distance (see module docstring)."""
        remote = self.topo.socket(rnic) != self.topo.socket(endpoint)
        if self.topo.kinds[endpoint] == "mem":
            return 1.6 if remote else 1.0
        if self.topo.is_p2p(rnic, endpoint):
            return 2.2 if self.topo.parent[rnic] in acs_switches else 1.0
        return 2.4 if remote else 2.2

    def _bw(self, lat: float, window_scale: float = 1.0) -> float:
        return min(LINE_RATE_GBPS, outstanding_read_bw_gbps(lat, self.window_kbit * window_scale, self.c_us))

    def baseline(self) -> np.ndarray:
        """Healthy bandwidth matrix (Gb/s), no noise: what the analyzer compares against."""
        return np.array([[self._bw(self.lat_host_us(r, e)) for e in self.endpoints] for r in self.rnics])

    def matrix(
        self,
        round_no: int = 0,
        mode: str = "idle",
        service_share: float = 0.3,
        busy_rnics: frozenset[str] | None = None,
    ) -> np.ndarray:
        """One round of loopback results (Gb/s; NaN for untested pairs).

        ``idle`` tests every RNIC with every endpoint; ``busy`` tests each RNIC with its affinitive
        endpoints and the remote memory nodes, and service traffic takes ``service_share`` of every
        path of the busy RNICs (all of them unless ``busy_rnics`` is given).
        """
        if mode not in ("idle", "busy"):
            raise ValueError(f"mode {mode!r}: use 'idle' or 'busy'")
        acs = frozenset(b.target for b in self.bottlenecks if b.kind == "acs")
        ats = sum(b.value for b in self.bottlenecks if b.kind == "ats_off")
        busy = frozenset(self.rnics) if busy_rnics is None else busy_rnics
        out = np.full((len(self.rnics), len(self.endpoints)), np.nan)
        for i, r in enumerate(self.rnics):
            tested = set(self.endpoints)
            if mode == "busy":
                remote = {m for m in self.topo.nodes("mem") if self.topo.socket(m) != self.topo.socket(r)}
                tested = set(self.topo.affinitive(r)) | remote
            for j, e in enumerate(self.endpoints):
                if e not in tested:
                    continue
                lat = self.lat_host_us(r, e, acs) + (ats if self.topo.kinds[e] == "gpu" else 0.0)
                wscale = np.prod([b.value for b in self.bottlenecks if b.kind == "tx_window" and b.target == r])
                bw = self._bw(lat, float(wscale))
                bw *= self._path_factor(r, e, round_no)
                bw = min(
                    [bw] + [b.value for b in self.bottlenecks if b.kind == "cap" and b.target in self.topo.path(r, e)]
                )
                if mode == "busy" and r in busy:
                    bw *= 1 - service_share
                out[i, j] = bw * (1 + self.noise * self._rng.standard_normal())
        return out

    def _path_factor(self, r: str, e: str, round_no: int) -> float:
        links = self.topo.path(r, e)
        f = 1.0
        for b in self.bottlenecks:
            on_path = b.kind in ("scale", "congest") and b.target in links
            if on_path or (b.kind == "slow_start" and b.target == r):
                f *= b.value
            elif b.kind == "flap" and b.target in links:
                over = [rn for rn in self.rnics if b.target in self.topo.path(rn, e)]
                if over and r == over[round_no % len(over)]:
                    f *= b.value
        return f

    def bus_util(self) -> dict[str, float]:
        """Bus monitor reading: utilisation 0..1 per link (``congest`` links read their ``util``)."""
        util = dict.fromkeys(self.topo.links, self.base_util)
        for b in self.bottlenecks:
            if b.kind == "congest":
                util[b.target] = b.util
        return util

    def rnic_config(self) -> dict[str, dict[str, bool]]:
        """What reading each RNIC's ROCE_ACCL register would show."""
        return {
            r: {
                "slow_start": any(b.kind == "slow_start" and b.target == r for b in self.bottlenecks),
                "tx_window": any(b.kind == "tx_window" and b.target == r for b in self.bottlenecks),
            }
            for r in self.rnics
        }


@dataclass
class SimBackend:
    """A :class:`producers.hostping.loopback.LoopbackBackend` answering from a :class:`SimHost` by Eq. 1.

    ``t_proc_us`` is the RNIC processing time (µs) the loopback engine has to calibrate away.
    """

    sim: SimHost
    t_proc_us: float = 1.5
    round_no: int = 0

    def __post_init__(self) -> None:
        self._bw = self.sim.matrix(self.round_no)

    def latency_us(self, rnic: str, src: str, dst: str, size_bytes: int) -> float:
        i, j = self.sim.rnics.index(rnic), self.sim.endpoints.index(dst)
        return loopback_latency_us(self.t_proc_us, self.sim.lat_host_us(rnic, dst), size_bytes, float(self._bw[i, j]))
