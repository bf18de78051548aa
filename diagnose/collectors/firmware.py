"""Collector for RNIC firmware and driver versions, from every tool that prints them.

Reads ``ethtool -i`` (``driver:``, ``firmware-version:``, ``bus-info:``), ``ibstat`` (``CA type:``,
``Firmware version:``), ``ibv_devinfo`` (``fw_ver:``, ``vendor_part_id:``, ``board_id:``),
``mlxfwmanager --query`` / ``mlxup --query`` (per ``Device #N``: type, PSID, PCI name, FW current
and available, ``Status:``), ``flint -d <dev> query`` (``FW Version:``, ``PSID:``) and the kernel
log (``mlx5_core <bdf>: firmware version: X``, driver lines asking for newer firmware such as
mlx4's ``please upgrade to later FW version``). Rules:

- RNICs of one family on one host running different firmware: ``mixed_firmware`` warning. The
  family is the firmware's major number, which NVIDIA/Mellanox assigns per device family and
  every tool prints the same way (models are named differently per tool: CA type ``MT4129``,
  ``vendor_part_id 4129``, PSID, ``ConnectX7``; they are kept as evidence) (14 = ConnectX-4 Lx,
  16 = ConnectX-5, 20 = ConnectX-6, 22 = ConnectX-6 Dx, 26 = ConnectX-6 Lx, 28 = ConnectX-7), so
  a ConnectX-7 on 28.39 beside a ConnectX-6 Dx on 22.31 is not mixed;
- a driver line asking for newer firmware: ``firmware_too_old`` warning at that PCI function;
- ``mlxfwmanager``/``mlxup`` ``Status: Update required``: ``firmware_update_available`` info with
  the current and available versions (an update is a choice, not a fault).

Harmless lines raise nothing: ``expansion-rom-version:`` empty, ``supports-test: no``,
``Status: No matching image found`` (the tool had no image to compare with).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from diagnose.collectors.rdma_port import DEVINFO_HCA, IBSTAT_CA
from producers.hostping.findings import Finding

NAME = "firmware"
READS = "ethtool -i, ibstat / ibv_devinfo firmware lines, mlxfwmanager / mlxup --query, flint query, mlx4/mlx5 dmesg"

_VER = r"\d+\.\d+\.\d+"
_ETH_DRIVER = re.compile(r"^\s*driver:\s*(?P<drv>\S+)\s*$")
_ETH_FW = re.compile(rf"^\s*firmware-version:\s*(?P<v>{_VER})(?:\s*\((?P<psid>[^)]+)\))?")
_ETH_BUS = re.compile(r"^\s*bus-info:\s*(?P<bus>\S+)")
_IBSTAT_TYPE = re.compile(r"^\s*CA type:\s*(?P<t>\S+)")
_IBSTAT_FW = re.compile(rf"^\s*Firmware version:\s*(?P<v>{_VER})")
_DEVINFO_FW = re.compile(rf"^\s*fw_ver:\s*(?P<v>{_VER})")
_DEVINFO_PART = re.compile(r"^\s*vendor_part_id:\s*(?P<p>\d+)")
_MFM_DEVICE = re.compile(r"^\s*Device #(?P<n>\d+):")
_MFM_FIELD = re.compile(r"^\s*(?P<k>Device Type|Part Number|PSID|PCI Device Name|Status):\s*(?P<v>.*?)\s*$")
_MFM_FW = re.compile(rf"^\s*FW\s+(?P<cur>{_VER})\s+(?P<avail>{_VER}|N/A)")
_FLINT_FW = re.compile(rf"^\s*FW Version:\s*(?P<v>{_VER})")
_FLINT_PSID = re.compile(r"^\s*PSID:\s*(?P<psid>\S+)")
_DMESG_FW = re.compile(rf"(?P<drv>mlx[45]_core) (?P<bdf>[0-9a-f]{{4}}:[0-9a-f]{{2}}:[0-9a-f]{{2}}\.\d): "
                       rf"firmware version: (?P<v>{_VER})")
_TOO_OLD = re.compile(
    r"(?P<drv>mlx[45]_\w+) (?P<bdf>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d): (?P<msg>.*?(?:upgrade to (?:a )?later FW"
    r"|upgrade (?:the |your )?firmware|FW version .*? too old|firmware .*? too old"
    r"|unsupported command interface revision).*)$",
    re.IGNORECASE,
)


@dataclass
class FwEntry:
    """One device's firmware as one tool printed it."""

    device: str
    version: str
    model: str = ""
    tool: str = ""
    line: int = 0
    available: str = ""
    status: str = ""


@dataclass
class FirmwareTable:
    """Every entry in text order and the driver lines asking for newer firmware."""

    entries: list[FwEntry] = field(default_factory=list)
    too_old: list[dict] = field(default_factory=list)  # {"device", "driver", "message", "line"}


