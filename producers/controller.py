"""The R-Pingmesh Controller: the RNIC registry and the three pinglists (§3.2, §4 of the paper).

Pure functions over a :class:`schemas.inventory.Inventory`; they return plain lists of
dicts so that agents (which never import pyarrow, docs/design.md) can use them directly.

A pinglist entry is a dict with the keys of ``probe.v1`` that a prober fills from its
list, plus a rate::

    pinglist, prober_host, prober_rnic, responder_host, responder_rnic,
    src_ip, dst_ip, src_port, dst_port, flow_label, traffic_class, priority,
    qpn, gid, gid_index, job_id, rate_pps

* ``tor_mesh`` — every RNIC probes every other RNIC under its ToR; each RNIC sends
  10 probes/s in all, spread evenly over its peers (so it also receives 10/s: the
  200 probes per 20 s window of the digest's Panel 1).
* ``inter_tor`` — per ToR, ``k`` random 5-tuples to RNICs under other ToRs, ``k`` from
  Eq. 1 (:func:`schemas.eq1.tuples_needed`) for the number ``N`` of ECMP paths leaving
  the ToR, at ``P = 0.99``; every tuple lives five hours with staggered birthdays, so
  one slot in five (20 %) is replaced each hour. Rebuilding the list (every 5 min in the
  paper) is calling :func:`inter_tor` again with the current time.
* ``service`` — the job's own 5-tuples from a job-published connection list (the
  paper learns them with eBPF on ``modify_qp``/``destroy_qp``; that hook is not here).

Every entry carries the job's traffic class (DSCP) and PFC priority so probes share
the job's switch queues (the TCP Pingmesh blind spot the paper fixes).
"""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from schemas.eq1 import tuples_needed
from schemas.inventory import ROCE_V2_PORT, Inventory

HOUR_NS = 3_600_000_000_000
TOR_MESH_PPS_PER_RNIC = 10.0  # R-Pingmesh §4: 10 probes/s per RNIC
INTER_TOR_LINK_PPS = 10.0  # §4: more than 10 probes/s each way on every link above the ToR
SERVICE_PPS = 100.0  # §4: Service Tracing every 10 ms
TUPLE_LIFETIME_H = 5  # 1/5 = 20 % of inter-ToR tuples replaced per hour


@dataclass(frozen=True)
class TrafficClass:
    """The switch queue a probe rides: DSCP ``traffic_class`` and PFC ``priority``.

    The default is the common RoCEv2 setting (DSCP 26, priority 3).
    """

    traffic_class: int = 26
    priority: int = 3


DEFAULT_TC = TrafficClass()


def udp_sport_from_flow_label(flow_label: int) -> int:
    """RoCEv2 UDP source port of a 20-bit flow label (rdma-core ``rdma_flow_label_to_udp_sport``).

    The low 14 bits XOR the high 6 bits, in the range 0xC000–0xFFFF.
    """
    fl_low = flow_label & 0x03FFF
    fl_high = flow_label & 0xFC000
    return (fl_low ^ (fl_high >> 14)) | 0xC000


@dataclass
class RegistryEntry:
    """What the Controller knows about one RNIC (R-Pingmesh §3.2): address, GID and QPN."""

    rnic: str
    host: str
    tor: str
    ip: str
    gid: str
    gid_index: int
    qpn: int
    updated_ns: int = 0


@dataclass
class Registry:
    """The RNIC registry: GID, GID index and the QPN of each RNIC's probing UD QP.

    An agent registers its RNICs at start; a restarted agent has new QPNs, which replace the
    old ones (probes still carrying the old QPN are ``stale_qpn`` noise, R-Pingmesh §5).
    """

    entries: dict[str, RegistryEntry] = field(default_factory=dict)

    @classmethod
    def from_inventory(cls, inv: Inventory, qpns: dict[str, int] | None = None, seed: int = 0) -> Registry:
        """A registry of every RNIC; QPNs from ``qpns`` or drawn (24-bit, seeded) when absent."""
        rng = random.Random(seed)
        reg = cls()
        for r in inv.rnics.values():
            qpn = (qpns or {}).get(r.id, rng.randrange(0x100, 0xFFFFFF))
            reg.entries[r.id] = RegistryEntry(r.id, r.host, r.tor, r.ip, r.gid, r.gid_index, qpn)
        return reg

    def register(self, rnic: str, qpn: int, at_ns: int, gid_index: int | None = None) -> int | None:
        """Record ``rnic``'s current QPN (an agent start or restart); returns the previous QPN.

        Raises:
            KeyError: the RNIC was never registered (not in the inventory).
        """
        e = self.entries[rnic]
        old = e.qpn
        e.qpn = qpn
        e.updated_ns = at_ns
        if gid_index is not None:
            e.gid_index = gid_index
        return old if old != qpn else None

    def qpn(self, rnic: str) -> int:
        """The QPN probes to ``rnic`` must carry now."""
        return self.entries[rnic].qpn

    def to_columns(self, agent_id: str, upload_ns: int) -> dict[str, list]:
        """The registry as ``registry.v1`` columns (plain lists)."""
        es = list(self.entries.values())
        return {
            "agent_id": [agent_id] * len(es),
            "upload_ns": [upload_ns] * len(es),
            "host": [e.host for e in es],
            "rnic": [e.rnic for e in es],
            "tor": [e.tor for e in es],
            "ip": [e.ip for e in es],
            "gid": [e.gid for e in es],
            "gid_index": [e.gid_index for e in es],
            "qpn": [e.qpn for e in es],
        }


