"""Collector for ``ip a`` / ``ip addr show``: netdevs with their MTU, state, MAC and addresses.

No rule of its own: its addresses let :mod:`diagnose.correlate` tell which host owns a GID that an
NCCL log names (an IPv6 address is the RoCE v2 GID itself; an IPv4 address is the GID
``::ffff:a.b.c.d``), so a failing connection whose two GIDs both belong to one host is
recognised as an intra-host path (field case 24).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

NAME = "ip_addr"
READS = "ip a / ip addr show (netdevs, MTU, addresses; used to map GIDs to hosts)"

_IFACE = re.compile(r"^\d+:\s+(?P<if>[\w.@-]+):\s+<(?P<flags>[^>]*)>\s+mtu\s+(?P<mtu>\d+)(?:.*\bstate\s+(?P<st>\w+))?")
_ADDR = re.compile(r"^\s+inet6?\s+(?P<addr>[0-9a-fA-F:.]+)/(?P<plen>\d+)")
_MAC = re.compile(r"^\s+link/ether\s+(?P<mac>[0-9a-fA-F:]{17})")
_ALT = re.compile(r"^\s+altname\s+(?P<alt>\S+)")


@dataclass
class Netdev:
    """One interface: name, MTU (bytes), state, MAC, alternative names and ``(address, prefix)`` pairs."""

    name: str
    mtu: int
    state: str
    line: int
    mac: str = ""
    altnames: list[str] = field(default_factory=list)
    addresses: list[tuple[str, int]] = field(default_factory=list)


def gid_of(address: str) -> ipaddress.IPv6Address | None:
    """The RoCE v2 GID of an address: IPv6 as is, IPv4 as ``::ffff:a.b.c.d``; ``None`` if not an address."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        try:
            return ipaddress.IPv6Address(address)
        except ValueError:
            return None
    return ipaddress.IPv6Address(f"::ffff:{ip}") if ip.version == 4 else ipaddress.IPv6Address(ip)


def parse(text: str) -> list[Netdev]:
    """Netdevs in order; addresses keep their prefix length."""
    out: list[Netdev] = []
    cur: Netdev | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if m := _IFACE.match(line.strip() if not line[:1].isspace() else line):
            cur = Netdev(m["if"].split("@")[0], int(m["mtu"]), (m["st"] or "").upper(), n)
            out.append(cur)
        elif cur is not None and (a := _ADDR.match(line)):
            cur.addresses.append((a["addr"], int(a["plen"])))
        elif cur is not None and (mac := _MAC.match(line)):
            cur.mac = mac["mac"].lower()
        elif cur is not None and (alt := _ALT.match(line)):
            cur.altnames.append(alt["alt"])
    return out


def findings(netdevs: list[Netdev]) -> list[Finding]:
    """None on its own (see :mod:`diagnose.correlate`)."""
    return []


def detect(text: str) -> bool:
    """True when the text holds an ``ip a`` interface line followed by an address or link line."""
    return any(_IFACE.match(x) for x in text.splitlines()) and bool(re.search(r"^\s+(?:inet6?|link/)", text, re.M))
