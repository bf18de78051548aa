"""PCIe link state from sysfs, walked from every device up to its root port.

Reads ``current_link_speed``, ``current_link_width``, ``max_link_speed``,
``max_link_width`` and ``class`` of every device under ``/sys/bus/pci/devices``
(or the ``/sys/devices/pci*`` tree of a capture). The parent chain comes from the
device directory's real path (``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...``).

Why walk (field case 13): a GPU function behind the card's own PCIe switch reads
32 GT/s x16 while the switch upstream port facing the slot runs 16 GT/s x8. The
effective link of an endpoint is the narrowest hop (lowest Gb/s) on its path to
the root port (Hostping §3: failures #1/#2 are PCIe downgrades anywhere on that path).
AMD's ``pp_dpm_pcie`` (the driver's link levels, ``*`` = active) is attached as evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from producers.hostping.findings import Finding
from producers.hostping.pcie_link import LinkReading, assess_link, limited_by_partner, link_gbps
from producers.hostping.sysfs import SysfsSnapshot

BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_SPEED = re.compile(r"([\d.]+)\s*GT/s")
_DPM = re.compile(r"^(?P<lvl>\d+):\s*(?P<s>[\d.]+)GT/s,\s*x(?P<w>\d+)\s+\S+(?P<active>\s*\*)?$")
PCI_DEVICES = "/sys/bus/pci/devices"


@dataclass(frozen=True)
class PcieHop:
    """One device's link as sysfs reports it; ``chain`` is its ancestors, root port first."""

    bdf: str
    path: str
    device_class: str
    reading: LinkReading
    chain: tuple[str, ...]


@dataclass(frozen=True)
class EffectiveLink:
    """The narrowest hop on an endpoint's path to the root port (speed GT/s, width lanes, Gb/s)."""

    endpoint: str
    at: str
    speed_gtps: float
    width: int
    gbps: float


def _speed(v: str | None) -> float | None:
    m = _SPEED.search(v or "")
    return float(m.group(1)) if m else None


def _width(v: str | None) -> int | None:
    try:
        w = int((v or "").strip())
    except ValueError:
        return None
    return w if 0 < w <= 32 else None


def class_of(code: str | None) -> str:
    """PCI class code (``0x030000``) -> ``gpu``, ``rnic``, ``bridge``, ``nvme`` or ``unknown``."""
    c = (code or "").lower().removeprefix("0x")
    if c.startswith(("0300", "0302", "0380")):
        return "gpu"
    if c.startswith(("0200", "0207")):
        return "rnic"
    if c.startswith("0604"):
        return "bridge"
    if c.startswith("0108"):
        return "nvme"
    return "unknown"


def device_dirs(snap: SysfsSnapshot) -> dict[str, str]:
    dirs: dict[str, str] = {}
    for name in snap.listdir(PCI_DEVICES):
        if BDF.match(name):
            dirs[name.lower()] = snap.realpath(f"{PCI_DEVICES}/{name}")
    for key in snap.files:
        if key.startswith("/sys/devices/pci"):
            parts = key.split("/")
            for i, part in enumerate(parts):
                if BDF.match(part):
                    dirs.setdefault(part.lower(), "/".join(parts[: i + 1]))
    return dirs


def read_hops(snap: SysfsSnapshot) -> dict[str, PcieHop]:
    """Every PCI device with at least one link file, keyed by lower-case BDF."""
    hops: dict[str, PcieHop] = {}
    for bdf, path in sorted(device_dirs(snap).items()):
        alias = f"{PCI_DEVICES}/{bdf}"

        def get(name: str, path: str = path, alias: str = alias) -> str | None:
            v = snap.read(f"{path}/{name}")
            return v if v is not None else snap.read(f"{alias}/{name}")

        speed, width = _speed(get("current_link_speed")), _width(get("current_link_width"))
        if speed is None and width is None:
            continue
        cls = class_of(get("class"))
        line = snap.lines.get(f"{alias}/current_link_speed") or snap.lines.get(f"{path}/current_link_speed", 0)
        reading = LinkReading(
            location=bdf,
            speed_gtps=speed,
            width=width,
            max_speed_gtps=_speed(get("max_link_speed")),
            max_width=_width(get("max_link_width")),
            device_class=cls,
            line=line,
        )
        chain = tuple(p.lower() for p in path.split("/") if BDF.match(p) and p.lower() != bdf)
        hops[bdf] = PcieHop(bdf, path, cls, reading, chain)
    return hops


