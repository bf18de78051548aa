"""nftables inside lab namespaces: one table per purpose, fed to ``nft -f -`` on stdin.

Each fault (or counter set) gets its own table ``inet <name>`` so removing it is
one ``delete table``; rule text is built from validated names and numbers only.
"""

from __future__ import annotations

import json
import re

from infra.lab.netns import LabError, ns_exec

_NAME = re.compile(r"^[A-Za-z0-9_]{1,60}$")
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


def _check(value: str, pattern: re.Pattern[str], what: str) -> str:
    if not pattern.match(value):
        raise LabError(f"nftables {what} {value!r} has characters the lab does not allow")
    return value


def add_table(ns: str, table: str, rules: list[str], hook: str = "postrouting") -> None:
    """Create table ``inet table`` in ``ns`` with one chain on ``hook`` holding ``rules``.

    Raises:
        LabError: ``nft`` is missing (install the ``nftables`` package) or refused the rules.
    """
    _check(table, _NAME, "table")
    body = "\n".join(f"    {r}" for r in rules)
    script = (
        f"table inet {table} {{\n  chain c {{\n    type filter hook {hook} priority 0; policy accept;\n"
        f"{body}\n  }}\n}}\n"
    )
    try:
        ns_exec(ns, ["nft", "-f", "-"], input=script)
    except FileNotFoundError as e:
        raise LabError("nft not found: install nftables (apt-get install -y nftables)") from e


def delete_table(ns: str, table: str) -> None:
    """Remove table ``inet table`` from ``ns`` if it exists."""
    _check(table, _NAME, "table")
    ns_exec(ns, ["nft", "delete", "table", "inet", table], check=False)


def loss_rule(ifname: str, per_mille: int) -> str:
    """Drop ``per_mille``/1000 of all packets leaving ``ifname`` at random (``numgen random``)."""
    _check(ifname, _IFNAME, "interface")
    if not 0 < per_mille <= 1000:
        raise LabError(f"loss of {per_mille}/1000 is not in 1..1000")
    if per_mille == 1000:  # ``numgen random mod 1000`` is 0..999: nft refuses ``< 1000`` as out of range
        return f'oifname "{ifname}" counter drop'
    return f'oifname "{ifname}" numgen random mod 1000 < {per_mille} counter drop'


def tuple_loss_rules(ifname: str, per_mille: int, seed: int, port: int = 4791) -> list[str]:
    """Drop the 5-tuples whose hash falls in the lowest ``per_mille``/1000, both directions.

    Probes (``udp dport port``) hash (saddr, daddr, sport, dport); replies (``udp sport
    port``) hash the same tuple swapped, so one flow loses its probes and its ACKs
    and every other flow passes: R-Pingmesh's "drops only some 5-tuples" fault.
    """
    _check(ifname, _IFNAME, "interface")
    if int(per_mille) >= 1000:  # every tuple: ``jhash ... mod 1000`` is 0..999, nft refuses ``< 1000``
        return [f'oifname "{ifname}" udp dport {port} counter drop',
                f'oifname "{ifname}" udp sport {port} counter drop']
    h = f"mod 1000 seed {int(seed) & 0xFFFFFFFF:#x} < {int(per_mille)}"
    return [
        f'oifname "{ifname}" udp dport {port} jhash ip saddr . ip daddr . udp sport . udp dport {h} counter drop',
        f'oifname "{ifname}" udp sport {port} jhash ip daddr . ip saddr . udp dport . udp sport {h} counter drop',
    ]


def port_counter_rules(sports: list[int], dport: int = 4791) -> list[str]:
    """One counting rule per UDP source port of packets to ``dport`` (for ECMP checks)."""
    return [f"udp sport {int(p)} udp dport {int(dport)} counter" for p in sports]


def counters(ns: str, table: str) -> dict[int, int]:
    """Packets counted per UDP source port by the rules of :func:`port_counter_rules`."""
    out = ns_exec(ns, ["nft", "-j", "list", "table", "inet", _check(table, _NAME, "table")])
    result: dict[int, int] = {}
    for item in json.loads(out)["nftables"]:
        rule = item.get("rule")
        if not rule:
            continue
        port, packets = None, 0
        for expr in rule["expr"]:
            m = expr.get("match")
            if m and m["left"].get("payload", {}).get("field") == "sport":
                port = int(m["right"])
            if "counter" in expr:
                packets = int(expr["counter"]["packets"])
        if port is not None:
            result[port] = packets
    return result
