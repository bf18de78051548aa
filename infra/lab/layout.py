"""The fabric lab's shape and addressing plan: pure data, no side effects.

The default is the R-Pingmesh digest's Panel 1 fabric: four spines S1..S4, three
ToRs A, B, C and six hosts H1..H6 with two RNICs each; RNICs are named after their
ToR (A1..A4 under ToR A), hosts are numbered across ToRs (H1, H2 under A).

Addressing (IPv4, one /24 per link so an address names its link at a glance):

- RNIC ``k`` (1-based) under ToR ``t`` (1-based): ToR side ``10.t.k.1``, RNIC
  ``10.t.k.2``; every ToR owns the aggregate ``10.t.0.0/16``.
- spine ``s`` to ToR ``t``: spine side ``10.(100+s).t.1``, ToR side ``10.(100+s).t.2``.

Interfaces are named after the node at the other end (on ToR A: ``A1`` .. ``A4``,
``S1`` .. ``S4``; on spine S1: ``A``, ``B``, ``C``; on host H1: ``A1``, ``A2``), so
a link ``A->S3`` is the interface ``S3`` in ToR A's namespace.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LabSpec:
    """Size of the lab fabric (defaults: Panel 1 of the R-Pingmesh digest).

    Attributes:
        spines: number of spine switches (S1..).
        tors: number of ToRs (A, B, ...; at most 26).
        hosts_per_tor: hosts under each ToR.
        nics_per_host: RNICs (veth NICs) per host.
        prefix: namespace name prefix, so ``down`` finds everything it made.
        seed: base of the per-ToR ``fib_multipath_hash_seed``.
    """

    spines: int = 4
    tors: int = 3
    hosts_per_tor: int = 2
    nics_per_host: int = 2
    prefix: str = "fs-"
    seed: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.tors <= 26:
            raise ValueError(f"tors={self.tors}: the lab names ToRs A..Z, so use 1..26")
        if not 1 <= self.spines <= 99:
            raise ValueError(f"spines={self.spines}: use 1..99 (addresses 10.101..10.199)")
        if self.hosts_per_tor * self.nics_per_host > 250:
            raise ValueError("hosts_per_tor * nics_per_host must be at most 250 (one /24 per RNIC link)")


@dataclass(frozen=True)
class Rnic:
    """One host NIC: name (``A1``), host, ToR, its address and its ToR's address on the link."""

    name: str
    host: str
    tor: str
    ip: str
    gateway: str
    table: int  # policy-routing table on the host for traffic sourced from ``ip``


@dataclass(frozen=True)
class Link:
    """One cable: node ``a`` interface ``a_if`` with ``a_ip``, to node ``b`` interface ``b_if``."""

    a: str
    a_if: str
    a_ip: str
    b: str
    b_if: str
    b_ip: str
    prefixlen: int = 24


@dataclass(frozen=True)
class Route:
    """A route in node ``node``: ``dst`` via one or more next hops (ECMP when several)."""

    node: str
    dst: str
    gateways: tuple[str, ...]
    table: int = 254