def effective_link(hops: dict[str, PcieHop], bdf: str) -> EffectiveLink:
    """Narrowest hop (lowest current Gb/s) on the path of ``bdf`` up to the root port.

    Raises:
        KeyError: ``bdf`` has no link files in the snapshot.
    """
    if bdf not in hops:
        raise KeyError(f"{bdf} has no current_link_speed/width in this sysfs snapshot")
    best: EffectiveLink | None = None
    for hop_bdf in (bdf, *reversed(hops[bdf].chain)):
        hop = hops.get(hop_bdf)
        if hop is None or hop.reading.speed_gtps is None or hop.reading.width is None:
            continue
        gbps = link_gbps(hop.reading.speed_gtps, hop.reading.width)
        if best is None or gbps < best.gbps:
            best = EffectiveLink(bdf, hop_bdf, hop.reading.speed_gtps, hop.reading.width, round(gbps, 1))
    if best is None:
        raise KeyError(f"{bdf}: no hop on its path has both current_link_speed and current_link_width")
    return best


def dpm_levels(text: str | None) -> list[dict[str, object]]:
    """AMD ``pp_dpm_pcie`` lines -> ``[{"level", "speed_gtps", "width", "active"}]``."""
    out = []
    for line in (text or "").splitlines():
        m = _DPM.match(line.strip())
        if m:
            out.append(
                {
                    "level": int(m["lvl"]),
                    "speed_gtps": float(m["s"]),
                    "width": int(m["w"]),
                    "active": bool(m["active"]),
                }
            )
    return out


def _reported_by_child(hops: dict[str, PcieHop], hop: PcieHop) -> bool:
    """A root/downstream port reads the link to its one child; that child reports the link."""
    children = [h for h in hops.values() if h.chain and h.chain[-1] == hop.bdf]
    return len(children) == 1 and (children[0].reading.speed_gtps, children[0].reading.width) == (
        hop.reading.speed_gtps,
        hop.reading.width,
    )


def findings(snap: SysfsSnapshot) -> list[Finding]:
    """Judge every hop; a downgraded hop names the endpoints whose effective link it limits."""
    hops = read_hops(snap)
    dpm = {k: dpm_levels(v) for k, v in snap.files.items() if k.endswith("/pp_dpm_pcie")}
    out: list[Finding] = []
    for bdf, hop in hops.items():
        children = [h.reading for h in hops.values() if h.chain and h.chain[-1] == bdf]
        f = assess_link(limited_by_partner(hop.reading, children))
        if f is None or _reported_by_child(hops, hop):
            continue
        behind = sorted(b for b, h in hops.items() if bdf in h.chain)
        ev = dict(f.evidence, sysfs_path=hop.path, path_to_root=list(hop.chain))
        if hop.chain:
            ev["link"] = f"{hop.chain[-1]}->{bdf}"
        text = f.explanation
        if behind and f.is_problem:
            ev["limits_endpoints"] = behind
            text += (
                f" Every device behind it ({', '.join(behind)}) is limited to "
                f"{hop.reading.speed_gtps:g} GT/s x{hop.reading.width}, whatever its own link files say."
            )
        if dpm:
            ev["pp_dpm_pcie"] = dpm
        out.append(type(f)(f.kind, f.location, f.severity, text, ev, f.cause, f.source))
    return out


def detect(snap: SysfsSnapshot) -> bool:
    """True when the snapshot holds any PCIe link file."""
    return any(k.endswith(("current_link_speed", "current_link_width")) for k in snap.files) or bool(
        snap.root and snap.listdir(PCI_DEVICES)
    )
