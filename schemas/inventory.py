"""The cluster inventory: hosts, RNICs, ToRs, spine/agg switches and the links between them.

One YAML file describes a cluster (R-Pingmesh §3.2: the Controller knows every
RNIC, its ToR and its address; issue 4 "Inventory"). It names every RNIC with
the physical ToR port its cable plugs into, so a verdict can name the port an
operator must walk to. The port can be filled from LLDP (:func:`parse_lldpctl_json`,
:func:`apply_lldp`).

File shape (every key shown; ``tier`` is ``spine``, ``agg`` or ``core``)::

    name: panel1
    tors:
      - {name: A, pod: 0}
    switches:
      - {name: S1, tier: spine}
    hosts:
      - name: H1
        rnics:
          - {id: A1, netdev: eth0, ip: 10.0.1.1, gid: "fe80::...", tor: A, tor_port: Ethernet1}
    links:                       # switch-to-switch cables (RNIC cables come from `tor:`)
      - {a: A, a_port: Ethernet33, b: S1, b_port: Ethernet1}

Node names are hop names in traced paths (``path.v1`` ``hops``), so they may not
contain ``,`` or ``->``; a link is written ``"a->b"`` (an ordered hop pair, DESIGN.md
"Terms"). Only the stdlib and PyYAML are used: agents load this file too.
"""

from __future__ import annotations

import ipaddress
import json
import random
import string
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
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

    Build one with :func:`load`, :func:`from_dict`, :func:`panel1` or :func:`random_clos`;
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
        """The YAML-shaped dict that :func:`from_dict` reads back."""
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


def from_dict(data: dict, source: str = "<inventory>") -> Inventory:
    """Build and validate an inventory from the YAML-shaped dict (see module docstring).

    Raises:
        InventoryError: a required key is missing or the inventory is inconsistent.
    """
    problems: list[str] = []
    if not isinstance(data, dict):
        raise InventoryError(source, ["the file must be a mapping with keys name, tors, switches, hosts, links"])

    def need(d: dict, key: str, where: str) -> object:
        if key not in d:
            problems.append(f"{where}: missing required field {key!r}")
            return ""
        return d[key]

    tors: dict[str, Tor] = {}
    for i, t in enumerate(data.get("tors") or []):
        t = {"name": t} if isinstance(t, str) else t
        name = str(need(t, "name", f"tors[{i}]"))
        tors[name] = Tor(name, int(t.get("pod", 0)))
    switches: dict[str, Switch] = {}
    for i, s in enumerate(data.get("switches") or []):
        s = {"name": s} if isinstance(s, str) else s
        name = str(need(s, "name", f"switches[{i}]"))
        switches[name] = Switch(name, str(s.get("tier", "spine")), s.get("pod"))
    hosts: dict[str, Host] = {}
    rnics: dict[str, Rnic] = {}
    for i, h in enumerate(data.get("hosts") or []):
        hname = str(need(h, "name", f"hosts[{i}]"))
        if hname in hosts:
            problems.append(f"hosts[{i}]: host {hname!r} is listed twice; merge the entries")
        ids = []
        for j, r in enumerate(h.get("rnics") or []):
            where = f"hosts[{hname}].rnics[{j}]"
            rid = str(need(r, "id", where))
            if rid in rnics:
                problems.append(
                    f"{where}.id: duplicate RNIC {rid!r} (also on host {rnics[rid].host}); RNIC ids must be unique"
                )
                continue
            ids.append(rid)
            rnics[rid] = Rnic(
                id=rid,
                host=hname,
                netdev=str(need(r, "netdev", where)),
                ip=str(need(r, "ip", where)),
                gid=str(r.get("gid") or gid_from_ip(str(r.get("ip", "")))),
                tor=str(need(r, "tor", where)),
                tor_port=str(r.get("tor_port", "") or ""),
                gid_index=int(r.get("gid_index", 3)),
            )
        hosts[hname] = Host(hname, tuple(ids))
    links = []
    for i, ln in enumerate(data.get("links") or []):
        links.append(
            Link(
                str(need(ln, "a", f"links[{i}]")),
                str(need(ln, "b", f"links[{i}]")),
                str(ln.get("a_port", "") or ""),
                str(ln.get("b_port", "") or ""),
            )
        )
    if problems:
        raise InventoryError(source, problems)
    return Inventory(str(data.get("name", "cluster")), tors, switches, hosts, rnics, links, source).validate()


def load(path: str | Path) -> Inventory:
    """Read and validate a YAML inventory file.

    Raises:
        InventoryError: the file is not valid YAML or the inventory is inconsistent
            (the message names the file, the field and the fix).
        FileNotFoundError: no such file.
    """
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise InventoryError(str(p), [f"not valid YAML: {e}"]) from None
    return from_dict(data, source=str(p))


