"""The cluster inventory model: hosts, RNICs, ToRs, spine/agg switches and the links between them.

The Controller knows every RNIC, its ToR and its address (R-Pingmesh §3.2). The
inventory names every RNIC with the physical ToR port its cable plugs into, so a
verdict can name the port an operator must walk to.

This module holds the model, its look-ups and its validation. The YAML file is read
by :mod:`schemas.inventory_yaml` (:func:`~schemas.inventory_yaml.load`), ports are
filled from LLDP by :mod:`schemas.lldp`, and synthetic fabrics (Panel 1, seeded Clos)
are built by :mod:`producers.sim.fabrics`.

Node names are hop names in traced paths (``path.v1`` ``hops``), so they may not
contain ``,`` or ``->``; a link is written ``"a->b"`` (an ordered hop pair, README.md
"Glossary"). Only the stdlib and PyYAML are used: agents load this file too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

SWITCH_TIERS = ("spine", "agg", "core")
ROCE_V2_PORT = 4791


class InventoryError(ValueError):
    """The inventory is inconsistent; ``problems`` lists each one with its fix."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s) in the cluster inventory:\n{lines}")


@dataclass(frozen=True)
class Rnic:
    """One RDMA NIC.

    Attributes:
        id: cluster-unique name, e.g. ``"A3"`` (the digest's Panel 1 names RNICs by ToR).
        host: the host it sits in.
        netdev: Linux interface name on that host, e.g. ``"eth2"`` (matched against LLDP).
        ip: IPv4/IPv6 address of the RoCEv2 interface.
        gid: RoCEv2 GID (IPv4-mapped IPv6 text for an IPv4 RNIC).
        tor: the ToR switch its cable plugs into.
        tor_port: the physical ToR port name, e.g. ``"Ethernet12"``; ``""`` when unknown.
        gid_index: GID table index used for RoCEv2.
    """

    id: str
    host: str
    netdev: str
    ip: str
    gid: str
    tor: str
    tor_port: str = ""
    gid_index: int = 3


@dataclass(frozen=True)
class Host:
    """A server; its RNICs are listed in RNIC order."""

    name: str
    rnics: tuple[str, ...]


@dataclass(frozen=True)
class Tor:
    """A top-of-rack switch; ``pod`` groups ToRs that share agg switches (three-tier Clos)."""

    name: str
    pod: int = 0


@dataclass(frozen=True)
class Switch:
    """A switch above the ToRs: ``tier`` is ``spine`` (two-tier), ``agg`` or ``core``."""

    name: str
    tier: str = "spine"
    pod: int | None = None


@dataclass(frozen=True)
class Link:
    """A switch-to-switch cable between ``a`` (lower tier) and ``b`` (upper tier), with port names."""

    a: str
    b: str
    a_port: str = ""
    b_port: str = ""

    @property
    def up(self) -> str:
        """The link as an ordered hop pair going up the fabric, ``"a->b"``."""
        return f"{self.a}->{self.b}"

    @property
    def down(self) -> str:
        """The link as an ordered hop pair going down the fabric, ``"b->a"``."""
        return f"{self.b}->{self.a}"


def link_name(a: str, b: str) -> str:
    """The ordered hop pair ``"a->b"`` used for links in verdicts and votes."""
    return f"{a}->{b}"


