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
from producers.sim.routing import Topology
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
        cut_f, cut_r = self.trace_reach(plan, t_ns)
        return cut_f >= 0, cut_r >= 0

    def trace_reach(self, plan: Plan, t_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """Hops a trace at ``t_ns`` reaches before a dead hop, per entry (forward, reverse); -1: all.

        A traceroute stops at the last hop that answers: before a dead link (the node on the
        tracer's side of it), before a dead RNIC or a silent host's RNIC (its ToR), and at
        the tracer's own RNIC if that one is dead (nothing leaves it).
        """
        nf = len(plan.entries)
        t = np.array([t_ns])

        def first_hit(h: np.ndarray, hit: np.ndarray) -> np.ndarray:
            # hit: (E, L) bool over hop positions that do not answer; reach = index of the first one
            any_ = hit.any(1)
            return np.where(any_, hit.argmax(1), -1)

        reach = []
        for h in (plan.fwd, plan.rev):
            dead_hop = np.zeros(h.shape, dtype=bool)  # position j does not answer
            for f in self.faults:
                if isinstance(f, LinkDown | FlappingLink) and active(f, t)[0]:
                    u, v = self.topo.node_id[f.a], self.topo.node_id[f.b]
                    a, b = h[:, :-1], h[:, 1:]
                    across = ((a == u) & (b == v)) | ((a == v) & (b == u))
                    dead_hop[:, 1:] |= across
                elif isinstance(f, RnicDown) and active(f, t)[0]:
                    dead_hop |= h == self.topo.node_id[f.rnic]
            lengths = (h >= 0).sum(1)
            last = h[np.arange(nf), np.maximum(lengths - 1, 0)] if nf else np.zeros(0, np.int64)
            silent_dst = self._silent_node(t_ns, last)
            dead_hop[np.arange(nf), np.maximum(lengths - 1, 0)] |= silent_dst
            cut = first_hit(h, dead_hop & (h >= 0))
            # a dead tracer RNIC (position 0) reaches only itself
            reach.append(np.where(cut == 0, 1, cut))
        return reach[0], reach[1]

    def _silent_node(self, t_ns: int, node: np.ndarray) -> np.ndarray:
        """Whether each node id (an RNIC) belongs to a host that is silent at ``t_ns``."""
        out = np.zeros(len(node), dtype=bool)
        for f in self.faults:
            if isinstance(f, HostDown | HostRestart) and self.host_silent(np.array([t_ns]),
                                                                          np.array([self.topo.host_id[f.host]]))[0]:
                ids = [self.topo.node_id[r] for r in self.topo.inv.rnics_of_host(f.host)]
                out |= np.isin(node, ids)
        return out

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