def gid_from_ip(ip: str) -> str:
    """The RoCEv2 GID of an IPv4 address (IPv4-mapped IPv6, ``::ffff:a.b.c.d``); IPv6 is its own GID."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ""
    if addr.version == 4:
        return f"::ffff:{addr}"
    return str(addr)


# ---- constructors -------------------------------------------------------------------


def _build(
    name: str,
    tors: list[Tor],
    switches: list[Switch],
    host_rnics: list[tuple[str, list[tuple[str, str]]]],
    links: list[Link],
    port_shuffle: random.Random | None = None,
) -> Inventory:
    """Assemble an inventory; ``host_rnics`` is [(host, [(rnic id, tor), ...])]. IPs 10.<tor>.<n>."""
    tor_index = {t.name: i for i, t in enumerate(tors)}
    per_tor_count: dict[str, int] = {}
    hosts: dict[str, Host] = {}
    rnics: dict[str, Rnic] = {}
    for hname, rl in host_rnics:
        for j, (rid, tor) in enumerate(rl):
            n = per_tor_count.get(tor, 0) + 1
            per_tor_count[tor] = n
            ti = tor_index[tor]
            ip = f"10.{ti // 250}.{ti % 250 + 1}.{n}" if n < 255 else f"10.{100 + ti // 250}.{ti % 250}.{n - 254}"
            rnics[rid] = Rnic(rid, hname, f"eth{j}", ip, gid_from_ip(ip), tor, f"Ethernet{n}")
        hosts[hname] = Host(hname, tuple(r for r, _ in rl))
    if port_shuffle is not None:
        # Cabling is rarely in order: permute each ToR's port numbers.
        for tor in tor_index:
            ids = [r.id for r in rnics.values() if r.tor == tor]
            ports = [rnics[r].tor_port for r in ids]
            port_shuffle.shuffle(ports)
            for r, p in zip(ids, ports, strict=True):
                rnics[r] = replace(rnics[r], tor_port=p)
    return Inventory(
        name, {t.name: t for t in tors}, {s.name: s for s in switches}, hosts, rnics, links, f"<{name}>"
    ).validate()


def panel1() -> Inventory:
    """The toy fabric of the R-Pingmesh digest's Panel 1.

    Three ToRs ``A``, ``B``, ``C``; four spines ``S1``–``S4``, each cabled to every ToR;
    six hosts ``H1``–``H6`` of two RNICs each. RNICs are named by ToR: ``A1``–``A4`` under
    ToR A (``H1`` = A1, A2; ``H2`` = A3, A4), ``B1``–``B4`` (``H3``, ``H4``), ``C1``–``C4``
    (``H5``, ``H6``). The digest's job H1 + H3 therefore flows A2 → B2.
    """
    tors = [Tor(t) for t in "ABC"]
    switches = [Switch(f"S{i}") for i in range(1, 5)]
    host_rnics = []
    for ti, t in enumerate("ABC"):
        for hj in range(2):
            host = f"H{2 * ti + hj + 1}"
            host_rnics.append((host, [(f"{t}{2 * hj + 1}", t), (f"{t}{2 * hj + 2}", t)]))
    links = [
        Link(t.name, s.name, f"Ethernet{33 + si}", f"Ethernet{ti + 1}")
        for ti, t in enumerate(tors)
        for si, s in enumerate(switches)
    ]
    return _build("panel1", tors, switches, host_rnics, links)


def _tor_names(n: int) -> list[str]:
    # Letters only up to G, so ToR ``H``'s RNIC ``H1`` can never clash with host ``H1`` or spine ``S1``.
    if n <= 7:
        return list(string.ascii_uppercase[:n])
    return [f"T{i + 1}" for i in range(n)]


def random_clos(
    seed: int,
    n_tors: int,
    n_spines: int,
    hosts_per_tor: int,
    rnics_per_host: int,
    *,
    n_pods: int = 1,
    n_cores: int = 0,
) -> Inventory:
    """A seeded Clos fabric.

    Two-tier by default: ``n_tors`` ToRs, each cabled to all ``n_spines`` spines
    (``N = n_spines`` parallel ToR-to-ToR paths). With ``n_pods > 1`` and ``n_cores > 0``
    it is three-tier like the paper's evaluation cluster (§6): ToRs are split over pods,
    each pod has ``n_spines`` agg switches cabled to all its ToRs, and agg *j* of every
    pod is cabled to the cores of plane *j* (``n_cores // n_spines`` each, so
    ``N = n_cores`` paths between pods).

    Naming: ToRs ``A``–``G`` (``T1``, ``T2``, ... beyond 7); RNICs ``<ToR><n>``
    (``A1`` ... as in Panel 1, ``T12r3`` beyond 7 ToRs); hosts ``H1``...; spines ``S1``...,
    aggs ``P<pod>S<j>``, cores ``X1``.... The seed permutes each ToR's port numbers
    (cabling is rarely in order), so ports are not derivable from names.

    Raises:
        ValueError: a size is not positive, or ``n_cores`` is not a multiple of ``n_spines``.
    """
    if min(n_tors, n_spines, hosts_per_tor, rnics_per_host, n_pods) < 1:
        raise ValueError("random_clos: every size must be at least 1")
    three_tier = n_pods > 1
    if three_tier and (n_cores < n_spines or n_cores % n_spines):
        raise ValueError(
            f"random_clos: n_cores={n_cores} must be a positive multiple of n_spines={n_spines} for n_pods > 1"
        )
    rng = random.Random(seed)
    names = _tor_names(n_tors)
    sep = "" if n_tors <= 7 else "r"
    tors = [Tor(t, pod=i * n_pods // n_tors) for i, t in enumerate(names)]
    host_rnics = []
    h = 0
    for t in names:
        for _ in range(hosts_per_tor):
            h += 1
            base = (h - 1) % hosts_per_tor * rnics_per_host
            host_rnics.append((f"H{h}", [(f"{t}{sep}{base + k + 1}", t) for k in range(rnics_per_host)]))
    links: list[Link] = []
    switches: list[Switch] = []
    down = hosts_per_tor * rnics_per_host
    if not three_tier:
        switches = [Switch(f"S{i + 1}") for i in range(n_spines)]
        for ti, t in enumerate(tors):
            for si, s in enumerate(switches):
                links.append(Link(t.name, s.name, f"Ethernet{down + si + 1}", f"Ethernet{ti + 1}"))
    else:
        per_plane = n_cores // n_spines
        cores = [Switch(f"X{i + 1}", "core") for i in range(n_cores)]
        for p in range(n_pods):
            aggs = [Switch(f"P{p}S{j + 1}", "agg", p) for j in range(n_spines)]
            switches += aggs
            pod_tors = [t for t in tors if t.pod == p]
            for ti, t in enumerate(pod_tors):
                for j, a in enumerate(aggs):
                    links.append(Link(t.name, a.name, f"Ethernet{down + j + 1}", f"Ethernet{ti + 1}"))
            for j, a in enumerate(aggs):
                for c in range(per_plane):
                    core = cores[j * per_plane + c]
                    links.append(Link(a.name, core.name, f"Ethernet{len(pod_tors) + c + 1}", f"Ethernet{p + 1}"))
        switches += cores
    return _build(f"clos-{seed}", tors, switches, host_rnics, links, port_shuffle=rng)


# ---- LLDP ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LldpNeighbor:
    """One LLDP neighbour seen on a local interface: the switch (chassis) and its port."""

    local_ifname: str
    chassis: str
    port_id: str
    port_descr: str = ""


def _as_items(obj: object) -> Iterable[tuple[str, dict]]:
    """lldpctl's JSON gives a dict keyed by name, or a list of such dicts when there are several."""
    if isinstance(obj, dict):
        yield from obj.items()
    elif isinstance(obj, list):
        for o in obj:
            yield from _as_items(o)


