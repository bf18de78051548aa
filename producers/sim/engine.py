"""A seeded Clos-fabric simulator that produces R-Pingmesh agent uploads (the ``sim`` backend).

The model (DESIGN.md "Probe backends"; issue 4):

* **Routing.** Shortest up-down paths between ToRs; at every ToR and switch ECMP picks a
  next hop by hashing the 5-tuple with that node's own seed, so a 5-tuple always takes one
  path (stickiness) and the forward and reverse directions (the reverse 5-tuple swaps the
  addresses) hash independently. A fault does not reroute: a dead link blackholes what
  hashes onto it, as the issue's measured lab does for static routes.
* **Probes.** Every pinglist entry fires at its ``rate_pps`` with a seeded phase; each 5 s
  upload batch is computed at once with numpy (no per-probe event loop).
* **Clocks.** ``t1``/``t6`` are on the prober host clock (epoch ns, NTP-skewed by up to
  ±1 ms per host); ``t2``/``t5`` on the prober RNIC clock and ``t3``/``t4`` on the responder
  RNIC clock, each running ahead of the epoch by its own 17 min to 30 days. Only
  same-clock differences are meaningful, as in R-Pingmesh §4.2.1.
* **Delays.** Network one-way = 1 µs NIC + 1.1 µs per link + Gamma queueing (mean 0.15 µs
  per link): a ToR-mesh RTT near 7 µs, an inter-ToR RTT near 12 µs. Responder delay
  ``t4−t3`` lognormal with median 4 µs; prober delay ``(t6−t1)−(t5−t2)`` median ~5 µs.
* **Timeouts.** A probe or ACK that is dropped, or that completes more than 500 ms after
  ``t1``, is a ``timeout`` with ``t3``..``t6`` null; ``t2`` is present unless the prober's
  own RNIC is down.
* **Paths.** Each agent uploads ``path.v1`` rows: the prober traces the forward 5-tuple
  (``direction="forward"``), the responder the reverse one of the ACK (``"reverse"``:
  ``src_rnic`` = responder, ``dst_rnic`` = prober, ports as in the probe). ``hops`` is the
  path traced in advance (routing is unchanged by a silent fault); ``complete`` is False
  when a trace at upload time would stop at a dead hop.

Ground truth (:meth:`Simulator.truth`) is for scoring only; the analyzer never reads it.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from producers import controller as ctl
from producers.sim.faults import (
    LINK_FAULTS,
    BusyHost,
    Fault,
    FlappingLink,
    HostDown,
    HostRestart,
    LatencyLink,
    LinkDown,
    LossyLink,
    PartialTupleLoss,
    RnicDown,
)
from schemas.inventory import Inventory, link_name

BATCH_NS = 5_000_000_000
TIMEOUT_NS = 500_000_000
PINGLIST_CODES = ("tor_mesh", "inter_tor", "service")

_STATUS = np.array(["ok", "timeout"], dtype=object)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over a uint64 array (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def tuple_key(src_ip: np.ndarray, dst_ip: np.ndarray, sport: np.ndarray, dport: np.ndarray) -> np.ndarray:
    """A 64-bit hash key of UDP 5-tuples (IPv4 addresses as uint32, protocol 17)."""
    a = (src_ip.astype(np.uint64) << np.uint64(32)) | dst_ip.astype(np.uint64)
    b = (sport.astype(np.uint64) << np.uint64(16)) | dport.astype(np.uint64) | np.uint64(17 << 40)
    return _mix64(_mix64(a) ^ b)


def _stable_seed(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


@dataclass
class _Plan:
    """Per-entry arrays of one set of pinglists, with both traced paths."""

    entries: list[dict]
    src: np.ndarray  # RNIC index
    dst: np.ndarray
    src_host: np.ndarray  # host index
    dst_host: np.ndarray
    rate: np.ndarray
    phase: np.ndarray
    tuple_key: np.ndarray
    fwd: np.ndarray  # (E, L) global node ids, -1 padded
    rev: np.ndarray
    fwd_links: np.ndarray  # links per direction
    rev_links: np.ndarray
    cols: dict[str, np.ndarray]  # per-entry probe.v1 columns that are copied as-is
    fwd_hops: np.ndarray | None = None  # object: comma-joined hop names (lazy)
    rev_hops: np.ndarray | None = None
    cross: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


class Simulator:
    """Seeded Clos fabric producing 5 s agent uploads with injected faults.

    Args:
        inventory: the fabric (e.g. :func:`schemas.inventory.panel1`).
        seed: seeds ECMP hash seeds, phases, QPNs, clocks and every random draw.
        faults: faults from :mod:`producers.sim.faults`.
        pinglists: fixed pinglists (``{"tor_mesh": [...], ...}``, entries as built by
            :mod:`producers.controller`); default: ``tor_mesh``, ``inter_tor`` from Eq. 1
            (rebuilt each hour: 20 % of tuples replaced) and ``service`` from ``connections``.
        inter_tor: ``"eq1"`` (default) or ``"even"``: ``per_switch`` tuples through every
            top switch for each ordered ToR pair, with forward and reverse paths on the same
            switch (the digest's Panel 1 set-up; see :meth:`even_inter_tor`).
        connections: a job-published connection list for the ``service`` pinglist.
        trace: ``"every_batch"`` (every probed tuple's paths in every upload) or
            ``"on_change"`` (a tuple's paths when first probed and whenever it timed out).
        background_loss: per-link drop probability of a healthy link (default 0).

    Call :meth:`upload_batches` for consecutive 5 s intervals in time order (the per-agent
    ``seq`` continues across calls).
    """

    def __init__(
        self,
        inventory: Inventory,
        seed: int = 0,
        faults: Sequence[Fault] = (),
        *,
        pinglists: dict[str, list[dict]] | None = None,
        inter_tor: str = "eq1",
        per_switch: int = 2,
        connections: Sequence[dict] = (),
        trace: str = "every_batch",
        background_loss: float = 0.0,
    ):
        if inter_tor not in ("eq1", "even"):
            raise ValueError(f"inter_tor must be 'eq1' or 'even', got {inter_tor!r}")
        if trace not in ("every_batch", "on_change"):
            raise ValueError(f"trace must be 'every_batch' or 'on_change', got {trace!r}")
        self.inv = inventory
        self.seed = seed
        self.faults = list(faults)
        self.trace = trace
        self.background_loss = background_loss
        self._connections = list(connections)
        self._inter_tor_mode = inter_tor
        self._per_switch = per_switch
        self._fixed = pinglists
        self._build_topology()
        self.registry = ctl.Registry.from_inventory(inventory, seed=seed)
        self._check_faults()
        self._restarts = self._restart_schedule()
        self._qpn_base = np.array([self.registry.qpn(r) for r in self.rnic_names], dtype=np.int64)
        self._seq = np.zeros(len(self.hosts), dtype=np.uint64)
        self._traced_mask = np.zeros(0, dtype=bool)
        self._plan_key: object = None
        self._plan: _Plan | None = None

    # ---- topology and routing ----------------------------------------------------
    def _build_topology(self) -> None:
        inv = self.inv
        self.rnic_names = list(inv.rnics)
        self.hosts = list(inv.hosts)
        self.tor_names = list(inv.tors)
        self.switch_names = [*inv.tors, *inv.switches]  # switch space: ToRs first
        self.node_names = np.array([*self.rnic_names, *self.switch_names], dtype=object)
        self.node_id = {n: i for i, n in enumerate(self.node_names)}
        self.rnic_id = {n: i for i, n in enumerate(self.rnic_names)}
        self.host_id = {h: i for i, h in enumerate(self.hosts)}
        nr, ns, nt = len(self.rnic_names), len(self.switch_names), len(self.tor_names)
        self._nr = nr
        self.rnic_host = np.array([self.host_id[inv.rnics[r].host] for r in self.rnic_names])
        self.rnic_tor = np.array([self.tor_names.index(inv.rnics[r].tor) for r in self.rnic_names])
        self._rnic_ips = np.array([inv.rnics[r].ip for r in self.rnic_names], dtype=object)
        self._rnic_names_arr = np.array(self.rnic_names, dtype=object)
        self.rnic_ip = np.array([int(ipaddress.IPv4Address(inv.rnics[r].ip)) for r in self.rnic_names], np.uint32)
        sw_id = {n: i for i, n in enumerate(self.switch_names)}
        adj = np.zeros((ns, ns), dtype=bool)
        for ln in inv.links:
            adj[sw_id[ln.a], sw_id[ln.b]] = adj[sw_id[ln.b], sw_id[ln.a]] = True
        is_tor = np.zeros(ns, dtype=bool)
        is_tor[:nt] = True
        # dist[d, u]: hops from switch u to ToR d, never transiting another ToR.
        big = np.iinfo(np.int32).max // 2
        dist = np.full((nt, ns), big, dtype=np.int32)
        dist[np.arange(nt), np.arange(nt)] = 0
        frontier = np.zeros((nt, ns), dtype=bool)
        frontier[np.arange(nt), np.arange(nt)] = True
        level = 0
        while frontier.any():
            level += 1
            reached = (frontier.astype(np.int32) @ adj.astype(np.int32)) > 0
            new = reached & (dist == big)
            dist[new] = level
            frontier = new & ~is_tor[None, :]
        nbrs = [np.flatnonzero(adj[u]) for u in range(ns)]
        masks = []
        for u in range(ns):
            nb = nbrs[u]
            dv = dist[:, nb]
            ok = (dv == dist[:, u : u + 1] - 1) & ((~is_tor[nb])[None, :] | (nb[None, :] == np.arange(nt)[:, None]))
            masks.append(ok)
        fan = max(1, max(int(m.sum(1).max()) if m.size else 0 for m in masks))
        self._nh = np.full((ns, nt, fan), -1, dtype=np.int32)
        self._cnt = np.zeros((ns, nt), dtype=np.int64)
        for u in range(ns):
            ok = masks[u]
            if ok.size == 0:
                continue
            order = np.argsort(~ok, axis=1, kind="stable")[:, :fan]
            self._nh[u, :, : order.shape[1]] = np.where(np.take_along_axis(ok, order, 1), nbrs[u][order], -1)
            self._cnt[u] = ok.sum(1)
        self._max_depth = int(dist[dist < big].max()) + 1 if nt else 1
        self._node_seed = np.array([_stable_seed(self.seed, "ecmp", n) for n in self.switch_names], dtype=np.uint64)
        rng = np.random.default_rng(_stable_seed(self.seed, "clocks"))
        self._host_off = rng.integers(-1_000_000, 1_000_000, len(self.hosts))
        # RNIC clock = epoch ns + a per-device offset of 17 min to 30 days (free-running device clocks).
        self._rnic_off = rng.integers(1000, 30 * 86400, nr) * 10**9 + rng.integers(0, 10**9, nr)

    def route(self, src_rnic: np.ndarray, dst_rnic: np.ndarray, key: np.ndarray) -> np.ndarray:
        """Hop matrix (global node ids, -1 padded) of 5-tuples hashed with ``key``.

        Each row is ``src RNIC, its ToR, ..., dst ToR, dst RNIC``.
        """
        m = len(src_rnic)
        nr = self._nr
        cur = self.rnic_tor[src_rnic].astype(np.int64)
        dt = self.rnic_tor[dst_rnic].astype(np.int64)
        cols = [src_rnic.astype(np.int64), cur + nr]
        for _ in range(2 * self._max_depth + 2):
            active = cur != dt
            if not active.any():
                break
            c = np.maximum(self._cnt[cur, dt], 1)
            h = _mix64(key ^ self._node_seed[cur])
            choice = (h % c.astype(np.uint64)).astype(np.int64)
            nxt = self._nh[cur, dt, choice].astype(np.int64)
            cols.append(np.where(active, nxt + nr, -1))
            cur = np.where(active, nxt, cur)
        hops = np.full((m, len(cols) + 1), -1, dtype=np.int64)
        stacked = np.stack(cols, axis=1)
        hops[:, : len(cols)] = stacked
        length = (stacked >= 0).sum(1)
        hops[np.arange(m), length] = dst_rnic
        return hops

    def path(self, src_rnic: str, dst_rnic: str, src_port: int, dst_port: int = 4791) -> list[str]:
        """The forward path (hop names) of one 5-tuple."""
        s, d = self.rnic_id[src_rnic], self.rnic_id[dst_rnic]
        key = tuple_key(self.rnic_ip[[s]], self.rnic_ip[[d]], np.array([src_port]), np.array([dst_port]))
        row = self.route(np.array([s]), np.array([d]), key)[0]
        return [str(self.node_names[i]) for i in row if i >= 0]

    def find_flow_label(self, src_rnic: str, dst_rnic: str, via: str, start: int = 0) -> int:
        """The smallest flow label ``>= start`` whose forward path from ``src_rnic`` crosses node ``via``.

        Handy to place a job's connection on a chosen switch (the digest's job H1 + H3).

        Raises:
            ValueError: no flow label among 2^20 reaches ``via``.
        """
        target = self.node_id[via]
        s, d = self.rnic_id[src_rnic], self.rnic_id[dst_rnic]
        for lo in range(start, 1 << 20, 4096):
            fl = np.arange(lo, min(lo + 4096, 1 << 20))
            sport = np.array([ctl.udp_sport_from_flow_label(int(f)) for f in fl])
            n = len(fl)
            key = tuple_key(np.full(n, self.rnic_ip[s]), np.full(n, self.rnic_ip[d]), sport, np.full(n, 4791))
            hops = self.route(np.full(n, s), np.full(n, d), key)
            hit = np.flatnonzero((hops == target).any(1))
            if hit.size:
                return int(fl[hit[0]])
        raise ValueError(f"no flow label from {src_rnic} to {dst_rnic} crosses {via}")

    # ---- pinglists -------------------------------------------------------------------
    def even_inter_tor(self, per_switch: int = 2, now_ns: int = 0) -> list[dict]:
        """Inter-ToR entries spread evenly: for each ordered ToR pair, ``per_switch`` tuples
        through each top switch, forward and reverse paths through the same switch.

        This is the digest's Panel 1 set-up ("two per switch for each ordered pair of
        ToRs"): on Panel 1, a dead A–S3 then fails exactly 8 tuples. Sources and
        destinations rotate over the RNICs of the two ToRs. Rate: 10 probes/s per entry.
        The search is per ordered ToR pair (quadratic in ToRs): meant for small fabrics.
        """
        rng = np.random.default_rng(_stable_seed(self.seed, "even", now_ns))
        out: list[dict] = []
        under = {t: [self.rnic_id[r] for r in self.inv.rnics_under_tor(t)] for t in self.tor_names}
        for x in self.tor_names:
            for y in self.tor_names:
                if x == y or not under[x] or not under[y]:
                    continue
                xs, ys = np.array(under[x]), np.array(under[y])
                got: dict[int, int] = {}
                tops = None
                j0 = 0
                for _ in range(64):
                    n = 512
                    j = np.arange(j0, j0 + n)
                    j0 += n
                    s = xs[j % len(xs)]
                    d = ys[(j // len(xs)) % len(ys)]
                    fl = rng.integers(0, 1 << 20, n)
                    sport = ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000
                    dport = np.full(n, 4791)
                    f = self.route(s, d, tuple_key(self.rnic_ip[s], self.rnic_ip[d], sport, dport))
                    r = self.route(d, s, tuple_key(self.rnic_ip[d], self.rnic_ip[s], sport, dport))
                    apex_f = f[np.arange(n), (f >= 0).sum(1) // 2]
                    apex_r = r[np.arange(n), (r >= 0).sum(1) // 2]
                    if tops is None:
                        tops = set(np.unique(apex_f).tolist()) | set(np.unique(apex_r).tolist())
                    for i in np.flatnonzero(apex_f == apex_r):
                        a = int(apex_f[i])
                        if got.get(a, 0) < per_switch:
                            got[a] = got.get(a, 0) + 1
                            out.append(
                                ctl._entry(
                                    "inter_tor",
                                    self.inv,
                                    self.registry,
                                    self.rnic_names[int(s[i])],
                                    self.rnic_names[int(d[i])],
                                    int(fl[i]),
                                    10.0,
                                    ctl.DEFAULT_TC,
                                )
                            )
                    if tops and all(got.get(t, 0) >= per_switch for t in tops):
                        break
        return out

    def pinglists(self, now_ns: int = 0) -> dict[str, list[dict]]:
        """The pinglists in force at ``now_ns``."""
        if self._fixed is not None:
            return self._fixed
        if self._inter_tor_mode == "even":
            it = self.even_inter_tor(self._per_switch)
        else:
            it = ctl.inter_tor(self.inv, self.registry, seed=self.seed, now_ns=now_ns)
        return {
            "tor_mesh": ctl.tor_mesh(self.inv, self.registry),
            "inter_tor": it,
            "service": ctl.service(self.inv, self.registry, self._connections),
        }

    def set_connections(self, connections: Sequence[dict]) -> None:
        """Replace the job-published connection list of the ``service`` pinglist (from the next batch)."""
        self._connections = list(connections)
        self._plan_key = None

    def _plan_for(self, now_ns: int) -> _Plan:
        key = "fixed" if self._fixed is not None or self._inter_tor_mode == "even" else now_ns // ctl.HOUR_NS
        if key != self._plan_key:
            lists = self.pinglists(now_ns)
            self._plan = self._make_plan([e for name in PINGLIST_CODES for e in lists.get(name, [])])
            self._plan_key = key
            self._traced_mask = np.zeros(0, dtype=bool)
        assert self._plan is not None
        return self._plan

    def _make_plan(self, entries: list[dict]) -> _Plan:
        e = len(entries)
        src = np.array([self.rnic_id[x["prober_rnic"]] for x in entries], dtype=np.int64)
        dst = np.array([self.rnic_id[x["responder_rnic"]] for x in entries], dtype=np.int64)
        sport = np.array([x["src_port"] for x in entries], dtype=np.uint16)
        dport = np.array([x["dst_port"] for x in entries], dtype=np.uint16)
        rng = np.random.default_rng(_stable_seed(self.seed, "phase", e))
        fkey = tuple_key(self.rnic_ip[src], self.rnic_ip[dst], sport, dport)
        rkey = tuple_key(self.rnic_ip[dst], self.rnic_ip[src], sport, dport)
        fwd = self.route(src, dst, fkey) if e else np.zeros((0, 2), np.int64)
        rev = self.route(dst, src, rkey) if e else np.zeros((0, 2), np.int64)
        names = np.array(self.rnic_names, dtype=object)
        ips = np.array([self.inv.rnics[r].ip for r in self.rnic_names], dtype=object)
        hosts = np.array(self.hosts, dtype=object)
        cols = {
            "pinglist": np.array([x["pinglist"] for x in entries], dtype=object),
            "prober_host": hosts[self.rnic_host[src]],
            "prober_rnic": names[src],
            "responder_host": hosts[self.rnic_host[dst]],
            "responder_rnic": names[dst],
            "src_ip": ips[src],
            "dst_ip": ips[dst],
            "src_port": sport,
            "dst_port": dport,
            "flow_label": np.array([x["flow_label"] for x in entries], dtype=np.uint32),
            "traffic_class": np.array([x["traffic_class"] for x in entries], dtype=np.uint8),
            "priority": np.array([x["priority"] for x in entries], dtype=np.uint8),
            "gid_index": np.array([x["gid_index"] for x in entries], dtype=np.uint16),
            "job_id": np.array([x.get("job_id") for x in entries], dtype=object),
        }
        return _Plan(
            entries=entries,
            src=src,
            dst=dst,
            src_host=self.rnic_host[src],
            dst_host=self.rnic_host[dst],
            rate=np.array([x["rate_pps"] for x in entries], dtype=np.float64),
            phase=rng.random(e),
            tuple_key=fkey,
            fwd=fwd,
            rev=rev,
            fwd_links=(fwd >= 0).sum(1) - 1,
            rev_links=(rev >= 0).sum(1) - 1,
            cols=cols,
        )

    def _hop_strings(self, plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
        if plan.fwd_hops is None:
            names = self.node_names

            def join(h: np.ndarray) -> np.ndarray:
                out = np.empty(len(h), dtype=object)
                out[:] = [",".join(names[row[row >= 0]]) for row in h]
                return out

            plan.fwd_hops, plan.rev_hops = join(plan.fwd), join(plan.rev)
        assert plan.rev_hops is not None
        return plan.fwd_hops, plan.rev_hops

    # ---- faults ----------------------------------------------------------------------
    def _check_faults(self) -> None:
        known = set(self.node_id)
        for f in self.faults:
            if isinstance(f, LINK_FAULTS):
                for end in (f.a, f.b):
                    if end not in known:
                        raise ValueError(f"{type(f).__name__}: unknown node {end!r}; use inventory node names")
                if f.b not in self._neighbours(f.a):
                    raise ValueError(f"{type(f).__name__}: {f.a!r} and {f.b!r} are not linked in the inventory")
            elif isinstance(f, RnicDown) and f.rnic not in self.rnic_id:
                raise ValueError(f"RnicDown: unknown RNIC {f.rnic!r}")
            elif isinstance(f, HostDown | HostRestart | BusyHost) and f.host not in self.host_id:
                raise ValueError(f"{type(f).__name__}: unknown host {f.host!r}")

    def _neighbours(self, node: str) -> set[str]:
        if node in self.inv.rnics:
            return {self.inv.rnics[node].tor}
        out = {r.id for r in self.inv.rnics.values() if r.tor == node}
        out |= {ln.b for ln in self.inv.links if ln.a == node} | {ln.a for ln in self.inv.links if ln.b == node}
        return out

    def _crossing(self, plan: _Plan, fi: int) -> tuple[np.ndarray, np.ndarray]:
        if fi not in plan.cross:
            f = self.faults[fi]
            u, v = self.node_id[f.a], self.node_id[f.b]

            def cross(h: np.ndarray) -> np.ndarray:
                a, b = h[:, :-1], h[:, 1:]
                return (((a == u) & (b == v)) | ((a == v) & (b == u))).any(1)

            plan.cross[fi] = (cross(plan.fwd), cross(plan.rev))
        return plan.cross[fi]

    @staticmethod
    def _active(f: Fault, t: np.ndarray) -> np.ndarray:
        act = (t >= f.start) & (t < f.end)
        if isinstance(f, FlappingLink):
            period = int(f.period_s * 1e9)
            base = f.start if f.start_ns is not None else 0
            act &= ((t - base) % period) < int(f.down_s * 1e9)
        return act

    def _host_silent(self, t: np.ndarray, host: np.ndarray) -> np.ndarray:
        """True where ``host`` (index array) is down or restarting at time ``t``."""
        out = np.zeros(len(t), dtype=bool)
        for f in self.faults:
            if isinstance(f, HostDown):
                out |= (host == self.host_id[f.host]) & self._active(f, t)
            elif isinstance(f, HostRestart):
                end = f.start + int(f.downtime_s * 1e9)
                out |= (host == self.host_id[f.host]) & (t >= f.start) & (t < end)
        return out

    def _restart_schedule(self) -> dict[int, list[tuple[int, int, int]]]:
        """rnic index -> [(effective_ns, known_by_probers_ns, new_qpn)] sorted."""
        sched: dict[int, list[tuple[int, int, int]]] = {}
        for fi, f in enumerate(self.faults):
            if not isinstance(f, HostRestart):
                continue
            eff = f.start + int(f.downtime_s * 1e9)
            known = eff + int(f.refresh_s * 1e9)
            for r in self.inv.rnics_of_host(f.host):
                qpn = _stable_seed(self.seed, "qpn", fi, r) % 0xFFFF00 + 0x100
                sched.setdefault(self.rnic_id[r], []).append((eff, known, qpn))
        for v in sched.values():
            v.sort()
        return sched

    def qpn_at(self, rnic: str, at_ns: int) -> int:
        """The QPN ``rnic``'s probing QP has at ``at_ns`` (changes when its host restarts)."""
        qpn = self.registry.qpn(rnic)
        for eff, _known, new in self._restarts.get(self.rnic_id[rnic], []):
            if eff <= at_ns:
                qpn = new
        return qpn

    def registry_columns(self, at_ns: int, agent_id: str = "controller") -> dict[str, list]:
        """``registry.v1`` columns of every RNIC as the Controller lists them at ``at_ns``."""
        cols = self.registry.to_columns(agent_id, at_ns)
        cols["qpn"] = [self.qpn_at(r, at_ns) for r in cols["rnic"]]
        return cols

    def truth(self) -> list[dict]:
        """Ground-truth labels of the injected faults (for scoring; the analyzer never reads them).

        Each is ``{kind, location, start_ns, end_ns, fault}``; ``kind`` is the verdict the
        analyzer should reach and ``location`` its location (RNIC id, host, or link
        ``"lower->upper"``). ``start_ns``/``end_ns`` are None when unbounded.
        """
        out = []
        for f in self.faults:
            end = f.end_ns
            if isinstance(f, LINK_FAULTS):
                a, b = (f.a, f.b) if self._tier(f.a) <= self._tier(f.b) else (f.b, f.a)
                rnic_cable = a in self.rnic_id
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

    def _tier(self, node: str) -> int:
        if node in self.rnic_id:
            return 0
        if node in self.inv.tors:
            return 1
        return 2 + ("spine", "agg", "core").index(self.inv.switches[node].tier)

    def _stalls(self, fi: int, f: BusyHost, lo_ns: int, hi_ns: int) -> tuple[np.ndarray, np.ndarray]:
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
            rng = np.random.default_rng(_stable_seed(self.seed, "stall", fi, k))
            starts.append(k * period + int(rng.integers(0, max(period - stall, 1))))
        s = np.array(sorted(x for x in starts if f.start <= x < f.end), dtype=np.int64)
        e = np.maximum.accumulate(s + stall) if s.size else s
        return s, e

    @staticmethod
    def _remaining(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        if starts.size == 0:
            return np.zeros(len(t), dtype=np.int64)
        i = np.searchsorted(starts, t, side="right") - 1
        rem = np.where(i >= 0, ends[np.maximum(i, 0)] - t, 0)
        return np.maximum(rem, 0)

    # ---- one upload interval -----------------------------------------------------------
    def upload_batches(self, start_ns: int, seconds: float = 5.0) -> list[tuple[str, dict, dict]]:
        """Every agent's upload for probes posted in ``[start_ns, start_ns + seconds)``.

        Returns:
            ``[(agent_id, probe_columns, path_columns), ...]`` one per live host, sorted by
            host; columns are dicts of numpy arrays in ``probe.v1`` / ``path.v1`` field
            order (strings as object arrays, nullable ``t2``..``t6`` as masked arrays, so
            ``schemas.arrow_pa.table_from_columns`` takes them as they are; use
            :func:`to_pylists` before ``schemas.arrow_nano.encode_columns``). A host that is
            down at upload time uploads nothing (R-Pingmesh §5 "host down").
        """
        t0, t1 = int(start_ns), int(start_ns + seconds * 1e9)
        plan = self._plan_for(t0)
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, (t0 // BATCH_NS) & 0xFFFFFFFF, 7])
        # -- schedule: entry e fires at (n + phase_e) / rate_e seconds for integer n.
        t0s, t1s = t0 / 1e9, t1 / 1e9
        lo = np.ceil(t0s * plan.rate - plan.phase)
        hi = np.ceil(t1s * plan.rate - plan.phase)
        counts = np.maximum(hi - lo, 0).astype(np.int64)
        e = np.repeat(np.arange(len(counts)), counts)
        n = lo[e] + (np.arange(len(e)) - np.repeat(np.cumsum(counts) - counts, counts))
        T1 = t0 + np.round(((n + plan.phase[e]) / plan.rate[e] - t0s) * 1e9).astype(np.int64)
        T1 = np.clip(T1, t0, t1 - 1)
        ph = plan.src_host[e]
        # the prober's host must be alive to post probes and to upload them
        alive = ~self._host_silent(T1, ph)
        e, T1, ph = e[alive], T1[alive], ph[alive]
        m = len(e)
        src, dst = plan.src[e], plan.dst[e]
        rh = plan.dst_host[e]
        # -- delays (true ns)
        post = rng.lognormal(np.log(1500.0), 0.3, m)
        poll = rng.lognormal(np.log(3000.0), 0.35, m)
        resp = rng.lognormal(np.log(4000.0), 0.35, m)
        fl, rl = plan.fwd_links[e], plan.rev_links[e]
        fwd = 1000.0 + 1100.0 * fl + rng.gamma(np.maximum(fl, 1), 150.0)
        rev = 1000.0 + 1100.0 * rl + rng.gamma(np.maximum(rl, 1), 150.0)
        lost_f = np.zeros(m, dtype=bool)
        lost_r = np.zeros(m, dtype=bool)
        no_t2 = np.zeros(m, dtype=bool)
        if self.background_loss > 0:
            lost_f |= rng.random(m) >= (1 - self.background_loss) ** fl
            lost_r |= rng.random(m) >= (1 - self.background_loss) ** rl
        for fi, f in enumerate(self.faults):
            if isinstance(f, LINK_FAULTS):
                cf, cr = self._crossing(plan, fi)
                cf, cr = cf[e], cr[e]
                act = self._active(f, T1)
                if isinstance(f, LinkDown | FlappingLink):
                    lost_f |= act & cf
                    lost_r |= act & cr
                elif isinstance(f, LossyLink):
                    lost_f |= act & cf & (rng.random(m) < f.rate)
                    lost_r |= act & cr & (rng.random(m) < f.rate)
                elif isinstance(f, PartialTupleLoss):
                    salt = np.uint64(_stable_seed(self.seed, "partial", fi))
                    sel = _mix64(plan.tuple_key[e] ^ salt) % np.uint64(10**6) < np.uint64(int(f.fraction * 10**6))
                    lost_f |= act & cf & sel
                    lost_r |= act & cr & sel
                elif isinstance(f, LatencyLink):
                    hit_f = act & cf & (rng.random(m) < f.prob)
                    hit_r = act & cr & (rng.random(m) < f.prob)
                    fwd += np.where(hit_f, rng.exponential(f.extra_us * 1e3, m), 0.0)
                    rev += np.where(hit_r, rng.exponential(f.extra_us * 1e3, m), 0.0)
            elif isinstance(f, RnicDown):
                r = self.rnic_id[f.rnic]
                act = self._active(f, T1)
                no_t2 |= act & (src == r)
                lost_f |= act & ((src == r) | (dst == r))
            elif isinstance(f, BusyHost):
                h = self.host_id[f.host]
                act = self._active(f, T1)
                starts, ends = self._stalls(fi, f, t0, t1 + TIMEOUT_NS)
                on_r, on_p = act & (rh == h), act & (ph == h)
                if on_r.any():
                    extra = rng.lognormal(np.log(f.delay_us * 1e3), 0.5, int(on_r.sum()))
                    t3 = T1[on_r] + (post + fwd)[on_r].astype(np.int64)
                    resp[on_r] += extra + self._remaining(t3, starts, ends)
                if on_p.any():
                    k = int(on_p.sum())
                    post[on_p] += rng.lognormal(np.log(f.delay_us * 1e3 / 4), 0.5, k)
                    t5 = T1[on_p] + (post + fwd + resp + rev)[on_p].astype(np.int64)
                    poll[on_p] += rng.lognormal(np.log(f.delay_us * 1e3), 0.5, k) + self._remaining(t5, starts, ends)
        # responder host down or restarting: nothing answers
        lost_f |= self._host_silent(T1, rh)
        # QPN the prober addresses vs. the responder's current one
        qpn_base = self._qpn_base
        carried = qpn_base[dst]
        current = carried.copy()
        for r, sched in self._restarts.items():
            on = dst == r
            if not on.any():
                continue
            tt = T1[on]
            cur_q = np.full(len(tt), qpn_base[r])
            known_q = cur_q.copy()
            for eff, known, q in sched:
                cur_q = np.where(tt >= eff, q, cur_q)
                known_q = np.where(tt >= known, q, known_q)
            carried[on], current[on] = known_q, cur_q
        lost_f |= carried != current
        # -- timestamps
        T2 = T1 + post.astype(np.int64)
        T3 = T2 + fwd.astype(np.int64)
        T4 = T3 + resp.astype(np.int64)
        T5 = T4 + rev.astype(np.int64)
        T6 = T5 + poll.astype(np.int64)
        timeout = lost_f | lost_r | (T6 - T1 > TIMEOUT_NS)
        hoff = self._host_off
        roff = self._rnic_off
        t1c = T1 + hoff[ph]
        # -- one sort: per agent (prober host), rows in t1 order; then every agent is a slice
        order = np.lexsort((t1c, ph))
        e, ph, src, dst, timeout, no_t2, carried = (a[order] for a in (e, ph, src, dst, timeout, no_t2, carried))
        T1, T2, T3, T4, T5, T6, t1c = (a[order] for a in (T1, T2, T3, T4, T5, T6, t1c))
        data_t = {
            "t1": (t1c, np.zeros(m, bool)),
            "t2": (T2 + roff[src], no_t2),
            "t3": (T3 + roff[dst], timeout),
            "t4": (T4 + roff[dst], timeout),
            "t5": (T5 + roff[src], timeout),
            "t6": (T6 + hoff[ph], timeout),
        }
        status = _STATUS[timeout.astype(np.int8)]
        probe_all = {k: v[e] for k, v in plan.cols.items()}
        probe_all["qpn"] = carried.astype(np.uint32)
        probe_all["ts_source"] = np.broadcast_to(np.array(["hardware"], dtype=object), (m,))
        probe_all["status"] = status
        fwd_hops, rev_hops = self._hop_strings(plan)
        n_entries = len(plan.entries)
        probed_mask = np.bincount(e, minlength=n_entries) > 0
        if self.trace == "on_change":
            if len(self._traced_mask) != n_entries:
                self._traced_mask = np.zeros(n_entries, dtype=bool)
            timed_out = np.bincount(e[timeout], minlength=n_entries) > 0
            probed = np.flatnonzero(probed_mask & (~self._traced_mask | timed_out))
            self._traced_mask |= probed_mask
        else:
            probed = np.flatnonzero(probed_mask)
        fw_sorted = probed[np.argsort(plan.src_host[probed], kind="stable")]
        rv_sorted = probed[np.argsort(plan.dst_host[probed], kind="stable")]
        hb = np.arange(len(self.hosts) + 1)
        fw_b = np.searchsorted(plan.src_host[fw_sorted], hb)
        rv_b = np.searchsorted(plan.dst_host[rv_sorted], hb)
        bounds = np.searchsorted(ph, hb)
        dead_f, dead_r = self._dead_paths(plan, t1)
        silent = self._host_silent(np.full(len(self.hosts), t1), np.arange(len(self.hosts)))
        out = []
        for h in np.flatnonzero(~silent).tolist():
            a, b = int(bounds[h]), int(bounds[h + 1])
            k = b - a
            host = self.hosts[h]
            upload_ns = t1 + int(hoff[h]) + 50_000_000
            cols: dict[str, object] = {
                "agent_id": probe_all["prober_host"][a:b],
                "upload_ns": np.full(k, upload_ns, dtype=np.int64),
                "seq": self._seq[h] + np.arange(k, dtype=np.uint64),
            }
            self._seq[h] += np.uint64(k)
            for name, v in probe_all.items():
                cols[name] = v[a:b]
            for name, (d, mask) in data_t.items():
                cols[name] = np.ma.MaskedArray(d[a:b], mask=mask[a:b], copy=False)
            fw = fw_sorted[fw_b[h] : fw_b[h + 1]]
            rv = rv_sorted[rv_b[h] : rv_b[h + 1]]
            paths = self._paths_for(plan, h, fw, rv, upload_ns, t1, (fwd_hops, rev_hops), (dead_f, dead_r))
            out.append((host, _ordered(cols, _PROBE_FIELDS), paths))
        return out

    def _paths_for(
        self,
        plan: _Plan,
        h: int,
        fw: np.ndarray,
        rv: np.ndarray,
        upload_ns: int,
        t_ns: int,
        hop_strings: tuple[np.ndarray, np.ndarray],
        dead: tuple[np.ndarray, np.ndarray],
    ) -> dict:
        """``path.v1`` columns host ``h`` uploads: forward traces of ``fw``, reverse of ``rv``."""
        fwd_hops, rev_hops = hop_strings
        dead_f, dead_r = dead
        ips, names = self._rnic_ips, self._rnic_names_arr
        n = len(fw) + len(rv)
        s = np.concatenate([plan.src[fw], plan.dst[rv]])
        d = np.concatenate([plan.dst[fw], plan.src[rv]])
        ent = np.concatenate([fw, rv])
        cols = {
            "agent_id": np.full(n, self.hosts[h], dtype=object),
            "upload_ns": np.full(n, upload_ns, dtype=np.int64),
            "trace_ns": np.full(n, t_ns + int(self._host_off[h]), dtype=np.int64),
            "direction": np.array(["forward"] * len(fw) + ["reverse"] * len(rv), dtype=object),
            "src_rnic": names[s],
            "dst_rnic": names[d],
            "src_ip": ips[s],
            "dst_ip": ips[d],
            "src_port": plan.cols["src_port"][ent],
            "dst_port": plan.cols["dst_port"][ent],
            "hops": np.concatenate([fwd_hops[fw], rev_hops[rv]]),
            "complete": ~np.concatenate([dead_f[fw], dead_r[rv]]),
        }
        return _ordered(cols, _PATH_FIELDS)

    def _dead_paths(self, plan: _Plan, t_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """Entries whose forward / reverse trace at ``t_ns`` would stop at a dead hop."""
        nf = len(plan.entries)
        dead_f = np.zeros(nf, dtype=bool)
        dead_r = np.zeros(nf, dtype=bool)
        t = np.array([t_ns])
        for fi, f in enumerate(self.faults):
            if isinstance(f, LinkDown | FlappingLink) and self._active(f, t)[0]:
                cf, cr = self._crossing(plan, fi)
                dead_f |= cf
                dead_r |= cr
            elif isinstance(f, RnicDown) and self._active(f, t)[0]:
                r = self.rnic_id[f.rnic]
                dead_f |= (plan.src == r) | (plan.dst == r)
                dead_r |= (plan.src == r) | (plan.dst == r)
        silent = self._host_silent(np.full(nf, t_ns), plan.dst_host)
        dead_f |= silent
        return dead_f, dead_r


def _ordered(cols: dict, names: list[str]) -> dict:
    return {k: cols[k] for k in names}


def _fields(key: str) -> list[str]:
    from schemas.records import lookup

    return lookup(key).names


_PROBE_FIELDS = _fields("probe.v1")
_PATH_FIELDS = _fields("path.v1")


def to_pylists(cols: dict) -> dict[str, list]:
    """Columns as plain Python lists (masked values become None) for ``arrow_nano.encode_columns``."""
    out = {}
    for k, v in cols.items():
        if isinstance(v, np.ma.MaskedArray):
            vals = v.data.tolist()
            out[k] = [None if masked else x for x, masked in zip(vals, np.ma.getmaskarray(v).tolist(), strict=True)]
        else:
            out[k] = np.asarray(v).tolist()
    return out
