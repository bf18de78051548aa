"""Parser and rules for ``lspci -vvv`` output (pciutils).

Reads the link registers (LnkCap, LnkCap2, LnkCtl2, LnkSta) and the ACS/ATS
control registers of every device. Rules:

- link trained below capability -> :func:`producers.hostping.pcie_link.assess_link`
  (Hostping failures #1/#2; field cases 11 and 12);
- ACS request/completion redirect or egress control enabled -> ``acs_redirect``:
  GPUDirect RDMA detours through the CPU root complex (Hostping #7; field case 7);
- ATS disabled on a device that has it -> ``ats_disabled``: with an IOMMU every GDR
  packet is translated at the root complex (Hostping #8).

Also the condensed forms people paste, one device per line
(``0002:01:00.0  LnkCap: Speed 32GT/s, Width x4    LnkSta: Speed 32GT/s, Width x2 (downgraded)``,
field case 16). A width drop at full speed is named at the hop that limits it: the
upstream port when the capture shows it wired narrower (``LnkCap`` below the card's), and
functions of one device that share the link are reported together.

Device blocks start at a header line (``3b:00.0 Ethernet controller: ...``) and
end at a blank line or at an unindented line that is not a known register line,
so registers pasted without a header still parse (they get a ``line N`` location).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding
from producers.hostping.pcie_link import LinkReading, assess_link, limited_by_partner

NAME = "lspci"
READS = "lspci -vvv (LnkCap/LnkCap2/LnkCtl2/LnkSta, ACSCtl, ATSCtl) and condensed one-line BDF LnkCap/LnkSta forms"

_HEADER = re.compile(
    r"^(?P<bdf>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<cls>[^:]+?)(?:\s*\[[0-9a-f]{4}\])?:\s*(?P<desc>.*)$"
)
_FIELD = re.compile(r"^\s*(?P<key>LnkCap2|LnkCap|LnkCtl2|LnkSta|ACSCtl|ACSCap|ATSCtl|ATSCap):\s*(?P<val>.*)$")
_BRIEF = re.compile(
    r"^\s*(?P<bdf>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<rest>(?:LnkCap|LnkSta)\b.*)$"
)
_BRIEF_FIELD = re.compile(
    r"(?P<key>LnkCap2|LnkCap|LnkCtl2|LnkSta):\s*(?P<val>.*?)(?=\s+(?:LnkCap2|LnkCap|LnkCtl2|LnkSta):|$)"
)
_BUS = re.compile(r"^\s+Bus: primary=[0-9a-f]{2}, secondary=(?P<sec>[0-9a-f]{2})")
_SPEED = re.compile(r"Speed\s+(?P<s>[\d.]+)GT/s(?P<down>\s*\(downgraded\))?")
_WIDTH = re.compile(r"Width\s+x(?P<w>\d+)(?P<down>\s*\(downgraded\))?")
_SPEEDS = re.compile(r"Supported Link Speeds:\s*(?:[\d.]+-)?(?P<max>[\d.]+)GT/s")
_TARGET = re.compile(r"Target Link Speed:\s*(?P<t>[\d.]+)GT/s")
_FLAG = re.compile(r"(?P<name>[A-Za-z]+)(?P<on>[+-])")

GPU_CLASSES = ("vga compatible controller", "3d controller", "display controller")
RNIC_CLASSES = ("ethernet controller", "infiniband controller", "network controller")
ACS_REDIRECT_FLAGS = ("ReqRedir", "CmpltRedir", "EgressCtrl")


@dataclass
class LspciDevice:
    """One device block: its address (or ``line N``), class, and raw register values."""

    location: str
    device_class: str
    description: str
    line: int
    registers: dict[str, str] = field(default_factory=dict)
    register_lines: dict[str, int] = field(default_factory=dict)
    secondary_bus: str = ""  # bridges: "DDDD:BB" of the bus below, from "Bus: primary=.., secondary=.."
    section: str = ""  # the unindented title line above a condensed line ("Observed on host X")
    condensed: bool = False  # one-line "BDF LnkCap ... LnkSta ..." form: no bus hierarchy shown


def _class_of(cls: str, desc: str) -> str:
    c = cls.lower()
    if c in GPU_CLASSES:
        return "gpu"
    if c in RNIC_CLASSES:
        return "rnic"
    if "bridge" in c:
        return "bridge"
    if "non-volatile" in c:
        return "nvme"
    return "unknown"


def parse(text: str) -> list[LspciDevice]:
    """Split ``lspci -vvv`` text into device blocks holding the registers this module reads."""
    devices: list[LspciDevice] = []
    cur: LspciDevice | None = None
    section = ""
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        brief = _BRIEF.match(line)
        if brief:
            bdf = brief["bdf"] if brief["bdf"].count(":") == 2 else "0000:" + brief["bdf"]
            dev = LspciDevice(bdf.lower(), "unknown", "", n, section=section, condensed=True)
            for f in _BRIEF_FIELD.finditer(brief["rest"]):
                dev.registers[f["key"]] = f["val"].strip()
                dev.register_lines[f["key"]] = n
            devices.append(dev)
            cur = None
            continue
        if line and not raw[:1].isspace() and not _HEADER.match(line):
            section = line.strip()[:80]
        h = _HEADER.match(line)
        if h:
            bdf = h["bdf"] if h["bdf"].count(":") == 2 else "0000:" + h["bdf"]
            cur = LspciDevice(bdf.lower(), _class_of(h["cls"], h["desc"]), h["desc"], n)
            devices.append(cur)
            continue
        f = _FIELD.match(line)
        if f:
            if cur is None:
                cur = LspciDevice(f"device at line {n}", "unknown", "", n)
                devices.append(cur)
            cur.registers[f["key"]] = f["val"]
            cur.register_lines[f["key"]] = n
            continue
        b = _BUS.match(line)
        if b and cur is not None:
            cur.secondary_bus = cur.location[:5] + b["sec"]
            continue
        if not line or not raw[:1].isspace():
            cur = None
    return [d for d in devices if d.registers]


def flags(value: str) -> dict[str, bool]:
    """``"SrcValid+ ReqRedir-"`` -> ``{"SrcValid": True, "ReqRedir": False}``."""
    return {m["name"]: m["on"] == "+" for m in _FLAG.finditer(value)}


def link_reading(dev: LspciDevice) -> LinkReading | None:
    """The device's link as a :class:`LinkReading`, or ``None`` without LnkSta."""
    sta = dev.registers.get("LnkSta")
    if sta is None:
        return None
    sp, wd = _SPEED.search(sta), _WIDTH.search(sta)
    cap = dev.registers.get("LnkCap", "")
    csp, cwd = _SPEED.search(cap), _WIDTH.search(cap)
    cap2 = _SPEEDS.search(dev.registers.get("LnkCap2", ""))
    tgt = _TARGET.search(dev.registers.get("LnkCtl2", ""))
    max_speed = [float(m) for m in (csp and csp["s"], cap2 and cap2["max"]) if m]
    return LinkReading(
        location=dev.location,
        speed_gtps=float(sp["s"]) if sp else None,
        width=int(wd["w"]) if wd else None,
        max_speed_gtps=min(max_speed) if max_speed else None,
        max_width=int(cwd["w"]) if cwd else None,
        target_speed_gtps=float(tgt["t"]) if tgt else None,
        device_class=dev.device_class,
        speed_marked_downgraded=bool(sp and sp["down"]),
        width_marked_downgraded=bool(wd and wd["down"]),
        line=dev.register_lines["LnkSta"],
    )