@dataclass
class Fabric:
    """The whole plan: nodes by role, RNICs, links and routes, plus address -> node name."""

    spec: LabSpec
    spines: list[str] = field(default_factory=list)
    tors: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    rnics: list[Rnic] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)

    def netns(self, node: str) -> str:
        """Namespace name of ``node`` (``fs-S1``)."""
        return f"{self.spec.prefix}{node}"

    @property
    def nodes(self) -> list[str]:
        return self.spines + self.tors + self.hosts

    def role(self, node: str) -> str:
        """``spine``, ``tor`` or ``host``."""
        if node in self.spines:
            return "spine"
        if node in self.tors:
            return "tor"
        if node in self.hosts:
            return "host"
        raise KeyError(f"no node {node!r} in the lab; nodes are {', '.join(self.nodes)}")

    def rnic(self, name: str) -> Rnic:
        for r in self.rnics:
            if r.name == name:
                return r
        raise KeyError(f"no RNIC {name!r} in the lab; RNICs are {', '.join(r.name for r in self.rnics)}")

    def host_rnics(self, host: str) -> list[Rnic]:
        return [r for r in self.rnics if r.host == host]

    def tor_of(self, host: str) -> str:
        return self.host_rnics(host)[0].tor

    def link(self, a: str, b: str) -> Link:
        """The cable between nodes ``a`` and ``b`` (either order), oriented so ``.a == a``."""
        for ln in self.links:
            if (ln.a, ln.b) == (a, b):
                return ln
            if (ln.a, ln.b) == (b, a):
                return Link(ln.b, ln.b_if, ln.b_ip, ln.a, ln.a_if, ln.a_ip, ln.prefixlen)
        raise KeyError(f"no link {a}-{b} in the lab")

    def address_names(self) -> dict[str, str]:
        """Every interface address -> the node that owns it (hosts map to their RNIC name).

        The tracer turns ICMP sources into hop names with this map: routers answer
        from the inbound interface (``icmp_errors_use_inbound_ifaddr=1``).
        """
        names: dict[str, str] = {}
        for ln in self.links:
            names[ln.a_ip] = ln.a
            names[ln.b_ip] = ln.b
        for r in self.rnics:
            names[r.ip] = r.name
        return names

    def inventory_dict(self, name: str = "lab") -> dict[str, object]:
        """The lab as a cluster inventory in the YAML shape of :func:`schemas.inventory_yaml.from_dict`.

        RNIC ``netdev`` is the host interface (``A1``), ``tor_port`` the ToR interface
        facing it (also ``A1``); switch links carry both interface names as ports.
        """
        hosts = [
            {
                "name": h,
                "rnics": [
                    {"id": r.name, "netdev": r.name, "ip": r.ip, "tor": r.tor, "tor_port": r.name}
                    for r in self.host_rnics(h)
                ],
            }
            for h in self.hosts
        ]
        links = [
            {"a": ln.b, "b": ln.a, "a_port": ln.b_if, "b_port": ln.a_if} for ln in self.links if ln.a in self.spines
        ]
        return {
            "name": name,
            "tors": [{"name": t} for t in self.tors],
            "switches": [{"name": s, "tier": "spine"} for s in self.spines],
            "hosts": hosts,
            "links": links,
        }


def tor_name(t: int) -> str:
    """ToR ``t`` (0-based) -> ``A``, ``B``, ..."""
    return chr(ord("A") + t)


def plan(spec: LabSpec | None = None) -> Fabric:
    """Lay out nodes, links, addresses and routes for ``spec`` (default Panel 1).

    Returns:
        A :class:`Fabric`; nothing is created on the machine.
    """
    spec = spec or LabSpec()
    fab = Fabric(spec)
    fab.spines = [f"S{s + 1}" for s in range(spec.spines)]
    fab.tors = [tor_name(t) for t in range(spec.tors)]
    host_no = 0
    for t, tor in enumerate(fab.tors):
        for h in range(spec.hosts_per_tor):
            host_no += 1
            host = f"H{host_no}"
            fab.hosts.append(host)
            for n in range(spec.nics_per_host):
                k = h * spec.nics_per_host + n + 1
                name = f"{tor}{k}"
                r = Rnic(name, host, tor, f"10.{t + 1}.{k}.2", f"10.{t + 1}.{k}.1", 100 + n + 1)
                fab.rnics.append(r)
                fab.links.append(Link(host, name, r.ip, tor, name, r.gateway))
        for s, spine in enumerate(fab.spines):
            fab.links.append(Link(spine, tor, f"10.{101 + s}.{t + 1}.1", tor, spine, f"10.{101 + s}.{t + 1}.2"))
    for t, tor in enumerate(fab.tors):
        for s, spine in enumerate(fab.spines):
            fab.routes.append(Route(spine, f"10.{t + 1}.0.0/16", (f"10.{101 + s}.{t + 1}.2",)))
        for u, _other in enumerate(fab.tors):
            if u != t:
                gws = tuple(f"10.{101 + s}.{t + 1}.1" for s in range(spec.spines))
                fab.routes.append(Route(tor, f"10.{u + 1}.0.0/16", gws))
    for host in fab.hosts:
        for i, r in enumerate(fab.host_rnics(host)):
            fab.routes.append(Route(host, "0.0.0.0/0", (r.gateway,), table=r.table))
            if i == 0:
                fab.routes.append(Route(host, "0.0.0.0/0", (r.gateway,)))
    return fab
