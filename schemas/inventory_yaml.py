"""Reading a cluster inventory from its YAML file (or the same shape as a dict).

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

``gid`` defaults to the IPv4-mapped address of ``ip``, ``tor_port`` to unknown (fill it
from LLDP with :mod:`schemas.lldp`). :meth:`schemas.inventory.Inventory.dump` writes
this shape back. Only the stdlib and PyYAML are used: agents load this file too.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from schemas.inventory import Host, Inventory, InventoryError, Link, Rnic, Switch, Tor, gid_from_ip


def from_dict(data: dict, source: str = "<inventory>") -> Inventory:
    """Build and validate an inventory from the YAML-shaped dict (see the module docstring).

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
