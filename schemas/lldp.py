"""Filling an inventory's cabling from LLDP: which ToR port each RNIC's cable plugs into.

Reads ``lldpctl -f json`` (lldpd) as run on a host (:func:`apply_lldp`: the RNICs' ToR
ports) or on a ToR/switch running SONiC or Cumulus (:func:`apply_switch_lldp`: RNIC
ports and the ports of switch-to-switch links). Every import returns a new, validated
:class:`~schemas.inventory.Inventory`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

from schemas.inventory import Inventory, InventoryError


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