@dataclass
class Inventory:
    """A validated cluster description with the look-ups the analyzer needs.

    Build one with :func:`schemas.inventory_yaml.load` or :func:`~schemas.inventory_yaml.from_dict`
    (or :func:`producers.sim.fabrics.panel1` / :func:`~producers.sim.fabrics.random_clos`);
    all of them call :meth:`validate`.
    """

    name: str
    tors: dict[str, Tor]
    switches: dict[str, Switch]
    hosts: dict[str, Host]
    rnics: dict[str, Rnic]
    links: list[Link] = field(default_factory=list)
    source: str = "<inventory>"

    # ---- look-ups -------------------------------------------------------------------
    def host_of(self, rnic: str) -> str:
        """The host of RNIC ``rnic``.

        Raises:
            KeyError: unknown RNIC id.
        """
        return self._rnic(rnic).host

    def tor_of(self, rnic: str) -> str:
        """The ToR that RNIC ``rnic`` is cabled to."""
        return self._rnic(rnic).tor

    def rnics_of_host(self, host: str) -> list[str]:
        """RNIC ids of ``host`` in their listed order."""
        try:
            return list(self.hosts[host].rnics)
        except KeyError:
            raise KeyError(f"{self.source}: no host {host!r} in the inventory") from None

    def rnics_under_tor(self, tor: str) -> list[str]:
        """RNIC ids cabled to ToR ``tor``, in inventory order."""
        if tor not in self.tors:
            raise KeyError(f"{self.source}: no ToR {tor!r} in the inventory")
        return [r.id for r in self.rnics.values() if r.tor == tor]

    def hosts_under_tor(self, tor: str) -> list[str]:
        """Hosts with at least one RNIC under ToR ``tor``."""
        return list(dict.fromkeys(self.host_of(r) for r in self.rnics_under_tor(tor)))

    def rnic_by_ip(self, ip: str) -> str:
        """The RNIC id that owns address ``ip``."""
        for r in self.rnics.values():
            if r.ip == ip:
                return r.id
        raise KeyError(f"{self.source}: no RNIC has IP {ip}")

    def port_of(self, rnic: str) -> str:
        """``"ToR:port"`` the RNIC's cable plugs into (``"ToR:?"`` when the port is unknown)."""
        r = self._rnic(rnic)
        return f"{r.tor}:{r.tor_port or '?'}"

    def neighbors(self) -> dict[str, list[str]]:
        """Adjacency over every node (RNICs, ToRs, switches), each list sorted by name."""
        adj: dict[str, set[str]] = {n: set() for n in self.node_names()}
        for r in self.rnics.values():
            adj[r.id].add(r.tor)
            adj[r.tor].add(r.id)
        for ln in self.links:
            adj[ln.a].add(ln.b)
            adj[ln.b].add(ln.a)
        return {n: sorted(v) for n, v in adj.items()}

    def node_names(self) -> list[str]:
        """Every hop name: RNIC ids, ToRs, then switches."""
        return [*self.rnics, *self.tors, *self.switches]

    def cables(self) -> Iterator[tuple[str, str]]:
        """Every physical cable as ``(lower, upper)``: RNIC–ToR, then switch links."""
        for r in self.rnics.values():
            yield (r.id, r.tor)
        for ln in self.links:
            yield (ln.a, ln.b)

    def uplinks(self, node: str) -> list[str]:
        """Upper-tier neighbours of a ToR or switch (the ECMP choices going up)."""
        return sorted(ln.b for ln in self.links if ln.a == node)

    def _rnic(self, rnic: str) -> Rnic:
        try:
            return self.rnics[rnic]
        except KeyError:
            raise KeyError(f"{self.source}: no RNIC {rnic!r} in the inventory") from None

    # ---- validation -----------------------------------------------------------------
    def validate(self) -> Inventory:
        """Check the inventory and return it.

        Raises:
            InventoryError: listing every problem, each naming the field and the fix
                (unknown ToR, duplicate RNIC, a link to nowhere, duplicate IP/GID, bad names).
        """
        problems: list[str] = []
        names: dict[str, str] = {}
        for kind, group in (("tor", self.tors), ("switch", self.switches), ("host", self.hosts)):
            for n in group:
                if n in names:
                    problems.append(f"{kind} {n!r} reuses the name of a {names[n]}; rename one of them")
                names[n] = kind
        for n in self.rnics:
            if n in names and names[n] != "host":
                problems.append(f"rnic {n!r} reuses the name of a {names[n]}; rename one of them")
        for n in [*self.tors, *self.switches, *self.rnics]:
            if "," in n or "->" in n or not n.strip():
                problems.append(f"node name {n!r} may not be empty or contain ',' or '->' (they separate hops)")
        for s in self.switches.values():
            if s.tier not in SWITCH_TIERS:
                problems.append(f"switches[{s.name}].tier is {s.tier!r}; use one of {', '.join(SWITCH_TIERS)}")
        seen_ip: dict[str, str] = {}
        seen_gid: dict[str, str] = {}
        seen_port: dict[tuple[str, str], str] = {}
        for r in self.rnics.values():
            where = f"hosts[{r.host}].rnics[{r.id}]"
            if r.host not in self.hosts:
                problems.append(f"{where}.host: unknown host {r.host!r}; add it under hosts")
            elif r.id not in self.hosts[r.host].rnics:
                problems.append(f"{where}: host {r.host!r} does not list this RNIC; list it under its host")
            if r.tor not in self.tors:
                known = ", ".join(sorted(self.tors)) or "none"
                problems.append(
                    f"{where}.tor: unknown ToR {r.tor!r} (known: {known}); add it under tors or fix the name"
                )
            try:
                ipaddress.ip_address(r.ip)
            except ValueError:
                problems.append(f"{where}.ip: {r.ip!r} is not an IP address")
            if r.ip in seen_ip:
                problems.append(f"{where}.ip: {r.ip} is also RNIC {seen_ip[r.ip]}'s; give each RNIC its own address")
            seen_ip.setdefault(r.ip, r.id)
            if r.gid in seen_gid:
                problems.append(f"{where}.gid: {r.gid} is also RNIC {seen_gid[r.gid]}'s; GIDs must be unique")
            seen_gid.setdefault(r.gid, r.id)
            if r.tor_port:
                key = (r.tor, r.tor_port)
                if key in seen_port:
                    problems.append(
                        f"{where}.tor_port: {r.tor}:{r.tor_port} is also cabled to RNIC {seen_port[key]}; "
                        "check the cabling (re-import LLDP)"
                    )
                seen_port.setdefault(key, r.id)
        for h in self.hosts.values():
            for rid in h.rnics:
                if rid not in self.rnics:
                    problems.append(f"hosts[{h.name}].rnics lists {rid!r} which has no RNIC entry")
        switch_like = {**{t: "tor" for t in self.tors}, **{s: "switch" for s in self.switches}}
        seen_links: set[frozenset[str]] = set()
        for i, ln in enumerate(self.links):
            for end in ("a", "b"):
                node = getattr(ln, end)
                if node not in switch_like:
                    problems.append(
                        f"links[{i}].{end}: {node!r} is a link to nowhere (no ToR or switch has that name); "
                        "add the switch or fix the name"
                    )
            if ln.a == ln.b:
                problems.append(f"links[{i}]: links {ln.a!r} to itself; remove it")
            pair = frozenset((ln.a, ln.b))
            if pair in seen_links:
                problems.append(f"links[{i}]: {ln.a}–{ln.b} is listed twice; parallel cables are not modelled")
            seen_links.add(pair)
        for t in self.tors:
            if self.tors and self.switches and not any(ln.a == t or ln.b == t for ln in self.links):
                problems.append(f"tors[{t}] has no uplink; add links from {t} to its spine/agg switches")
        if problems:
            raise InventoryError(self.source, problems)
        return self

    # ---- serialisation --------------------------------------------------------------
    def to_dict(self) -> dict:
        """The YAML-shaped dict that :func:`schemas.inventory_yaml.from_dict` reads back."""
        return {
            "name": self.name,
            "tors": [asdict(t) for t in self.tors.values()],
            "switches": [{k: v for k, v in asdict(s).items() if v is not None} for s in self.switches.values()],
            "hosts": [
                {
                    "name": h.name,
                    "rnics": [{k: v for k, v in asdict(self.rnics[r]).items() if k != "host"} for r in h.rnics],
                }
                for h in self.hosts.values()
            ],
            "links": [asdict(ln) for ln in self.links],
        }

    def dump(self, path: str | Path) -> None:
        """Write the inventory as YAML to ``path``."""
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


def gid_from_ip(ip: str) -> str:
    """The RoCEv2 GID of an IPv4 address (IPv4-mapped IPv6, ``::ffff:a.b.c.d``); IPv6 is its own GID."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ""
    if addr.version == 4:
        return f"::ffff:{addr}"
    return str(addr)
