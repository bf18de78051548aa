"""A seeded Clos-fabric simulator that produces R-Pingmesh agent uploads (the ``sim`` backend).

The model (docs/design.md "Probe backends"), one module per concern:

* **Routing** (:mod:`producers.sim.routing`). Shortest up-down paths between ToRs; at every
  ToR and switch ECMP picks a next hop by hashing the 5-tuple with that node's own seed, so a
  5-tuple always takes one path and the forward and reverse directions hash independently.
  A fault does not reroute: a dead link blackholes what hashes onto it, as static routes do
  in the measured lab.
* **Probes** (:mod:`producers.sim.plan`, this module). Every pinglist entry fires at its
  ``rate_pps`` with a seeded phase; each 5 s upload batch is computed at once with numpy (no
  per-probe event loop).
* **Clocks.** ``t1``/``t6`` are on the prober host clock (epoch ns, NTP-skewed by up to
  ±1 ms per host); ``t2``/``t5`` on the prober RNIC clock and ``t3``/``t4`` on the responder
  RNIC clock, each running ahead of the epoch by its own 17 min to 30 days. Only
  same-clock differences are meaningful, as in R-Pingmesh §4.2.1.
* **Delays.** Network one-way = 1 µs NIC + 1.1 µs per link + Gamma queueing (mean 0.15 µs
  per link): a ToR-mesh RTT near 7 µs, an inter-ToR RTT near 12 µs. Responder delay
  ``t4−t3`` lognormal with median 4 µs; prober delay ``(t6−t1)−(t5−t2)`` median ~5 µs.
* **Timeouts.** A probe or ACK that is dropped, or that completes more than 500 ms after
  ``t1``, is a ``timeout`` with ``t3``..``t6`` null; ``t2`` is present unless the prober's
  own RNIC is down. Faults act as :mod:`producers.sim.fault_effects` says.
* **Paths.** Each agent uploads ``path.v1`` rows: the prober traces the forward 5-tuple
  (``direction="forward"``), the responder the reverse one of the ACK (``"reverse"``:
  ``src_rnic`` = responder, ``dst_rnic`` = prober, ports as in the probe). ``hops`` is what
  a traceroute at upload time returns: the whole path, or, when a hop does not answer (a
  dead link, a dead RNIC, a silent host), the hops up to the last one that answered, with
  ``complete`` False (routing is unchanged by a silent fault, so the path itself is the
  one traced before).

Ground truth (:meth:`Simulator.truth`) is for scoring only; the analyzer never reads it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from producers import controller as ctl
from producers.probe_protocol import TIMEOUT_NS  # the agents' 500 ms timeout, modelled here
from producers.sim.fault_effects import FaultEffects, Restart, active, remaining
from producers.sim.faults import (
    LINK_FAULTS,
    BusyHost,
    Fault,
    FlappingLink,
    LatencyLink,
    LinkDown,
    LossyLink,
    PartialTupleLoss,
    RnicDown,
)
from producers.sim.hashing import mix64, stable_seed, tuple_key
from producers.sim.plan import PINGLIST_CODES, Plan, even_inter_tor, hop_strings, make_plan
from producers.sim.routing import Topology
from schemas.inventory import Inventory

__all__ = ["BATCH_NS", "PINGLIST_CODES", "TIMEOUT_NS", "Simulator", "to_pylists", "tuple_key"]

BATCH_NS = 5_000_000_000

_STATUS = np.array(["ok", "timeout"], dtype=object)


def clock_offsets(seed: int, n_hosts: int, n_rnics: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded clock offsets (ns): each host's NTP error (±1 ms) and each RNIC clock's lead on the epoch.

    RNIC clocks are free-running device clocks: epoch ns plus 17 min to 30 days.
    """
    rng = np.random.default_rng(stable_seed(seed, "clocks"))
    host_off = rng.integers(-1_000_000, 1_000_000, n_hosts)
    rnic_off = rng.integers(1000, 30 * 86400, n_rnics) * 10**9 + rng.integers(0, 10**9, n_rnics)
    return host_off, rnic_off