def _acs(dev: LspciDevice) -> Finding | None:
    ctl = dev.registers.get("ACSCtl")
    if ctl is None:
        return None
    fl = flags(ctl)
    on = [k for k in ACS_REDIRECT_FLAGS if fl.get(k)]
    if not on:
        return None
    return Finding(
        "acs_redirect",
        dev.location,
        "error",
        f"ACS {', '.join(on)} enabled on a PCIe switch/bridge port: peer-to-peer (GPUDirect RDMA) traffic "
        "is redirected through the CPU root complex, raising latency and halving bandwidth (Hostping #7). "
        "Clear ACSCtl (setpci) on the PCIe switch downstream ports, and again after every reboot, "
        "or disable ACS in the BIOS.",
        {"ACSCtl": fl, "enabled_redirects": on},
        "config",
        str(dev.register_lines["ACSCtl"]),
    )


def _ats(dev: LspciDevice) -> Finding | None:
    ctl = dev.registers.get("ATSCtl")
    if ctl is None or flags(ctl).get("Enable", True):
        return None
    return Finding(
        "ats_disabled",
        dev.location,
        "warning",
        "ATS is disabled: with an IOMMU (virtualised hosts) every GPUDirect RDMA packet is translated at "
        "the CPU root complex, adding latency (Hostping #8). Enable ATS on the RNIC/GPU and the IOMMU.",
        {"ATSCtl": ctl, "device_class": dev.device_class},
        "config",
        str(dev.register_lines["ATSCtl"]),
    )


