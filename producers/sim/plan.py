"""Pinglists as the simulator probes them: per-entry arrays with both traced paths.

A :class:`Plan` is built once per set of pinglists (they change hourly under Eq. 1),
so every 5 s upload only indexes into its arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from producers import controller as ctl
from producers.sim.hashing import stable_seed, tuple_key
from producers.sim.routing import Topology

PINGLIST_CODES = ("tor_mesh", "inter_tor", "service")


@dataclass
class Plan:
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


def make_plan(topo: Topology, entries: list[dict], seed: int) -> Plan:
    """The :class:`Plan` of pinglist ``entries`` (as built by :mod:`producers.controller`).

    Each entry fires at ``rate_pps`` with a phase drawn from ``seed`` and the entry count.
    """
    e = len(entries)
    src = np.array([topo.rnic_id[x["prober_rnic"]] for x in entries], dtype=np.int64)
    dst = np.array([topo.rnic_id[x["responder_rnic"]] for x in entries], dtype=np.int64)
    sport = np.array([x["src_port"] for x in entries], dtype=np.uint16)
    dport = np.array([x["dst_port"] for x in entries], dtype=np.uint16)
    rng = np.random.default_rng(stable_seed(seed, "phase", e))
    fkey = tuple_key(topo.rnic_ip[src], topo.rnic_ip[dst], sport, dport)
    rkey = tuple_key(topo.rnic_ip[dst], topo.rnic_ip[src], sport, dport)
    fwd = topo.route(src, dst, fkey) if e else np.zeros((0, 2), np.int64)
    rev = topo.route(dst, src, rkey) if e else np.zeros((0, 2), np.int64)
    if any("bounce_path" in x for x in entries):
        fwd, rev = _bounce(topo, entries, fwd, rev)
    names = topo.rnic_names_arr
    ips = topo.rnic_ips
    hosts = np.array(topo.hosts, dtype=object)
    cols = {
        "pinglist": np.array([x["pinglist"] for x in entries], dtype=object),
        "prober_host": hosts[topo.rnic_host[src]],
        "prober_rnic": names[src],
        "responder_host": hosts[topo.rnic_host[dst]],
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
    return Plan(
        entries=entries,
        src=src,
        dst=dst,
        src_host=topo.rnic_host[src],
        dst_host=topo.rnic_host[dst],
        rate=np.array([x["rate_pps"] for x in entries], dtype=np.float64),
        phase=rng.random(e),
        tuple_key=fkey,
        fwd=fwd,
        rev=rev,
        fwd_links=(fwd >= 0).sum(1) - 1,
        rev_links=(rev >= 0).sum(1) - 1,
        cols=cols,
    )


def _bounce(topo: Topology, entries: list[dict], fwd: np.ndarray, rev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of bounced entries (``bounce_path``: the switches up to where the probe turns, e.g.
    ``"T1,P0S1,X2"``): forward ``R, T1, P0S1, X2, P0S1, T1, R`` (down the same links: a Clos has one
    downward route from a switch to a ToR), reverse ``R`` (the ACK stays inside the RNIC: no link)."""
    rows = {}
    for i, x in enumerate(entries):
        if "bounce_path" in x:
            r = topo.rnic_id[x["prober_rnic"]]
            up = [topo.node_id[h] for h in str(x["bounce_path"]).split(",")]
            rows[i] = [r, *up, *up[-2::-1], r]
    width = max(fwd.shape[1], max(len(v) for v in rows.values()))
    f = np.full((len(entries), width), -1, dtype=np.int64)
    f[:, : fwd.shape[1]] = fwd
    rv = rev.copy()
    for i, row in rows.items():
        f[i] = -1
        f[i, : len(row)] = row
        rv[i] = -1
        rv[i, 0] = row[0]
    return f, rv