def parse(text: str) -> FirmwareTable:
    """Entries of all forms; other lines are skipped."""
    t = FirmwareTable()
    ctx: dict = {}  # the block being read: tool, device, model
    for n, line in enumerate(text.splitlines(), start=1):
        if m := _DMESG_FW.search(line):
            t.entries.append(FwEntry(m["bdf"], m["v"], "", "dmesg", n))
        elif m := _TOO_OLD.search(line):
            t.too_old.append({"device": m["bdf"], "driver": m["drv"], "message": m["msg"].strip(), "line": n})
        elif m := _ETH_DRIVER.match(line):
            ctx = {"tool": "ethtool -i", "driver": m["drv"]}
        elif ctx.get("tool") == "ethtool -i" and (m := _ETH_FW.match(line)):
            ctx["entry"] = FwEntry(ctx["driver"], m["v"], m["psid"] or "", "ethtool -i", n)
            t.entries.append(ctx["entry"])
        elif ctx.get("tool") == "ethtool -i" and (m := _ETH_BUS.match(line)) and "entry" in ctx:
            ctx["entry"].device = m["bus"]
        elif m := IBSTAT_CA.match(line):
            ctx = {"tool": "ibstat", "device": m["dev"]}
        elif ctx.get("tool") == "ibstat" and (m := _IBSTAT_TYPE.match(line)):
            ctx["model"] = m["t"]
        elif ctx.get("tool") == "ibstat" and (m := _IBSTAT_FW.match(line)):
            t.entries.append(FwEntry(ctx["device"], m["v"], ctx.get("model", ""), "ibstat", n))
        elif m := DEVINFO_HCA.match(line):
            ctx = {"tool": "ibv_devinfo", "device": m["dev"]}
        elif ctx.get("tool") == "ibv_devinfo" and (m := _DEVINFO_FW.match(line)):
            ctx["entry"] = FwEntry(ctx["device"], m["v"], "", "ibv_devinfo", n)
            t.entries.append(ctx["entry"])
        elif ctx.get("tool") == "ibv_devinfo" and (m := _DEVINFO_PART.match(line)) and "entry" in ctx:
            ctx["entry"].model = f"part {m['p']}"
        elif m := _MFM_DEVICE.match(line):
            ctx = {"tool": "mlxfwmanager", "entry": FwEntry(f"device #{m['n']}", "", "", "mlxfwmanager", n)}
        elif ctx.get("tool") == "mlxfwmanager" and (m := _MFM_FIELD.match(line)):
            e = ctx["entry"]
            if m["k"] in ("Device Type", "PSID") and not e.model:
                e.model = m["v"]
            elif m["k"] == "PCI Device Name":
                e.device = m["v"]
            elif m["k"] == "Status":
                e.status = m["v"]
        elif ctx.get("tool") == "mlxfwmanager" and (m := _MFM_FW.match(line)):
            e = ctx["entry"]
            e.version, e.available, e.line = m["cur"], "" if m["avail"] == "N/A" else m["avail"], n
            t.entries.append(e)
        elif m := _FLINT_FW.match(line):
            ctx = {"tool": "flint", "entry": FwEntry("flint query", m["v"], "", "flint", n)}
            t.entries.append(ctx["entry"])
        elif ctx.get("tool") == "flint" and (m := _FLINT_PSID.match(line)):
            ctx["entry"].model = m["psid"]
    return t


def family(e: FwEntry) -> str:
    """The device family an entry belongs to: ``fw <major>`` (the major number is per family)."""
    return f"fw {e.version.split('.')[0]}"


def mixed(entries: list[FwEntry], where: Callable[[FwEntry], str] = lambda e: str(e.line)) -> list[Finding]:
    """``mixed_firmware`` per family whose devices run more than one version (a device seen by two tools
    counts once, its first entry); ``where`` gives each entry's ``source`` (a line, or ``file:line``)."""
    out = []
    by_device: dict[str, FwEntry] = {}
    for e in entries:
        by_device.setdefault(e.device, e)
    groups: dict[str, dict[str, FwEntry]] = {}
    for e in by_device.values():
        groups.setdefault(family(e), {})[e.device] = e
    for fam, devs in groups.items():
        versions = sorted({e.version for e in devs.values()})
        if len(versions) > 1:
            first = next(e for e in entries if e.device in devs)
            out.append(Finding(
                "mixed_firmware", ",".join(sorted(devs)), "warning",
                f"RNICs of one family ({fam}) run different firmware ({', '.join(versions)}): peers negotiate "
                "different features and defaults (congestion control, PCIe relaxed ordering). Flash them to one "
                "version (mlxfwmanager -u).",
                {"family": fam, "versions": {d: e.version for d, e in sorted(devs.items())},
                 "models": sorted({e.model for e in devs.values() if e.model})},
                "config", where(first),
            ))  # fmt: skip
    return out


def findings(t: FirmwareTable) -> list[Finding]:
    """``mixed_firmware``, ``firmware_too_old`` and ``firmware_update_available``."""
    out = mixed(t.entries)
    for o in t.too_old:
        out.append(Finding(
            "firmware_too_old", o["device"], "warning",
            f"The {o['driver']} driver asks for newer firmware on {o['device']} ({o['message']}): features are off "
            "or commands fail until it is updated.",
            {"driver": o["driver"], "message": o["message"]},
            "config", str(o["line"]),
        ))  # fmt: skip
    for e in t.entries:
        if e.status.lower() == "update required" and e.available:
            out.append(Finding(
                "firmware_update_available", e.device, "info",
                f"{e.model or e.device} runs firmware {e.version}; {e.available} is available (mlxfwmanager: "
                "Update required).",
                {"current": e.version, "available": e.available, "model": e.model},
                "config", str(e.line),
            ))  # fmt: skip
    return out


def detect(text: str) -> bool:
    """True when the text holds a firmware version in one of the forms, or a driver line asking for one."""
    t = parse(text)
    return bool(t.entries or t.too_old)
