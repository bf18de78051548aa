"""Collector for RDMA port and link state: ``ibstat``, ``ibstatus``, ``ibv_devinfo [-v]``, ``rdma link [show]``.

Every form gives, per (device, port), a logical state (DOWN / INIT / ARMED / ACTIVE), where the
tool prints it a physical state (POLLING / LINK_UP / DISABLED / ...), the rate and the link
layer. A text may hold several samples of the same port (the tool run repeatedly): they are kept
in order. Rules, per port:

- the state changes across samples: ``port_flapping`` warning (a cable, transceiver or switch
  port that does not hold the link; rccl#1423 shows DOWN/POLLING -> DOWN/LINK_UP -> ACTIVE);
- the last sample is not ACTIVE: ``port_down`` error, with what the physical state says:
  POLLING = no link partner (cable, transceiver, switch port down); LINK_UP with DOWN/INIT on
  InfiniBand = the link trained but no subnet manager activated the port; otherwise as read;
- the physical state is DISABLED: ``port_disabled`` info (administratively off or an unused
  second port, e.g. one port of a dual-port card; a fault only if that port should carry traffic).

Lines that look alarming and are normal raise nothing: ``Base lid: 0`` / ``SM lid: 0`` on a
RoCE (Ethernet) port, ``port_lid 65535`` on a port that is down anyway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

NAME = "rdma_port"
READS = "ibstat, ibstatus, ibv_devinfo [-v], rdma link [show] (port state, physical state, rate, repeated samples)"

_STATE = {
    "active": "ACTIVE", "port_active": "ACTIVE", "4": "ACTIVE",
    "down": "DOWN", "port_down": "DOWN", "1": "DOWN",
    "init": "INIT", "initializing": "INIT", "port_init": "INIT", "2": "INIT",
    "armed": "ARMED", "port_armed": "ARMED", "3": "ARMED",
}  # fmt: skip
_PHYS = {
    "linkup": "LINK_UP", "link_up": "LINK_UP", "polling": "POLLING", "disabled": "DISABLED",
    "sleep": "SLEEP", "portconfigurationtraining": "TRAINING", "port_configuration_training": "TRAINING",
    "linkerrorrecovery": "LINK_ERROR_RECOVERY", "link_error_recovery": "LINK_ERROR_RECOVERY",
    "phytest": "PHY_TEST", "phy_test": "PHY_TEST",
}  # fmt: skip

IBSTAT_CA = re.compile(r"^\s*CA '(?P<dev>[^']+)'")
_IBSTAT_PORT = re.compile(r"^\s*Port (?P<port>\d+):\s*$")
_IBSTATUS = re.compile(r"^\s*Infiniband device '(?P<dev>[^']+)' port (?P<port>\d+) status:")
DEVINFO_HCA = re.compile(r"^\s*hca_id:\s*(?P<dev>\S+)")
_DEVINFO_PORT = re.compile(r"^\s*port:\s*(?P<port>\d+)\s*$")
_KV = re.compile(r"^\s*(?P<k>State|Physical state|Rate|Link layer|state|phys state|phys_state|rate|link_layer"
                 r"|active_width|active_speed)\s*:\s*(?P<v>.+?)\s*$")
_RDMA_LINK = re.compile(
    r"^\s*(?:\d+/\d+:\s*)?link (?P<dev>[\w.-]+)/(?P<port>\d+)\b.*?\bstate (?P<state>\w+)"
    r"(?:.*?\bphysical_state (?P<phys>\w+))?(?:.*?\bnetdev (?P<netdev>\S+))?"
)
_PROMPT_HOST = re.compile(r"^\[?[\w.-]+@(?P<host>[A-Za-z][\w.-]*)[\s:\]]")


@dataclass
class PortSample:
    """One reading of one port: states normalised to upper-case names (``ACTIVE``, ``POLLING``)."""

    device: str
    port: int
    state: str = ""
    phys: str = ""
    rate: str = ""
    link_layer: str = ""
    netdev: str = ""
    tool: str = ""
    line: int = 0


@dataclass
class PortTable:
    """Every sample in text order; ``host`` when a shell prompt names one."""

    samples: list[PortSample] = field(default_factory=list)
    host: str = ""

    def ports(self) -> dict[tuple[str, int], list[PortSample]]:
        out: dict[tuple[str, int], list[PortSample]] = {}
        for s in self.samples:
            out.setdefault((s.device, s.port), []).append(s)
        return out


def _norm_state(v: str) -> str:
    # "4: ACTIVE" (ibstatus), "PORT_ACTIVE (4)" (ibv_devinfo), "Active" (ibstat), "ACTIVE" (rdma)
    words = re.findall(r"[A-Za-z_]+|\d+", v)
    for w in words:
        if w.lower() in _STATE and not w.isdigit():
            return _STATE[w.lower()]
    return _STATE.get(words[0], v.strip().upper()) if words else ""


def _norm_phys(v: str) -> str:
    words = re.findall(r"[A-Za-z_]+", v.replace(" ", ""))
    for w in words:
        if w.lower() in _PHYS:
            return _PHYS[w.lower()]
    return v.strip().upper()


def parse(text: str) -> PortTable:
    """Samples from all four forms; other lines are skipped."""
    table = PortTable()
    dev, tool, cur = "", "", None
    for n, line in enumerate(text.splitlines(), start=1):
        if not table.host and (h := _PROMPT_HOST.match(line.strip())):
            table.host = h["host"]
        if r := _RDMA_LINK.match(line):
            table.samples.append(
                PortSample(r["dev"], int(r["port"]), _norm_state(r["state"]), _norm_phys(r["phys"] or ""),
                           netdev=r["netdev"] or "", tool="rdma link", line=n)
            )
            cur = None
        elif m := IBSTAT_CA.match(line):
            dev, tool, cur = m["dev"], "ibstat", None
        elif m := _IBSTATUS.match(line):
            cur = PortSample(m["dev"], int(m["port"]), tool="ibstatus", line=n)
            table.samples.append(cur)
        elif m := DEVINFO_HCA.match(line):
            dev, tool, cur = m["dev"], "ibv_devinfo", None
        elif dev and (m := _IBSTAT_PORT.match(line) or _DEVINFO_PORT.match(line)):
            cur = PortSample(dev, int(m["port"]), tool=tool, line=n)
            table.samples.append(cur)
        elif cur is not None and (kv := _KV.match(line)):
            k, v = kv["k"].lower(), kv["v"]
            if k == "state":
                cur.state, cur.line = _norm_state(v), n
            elif k in ("physical state", "phys state", "phys_state"):
                cur.phys = _norm_phys(v)
            elif k == "rate":
                cur.rate = v
            elif k in ("link layer", "link_layer"):
                cur.link_layer = v
            elif k == "active_speed" and not cur.rate:
                cur.rate = v
    table.samples = [s for s in table.samples if s.state]
    return table


def _where(table: PortTable, s: PortSample) -> str:
    return f"{table.host + '/' if table.host else ''}{s.device}/{s.port}"


def findings(table: PortTable) -> list[Finding]:
    """``port_flapping``, ``port_down`` and ``port_disabled`` per port, in the order ports appear."""
    out = []
    for (_, _), samples in table.ports().items():
        last = samples[-1]
        seq = [f"{s.state}/{s.phys}" if s.phys else s.state for s in samples]
        ev = {
            "device": last.device, "port": last.port, "state": last.state, "physical_state": last.phys,
            "rate": last.rate, "link_layer": last.link_layer, "tool": last.tool, "samples": seq,
            **({"netdev": last.netdev} if last.netdev else {}),
        }  # fmt: skip
        where = _where(table, last)
        if len({x for x in seq}) > 1:
            out.append(Finding(
                "port_flapping", where, "warning",
                f"{where} changed state across {len(samples)} samples ({' -> '.join(seq)}): the link does not hold. "
                "Check the cable/transceiver and the switch port (symbol and link-down counters: mlxlink, "
                "ibqueryerrors, ethtool -S) before blaming the job.",
                ev, "failure", str(samples[0].line),
            ))  # fmt: skip
            continue
        if last.phys == "DISABLED":
            out.append(Finding(
                "port_disabled", where, "info",
                f"{where} is disabled (physical state DISABLED): administratively off or an unused port. "
                "A fault only if this port should carry traffic.",
                ev, "config", str(last.line),
            ))  # fmt: skip
        elif last.state != "ACTIVE":
            ib = last.link_layer.lower().startswith("infiniband")
            if last.phys == "POLLING":
                why = "no link partner: the cable, the transceiver or the switch port is down"
                sub = "no_link_partner"
            elif last.phys == "LINK_UP" and ib:
                why = ("the physical link is up but no subnet manager activated the port "
                       "(check opensm/UFM: `sminfo`, SM lid)")
                sub = "no_subnet_manager"
            else:
                why = f"physical state {last.phys or 'not printed'}"
                sub = "down"
            ev["subkind"] = sub
            out.append(Finding(
                "port_down", where, "error",
                f"{where} is {last.state}, not ACTIVE: {why}. No RDMA traffic can use it.",
                ev, "failure", str(last.line),
            ))  # fmt: skip
    return out


def detect(text: str) -> bool:
    """True when the text holds a port state in one of the four forms."""
    return bool(parse(text).samples)