def pinglist_entry(
    pinglist: str,
    inv: Inventory,
    reg: Registry,
    src: str,
    dst: str,
    flow_label: int,
    rate_pps: float,
    tc: TrafficClass,
    job_id: str | None = None,
    src_port: int | None = None,
) -> dict:
    """One pinglist entry: prober ``src`` probes responder ``dst`` at ``rate_pps`` probes/s.

    The UDP source port comes from ``flow_label`` (:func:`udp_sport_from_flow_label`)
    unless ``src_port`` is given; the QPN is the responder's in ``reg``.

    Raises:
        KeyError: ``src`` or ``dst`` is not an RNIC of ``inv``.
    """
    s, d = inv.rnics[src], inv.rnics[dst]
    return {
        "pinglist": pinglist,
        "prober_host": s.host,
        "prober_rnic": src,
        "responder_host": d.host,
        "responder_rnic": dst,
        "src_ip": s.ip,
        "dst_ip": d.ip,
        "src_port": udp_sport_from_flow_label(flow_label) if src_port is None else src_port,
        "dst_port": ROCE_V2_PORT,
        "flow_label": flow_label,
        "traffic_class": tc.traffic_class,
        "priority": tc.priority,
        "qpn": reg.qpn(dst),
        "gid": d.gid,
        "gid_index": d.gid_index,
        "job_id": job_id,
        "rate_pps": rate_pps,
    }


def tor_mesh(
    inv: Inventory,
    reg: Registry,
    *,
    pps_per_rnic: float = TOR_MESH_PPS_PER_RNIC,
    tc: TrafficClass = DEFAULT_TC,
) -> list[dict]:
    """The ToR-mesh pinglist (R-Pingmesh §3.2): every RNIC to every other under its ToR.

    Each RNIC sends ``pps_per_rnic`` probes/s in all, ``pps_per_rnic / (n - 1)`` to each of
    its ``n - 1`` peers. The flow label is fixed per pair (a ToR-mesh probe crosses only
    the ToR, so it has no ECMP choice to cover).
    """
    out = []
    for tor in inv.tors:
        rnics = inv.rnics_under_tor(tor)
        if len(rnics) < 2:
            continue
        rate = pps_per_rnic / (len(rnics) - 1)
        for i, src in enumerate(rnics):
            for j, dst in enumerate(rnics):
                if i != j:
                    out.append(pinglist_entry("tor_mesh", inv, reg, src, dst, (i * 64 + j) & 0xFFFFF, rate, tc))
    return out


def ecmp_path_count(inv: Inventory, src_tor: str, dst_tor: str) -> int:
    """Number of equal-cost shortest paths between two ToRs over the switch links (BFS)."""
    adj: dict[str, list[str]] = {}
    for ln in inv.links:
        adj.setdefault(ln.a, []).append(ln.b)
        adj.setdefault(ln.b, []).append(ln.a)
    dist = {src_tor: 0}
    count = {src_tor: 1}
    q = deque([src_tor])
    while q:
        u = q.popleft()
        for v in adj.get(u, []):
            if v in inv.tors and v != dst_tor:
                continue  # paths never transit another ToR
            if v not in dist:
                dist[v] = dist[u] + 1
                count[v] = count[u]
                q.append(v)
            elif dist[v] == dist[u] + 1:
                count[v] += count[u]
    return count.get(dst_tor, 0)


def tor_path_count(inv: Inventory, tor: str) -> int:
    """``N`` for Eq. 1: the most ECMP paths from ``tor`` to any other ToR (other pods first)."""
    others = [t for t in inv.tors if t != tor]
    if not others:
        return 0
    far = [t for t in others if inv.tors[t].pod != inv.tors[tor].pod] or others
    # ToRs of one pod (or all ToRs of a two-tier fabric) have the same shape: sample one.
    return ecmp_path_count(inv, tor, far[0])