def hop_strings(plan: Plan, node_names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``path.v1`` ``hops`` text of every entry's forward and reverse path (cached on ``plan``)."""
    if plan.fwd_hops is None:

        def join(h: np.ndarray) -> np.ndarray:
            out = np.empty(len(h), dtype=object)
            out[:] = [",".join(node_names[row[row >= 0]]) for row in h]
            return out

        plan.fwd_hops, plan.rev_hops = join(plan.fwd), join(plan.rev)
    assert plan.rev_hops is not None
    return plan.fwd_hops, plan.rev_hops


def even_inter_tor(
    topo: Topology, registry: ctl.Registry, seed: int, per_switch: int = 2, now_ns: int = 0
) -> list[dict]:
    """Inter-ToR entries spread evenly: for each ordered ToR pair, ``per_switch`` tuples
    through each top switch, forward and reverse paths through the same switch.

    This is the digest's Panel 1 set-up ("two per switch for each ordered pair of
    ToRs"): on Panel 1, a dead A–S3 then fails exactly 8 tuples. Sources and
    destinations rotate over the RNICs of the two ToRs. Rate: 10 probes/s per entry.
    The search is per ordered ToR pair (quadratic in ToRs): meant for small fabrics.
    """
    rng = np.random.default_rng(stable_seed(seed, "even", now_ns))
    out: list[dict] = []
    under = {t: [topo.rnic_id[r] for r in topo.inv.rnics_under_tor(t)] for t in topo.tor_names}
    for x in topo.tor_names:
        for y in topo.tor_names:
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
                f = topo.route(s, d, tuple_key(topo.rnic_ip[s], topo.rnic_ip[d], sport, dport))
                r = topo.route(d, s, tuple_key(topo.rnic_ip[d], topo.rnic_ip[s], sport, dport))
                apex_f = f[np.arange(n), (f >= 0).sum(1) // 2]
                apex_r = r[np.arange(n), (r >= 0).sum(1) // 2]
                if tops is None:
                    tops = set(np.unique(apex_f).tolist()) | set(np.unique(apex_r).tolist())
                for i in np.flatnonzero(apex_f == apex_r):
                    a = int(apex_f[i])
                    if got.get(a, 0) < per_switch:
                        got[a] = got.get(a, 0) + 1
                        out.append(
                            ctl.pinglist_entry(
                                "inter_tor",
                                topo.inv,
                                registry,
                                topo.rnic_names[int(s[i])],
                                topo.rnic_names[int(d[i])],
                                int(fl[i]),
                                10.0,
                                ctl.DEFAULT_TC,
                            )
                        )
                if tops and all(got.get(t, 0) >= per_switch for t in tops):
                    break
    return out


def entry_links(topo: Topology) -> Callable[[list[dict]], list[frozenset[str]]]:
    """The simulator's ECMP model as a :data:`producers.controller_ident.PathsOf`: pinglist entries →
    the switch links (``lower->upper``) each one's forward and ACK paths cross.

    What the tracer would report for those 5-tuples on this fabric (the same hash as the probes take).
    A bounced entry (``bounce_path``, :func:`producers.controller_loop.bounce_entries`) crosses the
    links of its climb.
    """
    name: dict[tuple[int, int], str] = {}
    for ln in topo.inv.links:
        a, b = topo.node_id[ln.a], topo.node_id[ln.b]
        name[a, b] = name[b, a] = f"{ln.a}->{ln.b}"

    def climb(x: dict) -> frozenset[str]:  # a bounced probe crosses the links of its climb, up and back
        hops = str(x["bounce_path"]).split(",")
        return frozenset(name[topo.node_id[u], topo.node_id[v]] for u, v in zip(hops, hops[1:], strict=False))

    def paths_of(entries: list[dict]) -> list[frozenset[str]]:
        bounced = {i: climb(x) for i, x in enumerate(entries) if "bounce_path" in x}
        if bounced:
            routed = iter(paths_of([x for i, x in enumerate(entries) if i not in bounced]))
            return [bounced[i] if i in bounced else next(routed) for i in range(len(entries))]
        if not entries:
            return []
        src = np.array([topo.rnic_id[x["prober_rnic"]] for x in entries], dtype=np.int64)
        dst = np.array([topo.rnic_id[x["responder_rnic"]] for x in entries], dtype=np.int64)
        sport = np.array([x["src_port"] for x in entries], dtype=np.uint16)
        dport = np.array([x["dst_port"] for x in entries], dtype=np.uint16)
        fwd = topo.route(src, dst, tuple_key(topo.rnic_ip[src], topo.rnic_ip[dst], sport, dport))
        rev = topo.route(dst, src, tuple_key(topo.rnic_ip[dst], topo.rnic_ip[src], sport, dport))
        out = []
        for f, r in zip(fwd.tolist(), rev.tolist(), strict=True):
            s = set()
            for h in (f, r):
                for u, v in zip(h, h[1:], strict=False):
                    if v < 0:
                        break
                    lk = name.get((u, v))
                    if lk is not None:
                        s.add(lk)
            out.append(frozenset(s))
        return out

    return paths_of
