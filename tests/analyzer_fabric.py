"""A small, seeded two-tier Clos fabric that writes probe and path tables for analyzer tests.

Vectorised per flow (numpy), with the faults of R-Pingmesh §5 / Panel 1 of the
digest: dead or lossy physical links, dead or flaky RNICs, busy hosts, silent
agents, restarted targets (stale QPN) and latency-only links. The default shape
is the digest's Panel 1: ToRs A, B, C; switches S1–S4; hosts H1–H6 of two RNICs
(H1: A1, A2; H2: A3, A4; H3: B1, B2 ...); inter-ToR tuples two per switch for
each ordered ToR pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from producers.sim import fabrics
from schemas.arrow_pa import table_from_columns
from schemas.inventory import Inventory

S = 1_000_000_000
BASE_RTT_NS = 6_000
BASE_RESP_NS = 2_000
BASE_PROBER_NS = 3_000


@dataclass
class Fabric:
    """Hosts, RNICs and ToRs of a two-tier Clos; names follow the digest's Panel 1."""

    tors: list[str]
    spines: list[str]
    rnic_host: dict[str, str]
    rnic_tor: dict[str, str]

    def rnics_of(self, tor: str) -> list[str]:
        return sorted(r for r, t in self.rnic_tor.items() if t == tor)

    def host_rnics(self, host: str) -> list[str]:
        return sorted(r for r, h in self.rnic_host.items() if h == host)


def from_inventory(inv: Inventory) -> Fabric:
    """The two-tier fabric of an inventory (its switches are the spines)."""
    rnics = inv.rnics.values()
    return Fabric(list(inv.tors), list(inv.switches), {r.id: r.host for r in rnics}, {r.id: r.tor for r in rnics})


def clos(n_tors: int = 3, n_spines: int = 4, hosts_per_tor: int = 2, rnics_per_host: int = 2) -> Fabric:
    """A two-tier Clos named like Panel 1 (ToR 'A', RNIC 'A1', host 'H1', switch 'S1'); up to 7 ToRs."""
    return from_inventory(fabrics.random_clos(0, n_tors, n_spines, hosts_per_tor, rnics_per_host))


def panel1() -> Fabric:
    """The digest's Panel 1 fabric."""
    return from_inventory(fabrics.panel1())


@dataclass
class Faults:
    """Injected faults (ground truth). Links are physical, named ``lower->upper`` (``A->S3``)."""

    dead_links: set[str] = field(default_factory=set)
    lossy_links: dict[str, float] = field(default_factory=dict)
    dead_rnics: set[str] = field(default_factory=set)
    bad_probers: set[str] = field(default_factory=set)
    flaky_rnics: dict[str, float] = field(default_factory=dict)
    busy_hosts: set[str] = field(default_factory=set)
    silent_hosts: set[str] = field(default_factory=set)
    restarted: set[str] = field(default_factory=set)
    slow_links: dict[str, int] = field(default_factory=dict)
    busy_timeout_p: float = 0.5
    busy_delay_ns: int = 5_000_000


@dataclass
class Job:
    """A job's flows: (prober RNIC, responder RNIC, switch)."""

    job_id: str
    flows: list[tuple[str, str, str]]