def parse_lldpctl_json(text: str) -> list[LldpNeighbor]:
    """Parse the output of ``lldpctl -f json`` (lldpd) into neighbours.

    lldpd writes ``{"lldp": {"interface": {...}}}``, where ``interface`` is one mapping
    ``{ifname: {...}}`` or a list of them (several interfaces), ``chassis`` maps the
    switch's system name to its details, and ``port.id`` is ``{"type": "ifname",
    "value": "Ethernet12"}``. The port name is ``port.id.value`` when its type is
    ``ifname``, else ``port.descr``, else the id value.

    Raises:
        ValueError: the text is not JSON or has no ``lldp`` object.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"lldpctl output is not JSON ({e}); run `lldpctl -f json`") from None
    if not isinstance(data, dict) or "lldp" not in data:
        raise ValueError("lldpctl JSON has no 'lldp' key; run `lldpctl -f json` (lldpd >= 0.9)")
    lldp = data["lldp"] or {}
    out = []
    for ifname, body in _as_items(lldp.get("interface") or {}):
        chassis_name = ""
        for cname, cbody in _as_items(body.get("chassis") or {}):
            # A chassis without a system name is keyed by nothing: {"id": {...}}.
            chassis_name = cname if cname != "id" else str((cbody or {}).get("value", ""))
            break
        port = body.get("port") or {}
        pid = port.get("id") or {}
        pid_type = pid.get("type", "") if isinstance(pid, dict) else ""
        pid_value = pid.get("value", "") if isinstance(pid, dict) else str(pid)
        descr = str(port.get("descr", "") or "")
        name = pid_value if pid_type == "ifname" else (descr or pid_value)
        out.append(LldpNeighbor(ifname, chassis_name, str(name), descr))
    return out


def apply_lldp(inv: Inventory, host: str, neighbors: list[LldpNeighbor]) -> Inventory:
    """Fill ``tor_port`` of ``host``'s RNICs from its LLDP neighbours (matched by netdev).

    Returns a new, validated inventory. Interfaces that are not RNICs are ignored.

    Raises:
        InventoryError: a neighbour names a switch other than the RNIC's ToR (miscabled,
            or a stale inventory), or the host is unknown.
    """
    if host not in inv.hosts:
        raise InventoryError(inv.source, [f"LLDP import: no host {host!r}; add it under hosts first"])
    by_netdev = {inv.rnics[r].netdev: inv.rnics[r] for r in inv.hosts[host].rnics}
    rnics = dict(inv.rnics)
    problems = []
    for nb in neighbors:
        r = by_netdev.get(nb.local_ifname)
        if r is None:
            continue
        if nb.chassis != r.tor:
            problems.append(
                f"hosts[{host}].rnics[{r.id}].tor: inventory says ToR {r.tor!r} but LLDP on {nb.local_ifname} "
                f"sees {nb.chassis!r} port {nb.port_id}; fix the cabling or the inventory"
            )
            continue
        rnics[r.id] = replace(r, tor_port=nb.port_id)
    if problems:
        raise InventoryError(inv.source, problems)
    return replace(inv, rnics=rnics).validate()


def apply_switch_lldp(inv: Inventory, switch: str, neighbors: list[LldpNeighbor]) -> Inventory:
    """Fill ports from a ToR's or switch's own LLDP table (``lldpctl -f json`` on SONiC/Cumulus).

    A neighbour that is a host fills the ``tor_port`` of the RNIC whose netdev it names
    (the local port is the ToR port); a neighbour that is a ToR or switch fills both port
    names of the link between them. Other neighbours (management network) are ignored.

    Raises:
        InventoryError: the switch is unknown, an RNIC is cabled to another ToR than the
            inventory says, or two switches are cabled but the inventory has no such link.
    """
    if switch not in inv.tors and switch not in inv.switches:
        raise InventoryError(inv.source, [f"LLDP import: no ToR or switch {switch!r}; add it first"])
    rnics = dict(inv.rnics)
    links = list(inv.links)
    problems = []
    seen: dict[str, str] = {}  # RNIC id -> port, as this switch sees it
    for nb in neighbors:
        if nb.chassis in inv.hosts:
            match = [inv.rnics[r] for r in inv.hosts[nb.chassis].rnics if inv.rnics[r].netdev == nb.port_id]
            if not match:
                continue
            r = match[0]
            if r.tor != switch:
                problems.append(
                    f"hosts[{r.host}].rnics[{r.id}].tor: inventory says ToR {r.tor!r} but {switch} sees it "
                    f"on {nb.local_ifname}; fix the cabling or the inventory"
                )
                continue
            rnics[r.id] = replace(r, tor_port=nb.local_ifname)
            seen[r.id] = nb.local_ifname
        elif nb.chassis in inv.tors or nb.chassis in inv.switches:
            for i, ln in enumerate(links):
                if (ln.a, ln.b) == (switch, nb.chassis):
                    links[i] = replace(ln, a_port=nb.local_ifname, b_port=nb.port_id)
                    break
                if (ln.a, ln.b) == (nb.chassis, switch):
                    links[i] = replace(ln, a_port=nb.port_id, b_port=nb.local_ifname)
                    break
            else:
                problems.append(
                    f"links: {switch} {nb.local_ifname} is cabled to {nb.chassis} {nb.port_id} but the inventory "
                    "has no such link; add it under links"
                )
    if problems:
        raise InventoryError(inv.source, problems)
    # The switch's own table is authoritative for its ports: an RNIC it did not see that still
    # claims one of them has a stale port, now unknown.
    for r in list(rnics.values()):
        if r.tor == switch and r.id not in seen and r.tor_port in seen.values():
            rnics[r.id] = replace(r, tor_port="")
    return replace(inv, rnics=rnics, links=links).validate()