def _parent(devices: list[LspciDevice], dev: LspciDevice) -> tuple[LspciDevice | None, bool]:
    """The port above ``dev`` and whether that is inferred. Full ``lspci -vvv`` names it (``secondary=``);
    in condensed lines it is inferred only when exactly one listed device of the same section and PCI
    domain sits on a lower bus (one root port per domain, as on Grace/GB10 platforms)."""
    bus = dev.location[:7]
    named = next((d for d in devices if d.secondary_bus and d.secondary_bus == bus), None)
    if named is not None or not dev.condensed:
        return named, False
    above = [
        d
        for d in devices
        if d.condensed
        and d.section == dev.section
        and d.location[:4] == dev.location[:4]
        and int(d.location[5:7], 16) < int(dev.location[5:7], 16)
    ]
    return (above[0], True) if len(above) == 1 else (None, False)


def _name_limiting_hop(devices: list[LspciDevice], dev: LspciDevice, f: Finding) -> Finding:
    """Say which hop limits a width drop: the upstream port when it is wired narrower, and which
    functions of the same device share the link."""
    ev = dict(f.evidence)
    text, cause = f.explanation, f.cause
    reading = link_reading(dev)
    if reading is None or "width" not in ev.get("downgraded", []):
        return f
    siblings = sorted(
        d.location
        for d in devices
        if d.location[:-1] == dev.location[:-1]
        and d.section == dev.section
        and (r := link_reading(d)) is not None
        and (r.speed_gtps, r.width) == (reading.speed_gtps, reading.width)
    )
    if len(siblings) > 1:
        ev["same_link_functions"] = siblings
        text += f" All functions of the device ({', '.join(siblings)}) share this link and show the same width."
    parent, inferred = _parent(devices, dev)
    pcap = link_reading(parent) if parent else None
    if parent and pcap and pcap.max_width and reading.width and pcap.max_width <= reading.width:
        ev["limiting_hop"] = parent.location
        ev["limiting_hop_inferred"] = inferred
        cause = "config"
        text = (
            f"PCIe link width x{reading.width} below the card's x{reading.max_width}: the upstream port "
            f"{parent.location}{' (the only port listed above it)' if inferred else ''} is wired "
            f"x{pcap.max_width} (its LnkCap). A platform/slot limit, not a bad card or cable: use a slot wired "
            "for the full width."
        )
    elif "speed" not in ev["downgraded"]:
        ev["limiting_hop"] = "upstream port (not in this capture)"
        text += " The upstream port is not in this capture: compare its LnkCap (`lspci -vvv -s <port>`)."
    if ev.get("section"):
        text += f" ({ev['section']})"
    return Finding(f.kind, f.location, f.severity, text, ev, cause, f.source)


def findings(devices: list[LspciDevice]) -> list[Finding]:
    """Every rule of this module over parsed devices.

    A bridge's link is judged against the lesser capability of both ends, and reported by the
    device below it when that device shows the same link (one finding per link).
    """
    out: list[Finding] = []
    for dev in devices:
        reading = link_reading(dev)
        below = [d for d in devices if dev.secondary_bus and d.location.startswith(dev.secondary_bus + ":")]
        partners = [r for r in map(link_reading, below) if r is not None]
        if reading is not None and partners:
            reading = limited_by_partner(reading, partners)
            if any((p.speed_gtps, p.width) == (reading.speed_gtps, reading.width) for p in partners):
                reading = None  # the device below reports this link
        link = assess_link(reading) if reading else None
        if link is not None and link.kind == "pcie_downgrade":
            if dev.section:
                link = Finding(
                    link.kind,
                    link.location,
                    link.severity,
                    link.explanation,
                    dict(link.evidence, section=dev.section),
                    link.cause,
                    link.source,
                )
            link = _name_limiting_hop(devices, dev, link)
        for f in (link, _acs(dev), _ats(dev)):
            if f is not None:
                out.append(f)
    return out


def detect(text: str) -> bool:
    """True when the text holds at least one lspci register line (full or condensed) this module reads."""
    return any(_FIELD.match(line) or _BRIEF.match(line) for line in text.splitlines())