def _flows(fab: Fabric, jobs: list[Job], tuples_per_switch: int, tor_mesh_rate: int,
           inter_n: int, service_n: int, asym: bool) -> list[tuple]:
    rows = []
    for tor in fab.tors:
        rn = fab.rnics_of(tor)
        for p in rn:
            peers = [r for r in rn if r != p]
            for r in peers:
                n = tor_mesh_rate * 20 // len(peers)
                rows.append(("tor_mesh", p, r, [p, tor, r], [r, tor, p], n, None))
    port = 20000
    for x in fab.tors:
        for y in fab.tors:
            if x == y:
                continue
            rx, ry = fab.rnics_of(x), fab.rnics_of(y)
            for si, s in enumerate(fab.spines):
                for k in range(tuples_per_switch):
                    p = rx[(si * tuples_per_switch + k) % len(rx)]
                    r = ry[(si * tuples_per_switch + k + 1) % len(ry)]
                    back = fab.spines[(si + 1) % len(fab.spines)] if asym else s
                    port += 1
                    rows.append(("inter_tor", p, r, [p, x, s, y, r], [r, y, back, x, p], inter_n, None, port))
    for job in jobs:
        for p, r, s in job.flows:
            x, y = fab.rnic_tor[p], fab.rnic_tor[r]
            port += 1
            rows.append(("service", p, r, [p, x, s, y, r], [r, y, s, x, p], service_n, job.job_id, port))
    out = []
    for i, row in enumerate(rows):
        out.append(row if len(row) == 8 else (*row, 10000 + i))
    return out


def _phys(hops: list[str]) -> set[str]:
    mid = (len(hops) - 1) // 2
    out = set()
    for i in range(len(hops) - 1):
        a, b = hops[i], hops[i + 1]
        out.add(f"{a}->{b}" if i + 1 <= mid else f"{b}->{a}")
    return out


