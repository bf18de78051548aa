"""Where and when the injected faults act: active intervals, silent hosts, stalls, restarts.

:mod:`producers.sim.faults` declares the faults; this module answers the questions the
upload loop asks of them (is this fault active at these times, which entries cross this
link, when does a restarted RNIC get its new QPN) and writes their ground-truth labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from producers.sim.faults import (
    LINK_FAULTS,
    BusyHost,
    Fault,
    FlappingLink,
    HostDown,
    HostRestart,
    LatencyLink,
    LinkDown,
    RnicDown,
)
from producers.sim.hashing import stable_seed
from producers.sim.plan import Plan
from producers.sim.topology import Topology
from schemas.inventory import link_name

# One restart of an RNIC's host: (effective_ns, known_by_probers_ns, new_qpn).
Restart = tuple[int, int, int]


def active(f: Fault, t: np.ndarray) -> np.ndarray:
    """Where fault ``f`` is in force at times ``t`` (ns); a flapping link only in its down part."""
    act = (t >= f.start) & (t < f.end)
    if isinstance(f, FlappingLink):
        period = int(f.period_s * 1e9)
        base = f.start if f.start_ns is not None else 0
        act &= ((t - base) % period) < int(f.down_s * 1e9)
    return act


def remaining(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """ns left until the stall (``starts``, running-max ``ends``) covering each ``t`` ends; 0 outside."""
    if starts.size == 0:
        return np.zeros(len(t), dtype=np.int64)
    i = np.searchsorted(starts, t, side="right") - 1
    rem = np.where(i >= 0, ends[np.maximum(i, 0)] - t, 0)
    return np.maximum(rem, 0)


class FaultEffects:
    """The faults of one simulation, checked against the topology.

    Args:
        topo: the fabric the faults refer to.
        faults: faults from :mod:`producers.sim.faults`.
        seed: seeds stall placement and the QPNs of restarted hosts.

    Raises:
        ValueError: a fault names an unknown node, RNIC or host, or two nodes that are
            not cabled together.
    """

    def __init__(self, topo: Topology, faults: Sequence[Fault], seed: int = 0):
        self.topo = topo
        self.faults = list(faults)
        self.seed = seed
        self._check()
        self.restarts: dict[int, list[Restart]] = self._restart_schedule()
        """RNIC index -> its restarts, sorted."""

    def _check(self) -> None:
        topo = self.topo
        known = set(topo.node_id)
        for f in self.faults:
            if isinstance(f, LINK_FAULTS):
                for end in (f.a, f.b):
                    if end not in known:
                        raise ValueError(f"{type(f).__name__}: unknown node {end!r}; use inventory node names")
                if f.b not in topo.neighbours(f.a):
                    raise ValueError(f"{type(f).__name__}: {f.a!r} and {f.b!r} are not linked in the inventory")
            elif isinstance(f, RnicDown) and f.rnic not in topo.rnic_id:
                raise ValueError(f"RnicDown: unknown RNIC {f.rnic!r}")
            elif isinstance(f, HostDown | HostRestart | BusyHost) and f.host not in topo.host_id:
                raise ValueError(f"{type(f).__name__}: unknown host {f.host!r}")

    def _restart_schedule(self) -> dict[int, list[Restart]]:
        sched: dict[int, list[Restart]] = {}
        for fi, f in enumerate(self.faults):
            if not isinstance(f, HostRestart):
                continue
            eff = f.start + int(f.downtime_s * 1e9)
            known = eff + int(f.refresh_s * 1e9)
            for r in self.topo.inv.rnics_of_host(f.host):
                qpn = stable_seed(self.seed, "qpn", fi, r) % 0xFFFF00 + 0x100
                sched.setdefault(self.topo.rnic_id[r], []).append((eff, known, qpn))
        for v in sched.values():
            v.sort()
        return sched

    def crossing(self, plan: Plan, fi: int) -> tuple[np.ndarray, np.ndarray]:
        """Entries of ``plan`` whose forward / reverse path crosses link fault ``fi`` (cached on ``plan``)."""
        if fi not in plan.cross:
            f = self.faults[fi]
            u, v = self.topo.node_id[f.a], self.topo.node_id[f.b]

            def cross(h: np.ndarray) -> np.ndarray:
                a, b = h[:, :-1], h[:, 1:]
                return (((a == u) & (b == v)) | ((a == v) & (b == u))).any(1)

            plan.cross[fi] = (cross(plan.fwd), cross(plan.rev))
        return plan.cross[fi]

    def host_silent(self, t: np.ndarray, host: np.ndarray) -> np.ndarray:
        """True where ``host`` (index array) is down or restarting at time ``t``."""
        out = np.zeros(len(t), dtype=bool)
        for f in self.faults:
            if isinstance(f, HostDown):
                out |= (host == self.topo.host_id[f.host]) & active(f, t)
            elif isinstance(f, HostRestart):
                end = f.start + int(f.downtime_s * 1e9)
                out |= (host == self.topo.host_id[f.host]) & (t >= f.start) & (t < end)
        return out

    def stalls(self, fi: int, f: BusyHost, lo_ns: int, hi_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """Stall episodes (starts, running max of ends) of a busy host overlapping [lo, hi).

        One stall per period of ``1 / stall_hz`` seconds, placed at a seeded random offset in
        its period, so the share of time stalled is steady from window to window.
        """
        period = int(1e9 / f.stall_hz)
        stall = int(f.stall_s * 1e9)
        first = (max(lo_ns - stall, f.start) - period) // period
        last = min(hi_ns, f.end) // period + 1
        starts = []
        for k in range(int(first), int(last) + 1):
            rng = np.random.default_rng(stable_seed(self.seed, "stall", fi, k))
            starts.append(k * period + int(rng.integers(0, max(period - stall, 1))))
        s = np.array(sorted(x for x in starts if f.start <= x < f.end), dtype=np.int64)
        e = np.maximum.accumulate(s + stall) if s.size else s
        return s, e

    def dead_paths(self, plan: Plan, t_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """Entries whose forward / reverse trace at ``t_ns`` would stop at a dead hop."""
        nf = len(plan.entries)
        dead_f = np.zeros(nf, dtype=bool)
        dead_r = np.zeros(nf, dtype=bool)
        t = np.array([t_ns])
        for fi, f in enumerate(self.faults):
            if isinstance(f, LinkDown | FlappingLink) and active(f, t)[0]:
                cf, cr = self.crossing(plan, fi)
                dead_f |= cf
                dead_r |= cr
            elif isinstance(f, RnicDown) and active(f, t)[0]:
                r = self.topo.rnic_id[f.rnic]
                dead_f |= (plan.src == r) | (plan.dst == r)
                dead_r |= (plan.src == r) | (plan.dst == r)
        silent = self.host_silent(np.full(nf, t_ns), plan.dst_host)
        dead_f |= silent
        return dead_f, dead_r

    def truth(self) -> list[dict]:
        """Ground-truth labels of the injected faults (for scoring; the analyzer never reads them).

        Each is ``{kind, location, start_ns, end_ns, fault}``; ``kind`` is the verdict the
        analyzer should reach and ``location`` its location (RNIC id, host, or link
        ``"lower->upper"``). ``start_ns``/``end_ns`` are None when unbounded.
        """
        tier = self.topo.tier
        out = []
        for f in self.faults:
            end = f.end_ns
            if isinstance(f, LINK_FAULTS):
                a, b = (f.a, f.b) if tier(f.a) <= tier(f.b) else (f.b, f.a)
                rnic_cable = a in self.topo.rnic_id
                if isinstance(f, LatencyLink):
                    kind = "rnic_latency" if rnic_cable else "switch_latency"
                else:
                    kind = "rnic" if rnic_cable else "switch"
                loc = a if rnic_cable else link_name(a, b)
            elif isinstance(f, RnicDown):
                kind, loc = "rnic", f.rnic
            elif isinstance(f, HostDown):
                kind, loc = "host_down", f.host
            elif isinstance(f, HostRestart):
                kind, loc = "stale_qpn", f.host
                end = f.start + int((f.downtime_s + f.refresh_s) * 1e9)
            else:
                kind, loc = "busy_host", f.host
            out.append({"kind": kind, "location": loc, "start_ns": f.start_ns, "end_ns": end, "fault": f.fault})
        return out