def inter_tor(
    inv: Inventory,
    reg: Registry,
    *,
    seed: int,
    now_ns: int,
    p: float = 0.99,
    link_pps: float = INTER_TOR_LINK_PPS,
    tc: TrafficClass = DEFAULT_TC,
) -> list[dict]:
    """The inter-ToR pinglist (R-Pingmesh §3.2, Eq. 1).

    For each ToR, ``k = tuples_needed(N, p)`` slots, ``N`` = :func:`tor_path_count`. Slot
    ``i`` probes from the ``i``-th RNIC under the ToR (round robin) to a random RNIC under a
    random other ToR with a random flow label. A slot's tuple is redrawn every
    ``TUPLE_LIFETIME_H`` hours, slot ``i`` at hours ``h`` with ``(h + i) % 5 == 0``, so each
    hour one slot in five (20 %) changes and the list is a pure function of
    ``(seed, hour)``.

    Each tuple runs at ``2 * link_pps * N / k`` probes/s, so each uplink carries on average
    twice ``link_pps`` each way (the paper asks for more than 10/s on every link).
    """
    hour = now_ns // HOUR_NS
    tors = list(inv.tors)
    under = {t: inv.rnics_under_tor(t) for t in tors}
    paths_by_pod: dict[int, int] = {}
    out = []
    for ti, tor in enumerate(tors):
        pod = inv.tors[tor].pod
        if pod not in paths_by_pod:
            paths_by_pod[pod] = tor_path_count(inv, tor)
        n_paths = paths_by_pod[pod]
        src_rnics = under[tor]
        others = [t for t in tors if t != tor and under[t]]
        if n_paths < 1 or not src_rnics or not others:
            continue
        k = tuples_needed(n_paths, p)
        rate = 2.0 * link_pps * n_paths / k
        for i in range(k):
            generation = (hour + i) // TUPLE_LIFETIME_H
            rng = random.Random(f"{seed}/{ti}/{i}/{generation}")
            dst_tor = others[rng.randrange(len(others))]
            dsts = under[dst_tor]
            dst = dsts[rng.randrange(len(dsts))]
            flow_label = rng.randrange(1 << 20)
            out.append(pinglist_entry("inter_tor", inv, reg, src_rnics[i % len(src_rnics)], dst, flow_label, rate, tc))
    return out


def service(
    inv: Inventory,
    reg: Registry,
    connections: Iterable[dict],
    *,
    pps: float = SERVICE_PPS,
) -> list[dict]:
    """The service pinglist: one probe stream copying each of a job's RC connections.

    ``connections`` is the job-published list (the fallback for the paper's eBPF hooks):
    dicts with ``job_id``, ``src_rnic``, ``dst_rnic`` and ``flow_label`` (or ``src_port``),
    optionally ``traffic_class`` and ``priority``. Copying the flow label copies the UDP
    source port, so the probe hashes onto the job's ECMP path.

    Raises:
        ValueError: a connection names an unknown RNIC or lacks both flow label and port.
    """
    out = []
    for i, c in enumerate(connections):
        for key in ("src_rnic", "dst_rnic"):
            if c.get(key) not in inv.rnics:
                raise ValueError(f"connections[{i}].{key}: unknown RNIC {c.get(key)!r}; check the job's list")
        if "flow_label" not in c and "src_port" not in c:
            raise ValueError(f"connections[{i}]: give flow_label or src_port so the probe copies the 5-tuple")
        tc = TrafficClass(int(c.get("traffic_class", DEFAULT_TC.traffic_class)), int(c.get("priority", 3)))
        fl = int(c.get("flow_label", 0))
        out.append(
            pinglist_entry(
                "service", inv, reg, c["src_rnic"], c["dst_rnic"], fl, pps, tc, c.get("job_id"), c.get("src_port")
            )
        )
    return out


def load_connections(path: str | Path) -> list[dict]:
    """Read a job-published connection list: a JSON array, or JSON lines, of connection dicts."""
    text = Path(path).read_text().strip()
    if text.startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def build_pinglists(
    inv: Inventory,
    reg: Registry,
    *,
    seed: int,
    now_ns: int,
    connections: Iterable[dict] = (),
    p: float = 0.99,
) -> dict[str, list[dict]]:
    """All three pinglists, keyed ``tor_mesh``, ``inter_tor``, ``service``."""
    return {
        "tor_mesh": tor_mesh(inv, reg),
        "inter_tor": inter_tor(inv, reg, seed=seed, now_ns=now_ns, p=p),
        "service": service(inv, reg, connections),
    }


def pinglist_for_host(lists: dict[str, list[dict]], host: str) -> list[dict]:
    """The entries one agent runs: those whose prober is on ``host``."""
    return [e for entries in lists.values() for e in entries if e["prober_host"] == host]
