"""Intra-host topology and the Hostping loopback equations, shared by agents and workers.

Plain data (stdlib only, like the rest of :mod:`schemas`): the host agent builds an
:class:`IntraHostTopology` from sysfs/hwloc (:mod:`producers.hostping.intrahost_topology`), the
sim host model uses it to place bottlenecks, and the analyzer
(:mod:`streams.hostping.hostlink`) uses its paths for Algorithm 1.

Nodes are ``cpuN`` (socket root complex), ``swN`` (PCIe switch), ``rnicN``, ``gpuN``,
``memN`` (NUMA memory node). Every non-CPU node has one parent; the link to it is
named ``parent->child`` and typed by the child: ``rnic_pcie``, ``gpu_pcie``,
``root_port`` (a switch or device hanging off a CPU root port), ``switch_pcie``
(switch under switch), ``mem_channel``. Sockets are joined by ``upi`` links.

Equations (Hostping §3.3, Eq. 1-3; latency in µs, size in bytes, bandwidth in Gb/s)::

    Lat = T_proc + Lat_host + Size / BW_host          (1)
    Lat_small ≈ T_proc + Lat_host                      (2)  1-byte message
    BW_host ≈ Size / (Lat_large - Lat_small)           (3)  128 KB message, Eq. 1 - Eq. 2

and the outstanding-read model of §2 (Figure 4): an RNIC keeps at most ``W`` bytes of
PCIe read requests in flight, so ``BW ≈ W / (Lat_host + c)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NODE_KINDS = ("cpu", "switch", "rnic", "gpu", "mem")
LINK_KINDS = ("rnic_pcie", "gpu_pcie", "root_port", "switch_pcie", "mem_channel", "upi")


@dataclass(frozen=True)
class IntraHostTopology:
    """One host's intra-host network as a forest of CPU sockets joined by UPI.

    Attributes:
        host: host name.
        kinds: node -> one of :data:`NODE_KINDS`.
        parent: node -> parent node (every node but CPUs).
        upi: socket pairs joined by UPI/QPI/xGMI, e.g. ``(("cpu0", "cpu1"),)``.
    """

    host: str
    kinds: dict[str, str]
    parent: dict[str, str]
    upi: tuple[tuple[str, str], ...] = ()
    _cache: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = [f"node {n!r} has kind {k!r}" for n, k in self.kinds.items() if k not in NODE_KINDS]
        problems += [f"{c!r}->{p!r}: unknown node" for c, p in self.parent.items() if p not in self.kinds]
        problems += [f"{n!r} ({k}) has no parent" for n, k in self.kinds.items() if k != "cpu" and n not in self.parent]
        if problems:
            raise ValueError(f"intra-host topology of {self.host}: " + "; ".join(problems))

    def nodes(self, kind: str) -> list[str]:
        return sorted((n for n, k in self.kinds.items() if k == kind), key=_natural)

    @property
    def rnics(self) -> list[str]:
        return self.nodes("rnic")

    @property
    def endpoints(self) -> list[str]:
        """GPUs then memory nodes: the columns of a bandwidth matrix."""
        return self.nodes("gpu") + self.nodes("mem")

    def link_kind(self, link: str) -> str:
        a, b = link.split("->")
        if self.kinds[a] == "cpu" and self.kinds[b] == "cpu":
            return "upi"
        kb = self.kinds[b]
        if kb == "rnic":
            return "rnic_pcie"
        if kb == "gpu":
            return "gpu_pcie"
        if kb == "mem":
            return "mem_channel"
        return "root_port" if self.kinds[a] == "cpu" else "switch_pcie"

    @property
    def links(self) -> list[str]:
        out = [f"{p}->{c}" for c, p in self.parent.items()]
        out += [f"{a}->{b}" for a, b in self.upi]
        return sorted(out, key=_natural)

    def ancestors(self, node: str) -> list[str]:
        """``node`` then its parents up to the socket."""
        chain = [node]
        while chain[-1] in self.parent:
            chain.append(self.parent[chain[-1]])
        return chain

    def socket(self, node: str) -> str:
        return self.ancestors(node)[-1]

    def root_port(self, node: str) -> str | None:
        """The link (``cpuN->x``) through which ``node`` reaches its socket; ``None`` for a CPU."""
        chain = self.ancestors(node)
        return f"{chain[-1]}->{chain[-2]}" if len(chain) >= 2 else None

    def path(self, rnic: str, endpoint: str) -> tuple[str, ...]:
        """Links a loopback between ``rnic`` and ``endpoint`` crosses (Hostping Eq. 4's ``path_j``).

        Peer-to-peer traffic turns at the lowest common PCIe switch; traffic between
        sockets crosses the UPI link joining them.

        Raises:
            ValueError: the sockets of the two nodes are not joined by a UPI link.
        """
        key = (rnic, endpoint)
        if key in self._cache:
            return self._cache[key]
        up, down = self.ancestors(rnic), self.ancestors(endpoint)
        common = next((n for n in up if n in down), None)
        links: list[str] = []
        for chain in (up, down):
            for child, par in zip(chain, chain[1:], strict=False):
                if child == common:
                    break
                links.append(f"{par}->{child}")
                if par == common:
                    break
        if common is None:
            a, b = up[-1], down[-1]
            hop = next((f"{x}->{y}" for x, y in self.upi if {x, y} == {a, b}), None)
            if hop is None:
                raise ValueError(f"{self.host}: sockets {a} and {b} are not joined by a UPI link in the topology")
            links.append(hop)
        self._cache[key] = tuple(links)
        return self._cache[key]

    def affinitive(self, rnic: str) -> list[str]:
        """Endpoints under the same CPU root port as ``rnic``, plus its socket's memory nodes
        (Hostping §4.3: compared with each other in busy mode)."""
        rp = self.root_port(rnic)
        sock = self.socket(rnic)
        gpus = [g for g in self.nodes("gpu") if self.root_port(g) == rp]
        mems = [m for m in self.nodes("mem") if self.socket(m) == sock]
        return gpus + mems

    def is_p2p(self, rnic: str, endpoint: str) -> bool:
        """True when the loopback turns at a PCIe switch (never reaches the root complex)."""
        return all(
            self.link_kind(link) in ("rnic_pcie", "gpu_pcie", "switch_pcie") for link in self.path(rnic, endpoint)
        )


def _natural(s: str) -> tuple[str, int]:
    head = s.rstrip("0123456789")
    tail = s[len(head) :]
    return (head, int(tail) if tail else -1)


def figure2_topology(host: str = "host") -> IntraHostTopology:
    """The paper's Figure 2 host: 2 sockets joined by UPI; per socket 2 root ports, each with a
    PCIe switch holding 1 RNIC and 2 GPUs; one memory node per socket (4 RNICs, 8 GPUs, 2 memory nodes)."""
    kinds = {"cpu0": "cpu", "cpu1": "cpu", "mem0": "mem", "mem1": "mem"}
    parent = {"mem0": "cpu0", "mem1": "cpu1"}
    for s in range(4):
        cpu = f"cpu{s // 2}"
        kinds[f"sw{s}"] = "switch"
        parent[f"sw{s}"] = cpu
        kinds[f"rnic{s}"] = "rnic"
        parent[f"rnic{s}"] = f"sw{s}"
        for g in (2 * s, 2 * s + 1):
            kinds[f"gpu{g}"] = "gpu"
            parent[f"gpu{g}"] = f"sw{s}"
    return IntraHostTopology(host, kinds, parent, (("cpu0", "cpu1"),))


# --- Hostping Eq. 1-3 (§3.3) and the outstanding-read model (§2, Figure 4) ---------------------


def loopback_latency_us(t_proc_us: float, lat_host_us: float, size_bytes: int, bw_host_gbps: float) -> float:
    """Eq. 1: loopback latency (µs) of one message of ``size_bytes``."""
    return t_proc_us + lat_host_us + size_bytes * 8 / (bw_host_gbps * 1e3)


def lat_host_us(lat_small_us: float, t_proc_us: float) -> float:
    """Eq. 2 solved for Lat_host (µs): a 1-byte loopback minus the RNIC's processing time T_proc."""
    return lat_small_us - t_proc_us


def bw_host_gbps(size_bytes: int, lat_large_us: float, lat_small_us: float) -> float:
    """Eq. 3 by Eq. 1 - Eq. 2: BW_host (Gb/s) = Size / (Lat_large - Lat_small).

    Raises:
        ValueError: the large message was not slower than the small one (bad sample).
    """
    dt = lat_large_us - lat_small_us
    if dt <= 0:
        raise ValueError(f"Lat_large {lat_large_us} µs must exceed Lat_small {lat_small_us} µs (Eq. 3)")
    return size_bytes * 8 / (dt * 1e3)


def outstanding_read_bw_gbps(lat_host_us: float, window_kbit: float, c_us: float) -> float:
    """BW ≈ W / (Lat_host + c): Gb/s from a read window of ``window_kbit`` (Gb/s·µs = kbit) in flight."""
    return window_kbit / (lat_host_us + c_us)


def fit_outstanding_read(lat1_us: float, bw1_gbps: float, lat2_us: float, bw2_gbps: float) -> tuple[float, float]:
    """Fit ``(W kbit, c µs)`` of BW = W / (Lat + c) through two (latency, bandwidth) points.

    Raises:
        ValueError: the points do not describe a bandwidth falling with latency.
    """
    if not (lat2_us > lat1_us and bw1_gbps > bw2_gbps > 0):
        raise ValueError("need lat2 > lat1 and bw1 > bw2 > 0 to fit BW = W / (Lat + c)")
    c = (bw2_gbps * lat2_us - bw1_gbps * lat1_us) / (bw1_gbps - bw2_gbps)
    return bw1_gbps * (lat1_us + c), c
