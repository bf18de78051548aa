"""Kernel log parser: PCIe AER reports and NVIDIA Xid events (``dmesg``, ``journalctl -k``).

Rules (Hostping failures #2 GPU PCIe link and #5 CPU root port, seen from the kernel):

- a GPU Xid 79 ("fallen off the bus") is charged to the PCIe link from the root/switch
  port that reported AER errors for it: ``gpu_pcie_link_failure`` (critical; field case 14);
- an uncorrected AER error without an Xid: ``pcie_link_failure`` at the reporting port;
- corrected errors only (Replay Timer Timeout, Bad TLP/DLLP, Receiver Error):
  ``pcie_link_errors`` (warning: signal integrity, watch the rate);
- other hardware Xids (48, 63, 64, 74, 79, 92, 94, 95, 119, 120) name the GPU.

The port of an Xid is found from, in order: a device line naming the GPU after the
port's ``broadcast error_detected``; the port with an uncorrected error in the
60 s before the Xid; else the GPU alone is named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

_BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_TS = re.compile(r"^\[\s*(?P<ts>\d+\.\d+)\]")
_DEV = re.compile(rf"(?P<drv>[\w-]+) (?P<bdf>{_BDF}):\s+(?P<msg>.*)$")
_SEVERITY = re.compile(r"PCIe Bus Error: severity=(?P<sev>[^,]+), type=(?P<type>[^,]+)")
_BIT = re.compile(r"^\s*\[\s*(?P<bit>\d+)\]\s+(?P<name>.+?)\s*(?:\(First\))?\s*$")
_XID = re.compile(r"NVRM: Xid \(PCI:(?P<bus>[0-9a-fA-F:]+)\): (?P<xid>\d+),\s*(?P<msg>.*)$")

#: Hardware Xids (NVIDIA "Xid Errors" table): code -> (what, severity).
HARDWARE_XIDS = {
    48: ("double-bit ECC error", "critical"),
    63: ("ECC page retirement / row remapping event", "warning"),
    64: ("ECC page retirement / row remapping failure", "error"),
    74: ("NVLink error", "error"),
    79: ("GPU has fallen off the bus", "critical"),
    92: ("high single-bit ECC error rate", "warning"),
    94: ("contained ECC error", "error"),
    95: ("uncontained ECC error", "critical"),
    119: ("GSP RPC timeout", "error"),
    120: ("GSP error", "error"),
}


@dataclass
class AerPort:
    """AER reports of one port: error names counted per severity, and devices its broadcast reached."""

    bdf: str
    corrected: dict[str, int] = field(default_factory=dict)
    uncorrected: dict[str, int] = field(default_factory=dict)
    fatal: bool = False
    first_line: int = 0
    last_uncorrected_ts: float | None = None
    affected: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` line; ``gpu`` is the PCI function ``DDDD:BB:DD.0``."""

    gpu: str
    xid: int
    message: str
    ts: float | None
    line: int


@dataclass
class KernelLog:
    aer: dict[str, AerPort] = field(default_factory=dict)
    xids: list[XidEvent] = field(default_factory=list)


def _gpu_bdf(bus: str) -> str:
    parts = bus.lower().split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    return ":".join(parts[:3]) + ".0" if "." not in parts[-1] else ":".join(parts)


def parse(text: str) -> KernelLog:
    """Collect AER reports per reporting port and Xid events, with line numbers and kernel timestamps."""
    log = KernelLog()
    sev: dict[str, str] = {}
    broadcasting: AerPort | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        ts_m = _TS.search(line)
        ts = float(ts_m["ts"]) if ts_m else None
        x = _XID.search(line)
        if x:
            log.xids.append(XidEvent(_gpu_bdf(x["bus"]), int(x["xid"]), x["msg"].strip(), ts, n))
            continue
        d = _DEV.search(line)
        if d is None:
            continue
        bdf, msg = d["bdf"].lower(), d["msg"]
        if "AER:" in msg or "PCIe Bus Error" in msg:
            port = log.aer.setdefault(bdf, AerPort(bdf, first_line=n))
            s = _SEVERITY.search(msg)
            if s:
                sev[bdf] = s["sev"].strip()
                if sev[bdf] != "Corrected":
                    port.last_uncorrected_ts = ts
                    port.fatal = port.fatal or "Fatal" in sev[bdf]
            continue
        if "broadcast error_detected" in msg and bdf in log.aer:
            broadcasting = log.aer[bdf]
            continue
        b = _BIT.match(msg)
        if b and bdf in log.aer:
            port = log.aer[bdf]
            bucket = port.corrected if sev.get(bdf, "Corrected") == "Corrected" else port.uncorrected
            bucket[b["name"]] = bucket.get(b["name"], 0) + 1
            continue
        if broadcasting is not None and bdf not in log.aer and bdf not in broadcasting.affected:
            broadcasting.affected.append(bdf)
    return log


