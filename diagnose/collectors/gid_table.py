"""Collector for RoCE GID tables: ``ibv_devinfo -v``, ``show_gids``, ``rdma link`` and sysfs ``gids/``.

A RoCE port has one GID per (address, RoCE version) of its netdev. RoCE v2 runs over
UDP/IP, so only a RoCE v2 GID on a routable address (not ``fe80::/10`` link-local) crosses
L3 hops; RoCE v1 is L2-only. The finding per port says which index to use
(``NCCL_IB_GID_INDEX``, perftest ``-x``), and warns when no such index exists.

Sources: ``show_gids`` (Mellanox mlnx-tools: ``DEV PORT INDEX GID IPv4 VER DEV``),
``ibv_devinfo -v`` (``GID[ i]: <gid>[, RoCE v2]``, ``active_mtu``), sysfs
``/sys/class/infiniband/<dev>/ports/<p>/gids/<i>`` with ``gid_attrs/types/<i>``
(``IB/RoCE v1`` or ``RoCE v2``) and ``gid_attrs/ndevs/<i>``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding
from producers.hostping.sysfs import SysfsSnapshot

NAME = "gid_table"
READS = "ibv_devinfo -v, show_gids, rdma link (GID tables with RoCE v1/v2 types, active MTU, netdevs)"

_HCA = re.compile(r"^\s*hca_id:\s*(?P<dev>\S+)")
_PORT = re.compile(r"^\s*port:\s*(?P<port>\d+)\s*$")
_MTU = re.compile(r"^\s*active_mtu:\s*(?P<mtu>\d+)")
_LL = re.compile(r"^\s*link_layer:\s*(?P<ll>\w+)")
_DEVINFO_GID = re.compile(r"^\s*\**GID\[\s*(?P<i>\d+)\]:\s*(?P<gid>[0-9a-fA-F:.]+)(?:,\s*(?P<type>RoCE v[12]|IB))?")
_SHOW_GIDS = re.compile(
    r"^(?P<dev>[A-Za-z][\w-]*)\s+(?P<port>\d+)\s+(?P<i>\d+)\s+(?P<gid>[0-9a-fA-F]{4}(?::[0-9a-fA-F]{4}){7})\s+"
    r"(?:(?P<ip4>\d+\.\d+\.\d+\.\d+)\s+)?(?P<ver>v[12])\s*(?P<nd>\S+)?\s*$"
)
_RDMA_LINK = re.compile(r"^\s*link\s+(?P<dev>[\w-]+)/(?P<port>\d+)\s+.*?(?:\bnetdev\s+(?P<nd>\S+))?\s*$")
_SYS_GID = re.compile(r"^/sys/class/infiniband/(?P<dev>[^/]+)/ports/(?P<port>\d+)/gids/(?P<i>\d+)$")
ZERO_GID = ipaddress.IPv6Address("::")
IB_ROOT = "/sys/class/infiniband"


@dataclass(frozen=True)
class GidEntry:
    """One GID table entry. ``gid_type`` is ``RoCE v2``, ``RoCE v1``, ``IB`` or '' (not shown)."""

    device: str
    port: int
    index: int
    gid: str
    gid_type: str
    netdev: str = ""
    line: int = 0

    @property
    def address(self) -> ipaddress.IPv6Address | None:
        try:
            return ipaddress.IPv6Address(self.gid)
        except ValueError:
            return None

    @property
    def routable(self) -> bool:
        """Not empty and not link-local (``fe80::/10``); IPv4-mapped GIDs are judged by their IPv4."""
        a = self.address
        if a is None or a == ZERO_GID:
            return False
        if a.ipv4_mapped is not None:
            return not a.ipv4_mapped.is_link_local
        return not a.is_link_local


@dataclass
class GidTable:
    """Every entry read, plus ``active_mtu`` (bytes) and netdev per ``(device, port)`` when shown."""

    entries: list[GidEntry] = field(default_factory=list)
    active_mtu: dict[tuple[str, int], int] = field(default_factory=dict)
    netdevs: dict[tuple[str, int], str] = field(default_factory=dict)
    link_layer: dict[tuple[str, int], str] = field(default_factory=dict)


def _type(v: str | None) -> str:
    v = (v or "").strip()
    if v in ("v2", "RoCE v2"):
        return "RoCE v2"
    if v in ("v1", "RoCE v1", "IB/RoCE v1"):
        return "RoCE v1"
    return "IB" if v == "IB" else ""


def parse(text: str) -> GidTable:
    """Entries from ``ibv_devinfo -v`` blocks and ``show_gids`` rows; netdevs from ``rdma link``."""
    t = GidTable()
    dev, port = "", 0
    for n, line in enumerate(text.splitlines(), start=1):
        if m := _HCA.match(line):
            dev, port = m["dev"], 0
        elif m := _PORT.match(line):
            port = int(m["port"])
        elif (m := _MTU.match(line)) and dev:
            t.active_mtu[(dev, port)] = int(m["mtu"])
        elif (m := _LL.match(line)) and dev:
            t.link_layer[(dev, port)] = m["ll"]
        elif (m := _DEVINFO_GID.match(line)) and dev:
            t.entries.append(GidEntry(dev, port, int(m["i"]), _norm(m["gid"]), _type(m["type"]), "", n))
        elif m := _SHOW_GIDS.match(line.strip()):
            key = (m["dev"], int(m["port"]))
            t.entries.append(GidEntry(key[0], key[1], int(m["i"]), _norm(m["gid"]), _type(m["ver"]), m["nd"] or "", n))
            if m["nd"]:
                t.netdevs[key] = m["nd"]
        elif (m := _RDMA_LINK.match(line)) and m["nd"]:
            t.netdevs[(m["dev"], int(m["port"]))] = m["nd"]
    return t


def _norm(gid: str) -> str:
    try:
        return str(ipaddress.IPv6Address(gid))
    except ValueError:
        return gid.lower()


def from_snapshot(snap: SysfsSnapshot) -> GidTable:
    """Entries from sysfs ``gids/<i>`` with ``gid_attrs/types/<i>`` and ``gid_attrs/ndevs/<i>``, from a
    capture or a sysfs root (reading an unused slot's type fails in the kernel: such slots are skipped)."""
    t = GidTable()
    paths = {p: v for p, v in snap.files.items() if _SYS_GID.match(p)}
    if snap.root is not None:  # a live or copied tree: list gids/ of every port
        for dev in snap.listdir(IB_ROOT):
            for port in snap.listdir(f"{IB_ROOT}/{dev}/ports"):
                for i in snap.listdir(f"{IB_ROOT}/{dev}/ports/{port}/gids"):
                    path = f"{IB_ROOT}/{dev}/ports/{port}/gids/{i}"
                    value = snap.read(path)
                    if value is not None and _SYS_GID.match(path):
                        paths.setdefault(path, value)
    for path, value in sorted(paths.items()):
        m = _SYS_GID.match(path)
        if m is None:
            continue
        base = f"/sys/class/infiniband/{m['dev']}/ports/{m['port']}/gid_attrs"
        gtype = _type(snap.read(f"{base}/types/{m['i']}"))
        nd = (snap.read(f"{base}/ndevs/{m['i']}") or "").strip()
        t.entries.append(
            GidEntry(m["dev"], int(m["port"]), int(m["i"]), _norm(value), gtype, nd, snap.lines.get(path, 0))
        )
    return t


def routable_v2(table: GidTable, device: str, port: int) -> list[GidEntry]:
    """RoCE v2 entries of a port on routable addresses, lowest index first."""
    return sorted(
        (e for e in table.entries if (e.device, e.port) == (device, port) and e.gid_type == "RoCE v2" and e.routable),
        key=lambda e: e.index,
    )


def findings(table: GidTable) -> list[Finding]:
    """Per port: which index is RoCE v2 on a routable address (info), or that none is (warning)."""
    out = []
    ports = sorted({(e.device, e.port) for e in table.entries if e.address not in (None, ZERO_GID)})
    for dev, port in ports:
        if table.link_layer.get((dev, port), "Ethernet") != "Ethernet":
            continue
        mine = [e for e in table.entries if (e.device, e.port) == (dev, port) and e.address not in (None, ZERO_GID)]
        if all(e.gid_type == "" for e in mine):
            continue  # types not shown (old ibv_devinfo): nothing to judge
        good = routable_v2(table, dev, port)
        first_line = str(min(e.line for e in mine)) if any(e.line for e in mine) else ""
        ev: dict[str, object] = {
            "entries": [[e.index, e.gid, e.gid_type, e.netdev] for e in sorted(mine, key=lambda e: e.index)],
            "active_mtu": table.active_mtu.get((dev, port)),
        }
        if good:
            ev["roce_v2_index"] = good[0].index
            out.append(
                Finding(
                    "roce_v2_gid",
                    f"{dev}/port{port}",
                    "info",
                    f"GID index {good[0].index} ({good[0].gid}) is RoCE v2 on a routable address"
                    + (f" of {good[0].netdev}" if good[0].netdev else "")
                    + f": the index for NCCL_IB_GID_INDEX / perftest -x on {dev} port {port}.",
                    ev,
                    "",
                    first_line,
                )
            )
        else:
            kinds = sorted({("link-local " if not e.routable else "") + (e.gid_type or "untyped") for e in mine})
            out.append(
                Finding(
                    "gid_index",
                    f"{dev}/port{port}",
                    "warning",
                    f"{dev} port {port} has no RoCE v2 GID on a routable address (only {', '.join(kinds)}): RoCE v2 "
                    "traffic cannot cross an L3 hop and RoCE v1 is L2-only. Assign an IP address to its netdev, "
                    "then use the RoCE v2 index of that address.",
                    ev,
                    "config",
                    first_line,
                )
            )
    return out


def detect(text: str) -> bool:
    """True when the text holds a GID entry (ibv_devinfo or show_gids) or an ``rdma link`` line."""
    return any(_DEVINFO_GID.match(x) or _SHOW_GIDS.match(x.strip()) or _RDMA_LINK.match(x) for x in text.splitlines())