class Simulator:
    """Seeded Clos fabric producing 5 s agent uploads with injected faults.

    Args:
        inventory: the fabric (e.g. :func:`producers.sim.fabrics.panel1`).
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

    Raises:
        ValueError: a bad ``inter_tor`` or ``trace`` mode, or a fault naming an unknown
            node or an uncabled pair.

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
        self._extra: list[dict] = []
        self._extra_version = 0
        self.topo = Topology(inventory, seed)
        self.rnic_names, self.hosts, self.rnic_id, self.host_id = (
            self.topo.rnic_names,
            self.topo.hosts,
            self.topo.rnic_id,
            self.topo.host_id,
        )
        self._host_off, self._rnic_off = clock_offsets(seed, len(self.hosts), len(self.rnic_names))
        self.registry = ctl.Registry.from_inventory(inventory, seed=seed)
        self.effects = FaultEffects(self.topo, self.faults, seed)
        self._qpn_base = np.array([self.registry.qpn(r) for r in self.rnic_names], dtype=np.int64)
        self._seq = np.zeros(len(self.hosts), dtype=np.uint64)
        self._traced_mask = np.zeros(0, dtype=bool)
        self._plan_key: object = None
        self._plan: Plan | None = None
        self.tuple_drops: dict[int, dict[int, int]] = {}
        """Fault index → second (``t1 // 1e9``) → probes a :class:`PartialTupleLoss` dropped (ground truth
        for scoring: the share of the probed tuples its hash selects is known only here)."""

    def _lost_anyway(self, t: np.ndarray, src: np.ndarray, dst: np.ndarray, rh: np.ndarray) -> np.ndarray:
        """True where a probe at ``t`` (ns) from RNIC ``src`` to RNIC ``dst`` on host ``rh`` (index arrays) is
        lost whatever its path: the responder's host is down or restarting, or either RNIC is down."""
        out = self.effects.host_silent(t, rh)
        for f in self.faults:
            if isinstance(f, RnicDown):
                r = self.rnic_id[f.rnic]
                out |= active(f, t) & ((src == r) | (dst == r))
        return out

    # ---- routing ------------------------------------------------------------------------
    def route(self, src_rnic: np.ndarray, dst_rnic: np.ndarray, key: np.ndarray) -> np.ndarray:
        """Hop matrix of 5-tuples hashed with ``key`` (see :meth:`Topology.route`)."""
        return self.topo.route(src_rnic, dst_rnic, key)

    def path(self, src_rnic: str, dst_rnic: str, src_port: int, dst_port: int = 4791) -> list[str]:
        """The forward path (hop names) of one 5-tuple."""
        return self.topo.path(src_rnic, dst_rnic, src_port, dst_port)

    def find_flow_label(self, src_rnic: str, dst_rnic: str, via: str, start: int = 0) -> int:
        """The smallest flow label ``>= start`` whose forward path from ``src_rnic`` crosses node ``via``.

        Raises:
            ValueError: no flow label among 2^20 reaches ``via``.
        """
        return self.topo.find_flow_label(src_rnic, dst_rnic, via, start)

    # ---- pinglists -----------------------------------------------------------------------
    def even_inter_tor(self, per_switch: int = 2, now_ns: int = 0) -> list[dict]:
        """Inter-ToR entries, ``per_switch`` per top switch and ordered ToR pair (see :func:`plan.even_inter_tor`)."""
        return even_inter_tor(self.topo, self.registry, self.seed, per_switch, now_ns)

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
            "inter_tor": [*it, *self._extra],
            "service": ctl.service(self.inv, self.registry, self._connections),
        }

    def set_extra(self, entries: Sequence[dict]) -> None:
        """Replace the short-lived inter-ToR entries the controller's closed loop asks for (from the next
        batch; :mod:`producers.controller_loop`). Not applied over fixed ``pinglists``."""
        entries = list(entries)
        if entries != self._extra:
            self._extra = entries
            self._extra_version += 1

    def set_connections(self, connections: Sequence[dict]) -> None:
        """Replace the job-published connection list of the ``service`` pinglist (from the next batch)."""
        self._connections = list(connections)
        self._plan_key = None

    def _plan_for(self, now_ns: int) -> Plan:
        key = ("fixed" if self._fixed is not None or self._inter_tor_mode == "even" else now_ns // ctl.HOUR_NS,
               self._extra_version)
        if key != self._plan_key:
            lists = self.pinglists(now_ns)
            self._plan = make_plan(self.topo, [e for name in PINGLIST_CODES for e in lists.get(name, [])], self.seed)
            self._plan_key = key
            self._traced_mask = np.zeros(0, dtype=bool)
        assert self._plan is not None
        return self._plan

    # ---- QPNs and ground truth --------------------------------------------------------
    @property
    def restarts(self) -> dict[int, list[Restart]]:
        """RNIC index -> ``[(effective_ns, known_by_probers_ns, new_qpn)]`` of its host's restarts, sorted."""
        return self.effects.restarts

    def qpn_at(self, rnic: str, at_ns: int) -> int:
        """The QPN ``rnic``'s probing QP has at ``at_ns`` (changes when its host restarts)."""
        qpn = self.registry.qpn(rnic)
        for eff, _known, new in self.restarts.get(self.rnic_id[rnic], []):
            if eff <= at_ns:
                qpn = new
        return qpn

    def registry_columns(self, at_ns: int, agent_id: str = "controller") -> dict[str, list]:
        """``registry.v1`` columns of every RNIC as the Controller lists them at ``at_ns``."""
        cols = self.registry.to_columns(agent_id, at_ns)
        cols["qpn"] = [self.qpn_at(r, at_ns) for r in cols["rnic"]]
        return cols

    def truth(self) -> list[dict]:
        """Ground-truth labels of the injected faults (see :meth:`FaultEffects.truth`)."""
        return self.effects.truth()

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
        fx = self.effects
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
        alive = ~fx.host_silent(T1, ph)
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
                cf, cr = fx.crossing(plan, fi)
                cf, cr = cf[e], cr[e]
                act = active(f, T1)
                if isinstance(f, LinkDown | FlappingLink):
                    lost_f |= act & cf
                    lost_r |= act & cr
                elif isinstance(f, LossyLink):
                    lost_f |= act & cf & (rng.random(m) < f.rate)
                    lost_r |= act & cr & (rng.random(m) < f.rate)
                elif isinstance(f, PartialTupleLoss):
                    salt = np.uint64(stable_seed(self.seed, "partial", fi))
                    sel = mix64(plan.tuple_key[e] ^ salt) % np.uint64(10**6) < np.uint64(int(f.fraction * 10**6))
                    lost_f |= act & cf & sel
                    lost_r |= act & cr & sel
                    # ground truth counts the drops a probe could show: one to a silent host or a down RNIC is
                    # lost whatever the link does (seed 27941, scenario 129: the one tuple selected went to a
                    # host that was down, and 72-76 "expected" failures were never there to be seen)
                    hit = act & (cf | cr) & sel & ~self._lost_anyway(T1, src, dst, rh)
                    if hit.any():
                        secs, n_hit = np.unique(T1[hit] // 1_000_000_000, return_counts=True)
                        d = self.tuple_drops.setdefault(fi, {})
                        for sec, k in zip(secs.tolist(), n_hit.tolist(), strict=True):
                            d[sec] = d.get(sec, 0) + k
                elif isinstance(f, LatencyLink):
                    hit_f = act & cf & (rng.random(m) < f.prob)
                    hit_r = act & cr & (rng.random(m) < f.prob)
                    fwd += np.where(hit_f, rng.exponential(f.extra_us * 1e3, m), 0.0)
                    rev += np.where(hit_r, rng.exponential(f.extra_us * 1e3, m), 0.0)
            elif isinstance(f, RnicDown):
                r = self.rnic_id[f.rnic]
                act = active(f, T1)
                no_t2 |= act & (src == r)
                lost_f |= act & ((src == r) | (dst == r))
            elif isinstance(f, BusyHost):
                h = self.host_id[f.host]
                act = active(f, T1)
                starts, ends = fx.stalls(fi, f, t0, t1 + TIMEOUT_NS)
                on_r, on_p = act & (rh == h), act & (ph == h)
                if on_r.any():
                    extra = rng.lognormal(np.log(f.delay_us * 1e3), 0.5, int(on_r.sum()))
                    t3 = T1[on_r] + (post + fwd)[on_r].astype(np.int64)
                    resp[on_r] += extra + remaining(t3, starts, ends)
                if on_p.any():
                    k = int(on_p.sum())
                    post[on_p] += rng.lognormal(np.log(f.delay_us * 1e3 / 4), 0.5, k)
                    t5 = T1[on_p] + (post + fwd + resp + rev)[on_p].astype(np.int64)
                    poll[on_p] += rng.lognormal(np.log(f.delay_us * 1e3), 0.5, k) + remaining(t5, starts, ends)
        # responder host down or restarting: nothing answers
        lost_f |= fx.host_silent(T1, rh)
        # QPN the prober addresses vs. the responder's current one
        qpn_base = self._qpn_base
        carried = qpn_base[dst]
        current = carried.copy()
        for r, sched in self.restarts.items():
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
        fwd_hops, rev_hops = hop_strings(plan, self.topo.node_names)
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
        dead_f, dead_r = fx.trace_reach(plan, t1)
        silent = fx.host_silent(np.full(len(self.hosts), t1), np.arange(len(self.hosts)))
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
        plan: Plan,
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
        reach_f, reach_r = dead  # hops each trace reaches; -1: complete
        ips, names = self.topo.rnic_ips, self.topo.rnic_names_arr
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
            "hops": _cut(np.concatenate([fwd_hops[fw], rev_hops[rv]]), np.concatenate([reach_f[fw], reach_r[rv]])),
            "complete": np.concatenate([reach_f[fw], reach_r[rv]]) < 0,
        }
        return _ordered(cols, _PATH_FIELDS)


def _cut(hops: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """Hop lists cut to the hops a trace reached (``reach`` >= 0); the rest unchanged."""
    out = hops.copy()
    for i in np.flatnonzero(reach >= 0).tolist():  # only traces through a dead hop: few
        out[i] = ",".join(str(hops[i]).split(",")[: int(reach[i])])
    return out


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