def _port_of(log: KernelLog, x: XidEvent) -> AerPort | None:
    bus = x.gpu.rsplit(".", 1)[0]
    for port in log.aer.values():
        if any(a.rsplit(".", 1)[0] == bus for a in port.affected):
            return port
    recent = [
        p
        for p in log.aer.values()
        if p.last_uncorrected_ts is not None and x.ts is not None and 0 <= x.ts - p.last_uncorrected_ts <= 60
    ]
    return max(recent, key=lambda p: p.last_uncorrected_ts or 0.0) if recent else None


def findings(log: KernelLog) -> list[Finding]:
    """Apply the module's rules; each AER port is reported once, inside the Xid finding when it has one."""
    out: list[Finding] = []
    explained: set[str] = set()
    for x in log.xids:
        if x.xid not in HARDWARE_XIDS:
            continue
        what, severity = HARDWARE_XIDS[x.xid]
        port = _port_of(log, x) if x.xid == 79 else None
        ev: dict[str, object] = {"xid": x.xid, "xid_message": x.message, "gpu": x.gpu}
        if port is not None:
            explained.add(port.bdf)
            ev.update(port=port.bdf, aer_corrected=port.corrected, aer_uncorrected=port.uncorrected)
            chain = []
            if port.corrected:
                chain.append("corrected " + ", ".join(f"{k} x{v}" for k, v in port.corrected.items()))
            if port.uncorrected:
                chain.append(("fatal " if port.fatal else "uncorrected ") + ", ".join(port.uncorrected))
            out.append(
                Finding(
                    "gpu_pcie_link_failure",
                    f"{port.bdf}->{x.gpu}",
                    "critical",
                    f"GPU PCIe link failure: port {port.bdf} logged "
                    + " then ".join(chain)
                    + f", and GPU {x.gpu} reported Xid {x.xid} ({what}). Hardware fault on the link "
                    "(GPU, riser/slot or port): drain the host, reseat or replace the GPU.",
                    ev,
                    "failure",
                    str(min(port.first_line, x.line)),
                )
            )
        else:
            kind = "gpu_pcie_link_failure" if x.xid == 79 else "gpu_hardware"
            out.append(
                Finding(
                    kind,
                    x.gpu,
                    severity,
                    f"GPU {x.gpu} reported Xid {x.xid} ({what}).",
                    ev,
                    "failure",
                    str(x.line),
                )
            )
    for port in log.aer.values():
        if port.bdf in explained:
            continue
        ev = {"aer_corrected": port.corrected, "aer_uncorrected": port.uncorrected, "affected": port.affected}
        if port.uncorrected or port.last_uncorrected_ts is not None:
            out.append(
                Finding(
                    "pcie_link_failure",
                    port.bdf,
                    "critical" if port.fatal else "error",
                    f"Uncorrected PCIe error at {port.bdf} ({', '.join(port.uncorrected) or 'unknown'}); "
                    "devices below it may be lost. Drain the host and check the device, slot and root port.",
                    ev,
                    "failure",
                    str(port.first_line),
                )
            )
        elif port.corrected:
            out.append(
                Finding(
                    "pcie_link_errors",
                    port.bdf,
                    "warning",
                    f"Corrected PCIe errors at {port.bdf} ("
                    + ", ".join(f"{k} x{v}" for k, v in port.corrected.items())
                    + "): link signal integrity; a rising rate precedes link failure. Watch aer_dev_correctable.",
                    ev,
                    "failure",
                    str(port.first_line),
                )
            )
    return out


def detect(text: str) -> bool:
    """True when the text holds an AER report or an Xid line."""
    return "PCIe Bus Error" in text or "AER:" in text or bool(_XID.search(text))