def window(fab: Fabric, faults: Faults | None = None, *, start_ns: int = 1_000 * 20 * S, seed: int = 0,
           jobs: list[Job] | None = None, tuples_per_switch: int = 2, tor_mesh_rate: int = 10,
           inter_n: int = 10, service_n: int = 20, asym: bool = False) -> tuple[pa.Table, pa.Table, dict]:
    """One 20 s window of probes of the fabric with faults.

    Returns:
        (``probe_enriched.v1`` table, ``path.v1`` table, registry ``{rnic: qpn}``).
    """
    f = faults or Faults()
    rng = np.random.default_rng(seed)
    flows = _flows(fab, jobs or [], tuples_per_switch, tor_mesh_rate, inter_n, service_n, asym)
    registry = {r: (2000 if r in f.restarted else 1000) + i for i, r in enumerate(sorted(fab.rnic_host))}
    cols: dict[str, list] = {k: [] for k in ("pinglist", "p", "r", "n", "job", "port", "fail_p", "extra",
                                             "stale")}
    path_rows = []
    for pinglist, p, r, fwd, rev, n, job, port in flows:
        ph, rh = fab.rnic_host[p], fab.rnic_host[r]
        if ph in f.silent_hosts:
            continue
        links = _phys(fwd) | _phys(rev)
        ok_p = 1.0
        for link in links:
            if link in f.dead_links:
                ok_p = 0.0
            ok_p *= 1 - f.lossy_links.get(link, 0.0)
        for x in (p, r):
            if x in f.dead_rnics:
                ok_p = 0.0
            ok_p *= 1 - f.flaky_rnics.get(x, 0.0)
        if p in f.bad_probers:
            ok_p = 0.0
        if ph in f.busy_hosts or rh in f.busy_hosts:
            ok_p *= 1 - f.busy_timeout_p
        if rh in f.silent_hosts:
            ok_p = 0.0
        stale = r in f.restarted and (sum(map(ord, p)) % 2 == 0)
        if stale:
            ok_p = 0.0
        extra = sum(v for k, v in f.slow_links.items() if k in links)
        for k, v in (("pinglist", pinglist), ("p", p), ("r", r), ("n", n), ("job", job), ("port", port),
                     ("fail_p", 1 - ok_p), ("extra", extra), ("stale", stale)):
            cols[k].append(v)
        for direction, hops, a, b, sport, dport in (("forward", fwd, p, r, port, 4791),
                                                    ("reverse", rev, r, p, 4791, port)):
            path_rows.append((direction, a, b, sport, dport, ",".join(hops)))
    n = np.array(cols["n"])
    idx = np.repeat(np.arange(len(n)), n)
    m = len(idx)

    def col(name: str) -> np.ndarray:
        return np.array(cols[name], dtype=object)[idx]

    p_arr, r_arr = col("p"), col("r")
    timeout = rng.random(m) < np.array(cols["fail_p"])[idx]
    t1 = np.sort(rng.integers(start_ns, start_ns + 20 * S - 600_000_000, m))
    ph = np.array([fab.rnic_host[x] for x in cols["p"]], dtype=object)[idx]
    rh = np.array([fab.rnic_host[x] for x in cols["r"]], dtype=object)[idx]
    resp = BASE_RESP_NS + rng.integers(0, 500, m)
    resp = np.where(np.isin(rh, list(f.busy_hosts)), f.busy_delay_ns + rng.integers(0, 10**6, m), resp)
    prober_d = BASE_PROBER_NS + rng.integers(0, 500, m)
    prober_d = np.where(np.isin(ph, list(f.busy_hosts)), f.busy_delay_ns + rng.integers(0, 10**6, m), prober_d)
    net = BASE_RTT_NS + rng.integers(0, 800, m) + np.array(cols["extra"], dtype=np.int64)[idx]
    t2 = t1 + 1_000
    t3 = t1 + 7 * S
    t4 = t3 + resp
    t5 = t2 + net + resp
    t6 = t5 + prober_d
    qpn = np.array([registry[x] for x in cols["r"]], dtype=np.int64)[idx]
    qpn = np.where(np.array(cols["stale"])[idx], qpn - 1000, qpn)

    def nul(a: np.ndarray) -> list:
        return [None if t else int(v) for v, t in zip(a, timeout, strict=True)]

    port = np.array(cols["port"], dtype=np.int64)[idx]
    cols_out = {
        "agent_id": ph, "upload_ns": (t1 // (5 * S) + 1) * 5 * S, "seq": np.arange(m),
        "pinglist": col("pinglist"), "prober_host": ph, "prober_rnic": p_arr, "responder_host": rh,
        "responder_rnic": r_arr, "src_ip": p_arr, "dst_ip": r_arr, "src_port": port,
        "dst_port": np.full(m, 4791), "flow_label": port, "traffic_class": np.full(m, 106),
        "priority": np.full(m, 3), "qpn": qpn, "gid_index": np.full(m, 3), "job_id": col("job"),
        "t1": t1, "t2": nul(t2), "t3": nul(t3), "t4": nul(t4), "t5": nul(t5), "t6": nul(t6),
        "ts_source": np.full(m, "hardware", dtype=object),
        "status": np.where(timeout, "timeout", "ok").astype(object),
        "network_rtt_ns": nul(net), "responder_delay_ns": nul(resp), "prober_delay_ns": nul(prober_d),
        "batch_id": np.full(m, "test/0/0", dtype=object),
    }
    probes = table_from_columns("probe_enriched.v1", cols_out)
    pr = list(zip(*path_rows, strict=True)) if path_rows else [[]] * 6
    paths = table_from_columns("path.v1", {
        "agent_id": list(pr[1]), "upload_ns": [start_ns] * len(path_rows),
        "trace_ns": [start_ns - S] * len(path_rows), "direction": list(pr[0]),
        "src_rnic": list(pr[1]), "dst_rnic": list(pr[2]), "src_ip": list(pr[1]), "dst_ip": list(pr[2]),
        "src_port": list(pr[3]), "dst_port": list(pr[4]), "hops": list(pr[5]),
        "complete": [True] * len(path_rows),
    })
    return probes, paths, registry


def last_uploads(fab: Fabric, faults: Faults | None, start_ns: int) -> dict[str, int]:
    """Newest upload per host as of the window's end: silent hosts stopped 30 s before it."""
    f = faults or Faults()
    end = start_ns + 20 * S
    return {h: (end - 30 * S if h in f.silent_hosts else end) for h in sorted(set(fab.rnic_host.values()))}
