"""Kernel log collector: PCIe AER, NVIDIA GPU loss and Xid events, mlx5 health, port modules, link flaps.

Reads ``dmesg`` / ``journalctl -k``.

Rules (Hostping failures #2 GPU PCIe link and #5 CPU root port, seen from the kernel):

- a GPU Xid 79 ("fallen off the bus") is charged to the PCIe link from the root/switch
  port that reported AER errors for it: ``gpu_pcie_link_failure`` (critical; field case 14);
- an uncorrected AER error without an Xid: ``pcie_link_failure`` at the reporting port;
- corrected errors only (Replay Timer Timeout, Bad TLP/DLLP, Receiver Error):
  ``pcie_link_errors`` (warning: signal integrity, watch the rate);
- other hardware Xids (48, 61-64, 74, 79, 92, 94, 95, 119, 120, 122, 123, 140) name the GPU;
  application Xids (13, 31, 43, 45) are informational;
- every form of a GPU lost from the bus is ``gpu_pcie_link_failure`` (critical), also the
  driver's multi-line ``NVRM: The NVIDIA GPU <bdf> ... has fallen off the bus`` without any
  Xid line (field case 22); the driver-load banner after it is not a second fault;
- AER findings list the devices below the reporting port (``error received: <bdf>`` and the
  devices named after ``broadcast error_detected``) as ``affected``;
- mlx5 ``Port module event[error]`` (power budget exceeded, cable/transceiver errors) ->
  ``transceiver`` at the port's PCI function and module (field case 25);
- mlx5 health (``health compromised``, ``assert_var``, firmware syndrome, command timeouts)
  -> ``rnic`` (subkind ``firmware_health`` / ``command_timeout``); a failed probe/load of the
  adapter -> ``rnic`` (subkind ``init_failed``);
- ``<netdev>: Link down`` more than once -> ``rnic`` (subkind ``port_flapping``); a link left
  down -> ``rnic`` (subkind ``link_down``).

The port of an Xid is found from, in order: a device line naming the GPU after the
port's ``broadcast error_detected``; the port with an uncorrected error in the
60 s before the Xid; else the GPU alone is named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

NAME = "dmesg"
READS = "kernel log (dmesg, journalctl -k): AER, NVRM/Xid, mlx5_core health and port module events, link up/down"

_BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_TS = re.compile(r"^\[\s*(?P<ts>\d+\.\d+)\]")
_DEV = re.compile(rf"(?P<drv>[\w-]+) (?P<bdf>{_BDF}):\s+(?P<msg>.*)$")
_SEVERITY = re.compile(r"PCIe Bus Error: severity=(?P<sev>[^,]+), type=(?P<type>[^,]+)")
_BIT = re.compile(r"^\s*\[\s*(?P<bit>\d+)\]\s+(?P<name>.+?)\s*(?:\(First\))?\s*$")
_XID = re.compile(r"NVRM: Xid \(PCI:(?P<bus>[0-9a-fA-F:]+)\): (?P<xid>\d+),\s*(?P<msg>.*)$")
_NVRM_GPU = re.compile(
    rf"NVRM: (?:The NVIDIA GPU |GPU )(?:at PCI:)?(?P<bdf>{_BDF}|[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{2}}:[0-9a-fA-F]{{2}})"
)
_OFF_BUS = re.compile(r"fallen off the bus", re.I)
_RM_INIT = re.compile(r"NVRM: .*RmInitAdapter failed", re.I)
_RECEIVED = re.compile(rf"error received: (?:(?P<bdf>{_BDF})|id=(?P<id>[0-9a-fA-F]{{4}}))")
_MODULE = re.compile(r"Port module event(?:\[(?P<lvl>\w+)\])?: module (?P<mod>\d+), (?P<what>[^,]+)(?:, (?P<why>.+))?$")
_HEALTH = re.compile(
    r"health compromised|assert_var|fw_syndrome|synd 0x[0-9a-f]+:|health recovery|Will cause a leak of a command"
    r"|internal error|fatal error",
    re.I,
)
_INIT_FAIL = re.compile(r"mlx5_load_one failed|mlx5_init_one failed|handle_hca_cap failed|init_one failed", re.I)
_PROBE_FAIL = re.compile(rf"(?P<drv>mlx5_core|mlx5_ib): probe of (?P<bdf>{_BDF}) failed with error (?P<err>-?\d+)")
_LINK = re.compile(
    rf"(?P<drv>[\w-]+) (?P<bdf>{_BDF}) (?P<nd>[\w.-]+): (?:[\w-]+: [\w.-]+ )?(?:NIC )?Link (?:is )?(?P<st>up|down)",
    re.I,
)

#: Hardware Xids (NVIDIA "Xid Errors" table): code -> (what, severity).
HARDWARE_XIDS = {
    48: ("double-bit ECC error", "critical"),
    61: ("internal micro-controller breakpoint/warning", "error"),
    62: ("internal micro-controller halt", "error"),
    63: ("ECC page retirement / row remapping event", "warning"),
    64: ("ECC page retirement / row remapping failure", "error"),
    74: ("NVLink error", "error"),
    79: ("GPU has fallen off the bus", "critical"),
    92: ("high single-bit ECC error rate", "warning"),
    94: ("contained ECC error", "error"),
    95: ("uncontained ECC error", "critical"),
    119: ("GSP RPC timeout", "error"),
    120: ("GSP error", "error"),
    122: ("SPI PMU RPC read failure", "error"),
    123: ("SPI PMU RPC write failure", "error"),
    140: ("unrecovered ECC error", "critical"),
}
#: Xids raised by application faults (bad kernel, memory access); not hardware.
APPLICATION_XIDS = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup (process killed)",
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


@dataclass(frozen=True)
class DeviceEvent:
    """A non-AER kernel line about one PCI function: ``what`` is ``gpu_lost``, ``gpu_init_failed``,
    ``module``, ``health`` or ``link``; ``detail`` the message, ``extra`` module number or netdev."""

    bdf: str
    what: str
    detail: str
    extra: str
    ts: float | None
    line: int


@dataclass
class KernelLog:
    aer: dict[str, AerPort] = field(default_factory=dict)
    xids: list[XidEvent] = field(default_factory=list)
    events: list[DeviceEvent] = field(default_factory=list)


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
    lines = text.splitlines()
    nvrm_gpu: tuple[str, int] | None = None
    for n, line in enumerate(lines, start=1):
        ts_m = _TS.search(line)
        ts = float(ts_m["ts"]) if ts_m else None
        x = _XID.search(line)
        if x:
            log.xids.append(XidEvent(_gpu_bdf(x["bus"]), int(x["xid"]), x["msg"].strip(), ts, n))
            continue
        g = _NVRM_GPU.search(line)
        if g:
            nvrm_gpu = (_gpu_bdf(g["bdf"]), n)
        if "NVRM" in line and _OFF_BUS.search(line) and nvrm_gpu and n - nvrm_gpu[1] <= 3:
            log.events.append(DeviceEvent(nvrm_gpu[0], "gpu_lost", line.strip(), "", ts, nvrm_gpu[1]))
            nvrm_gpu = None
            continue
        if _RM_INIT.search(line) and nvrm_gpu:
            log.events.append(DeviceEvent(nvrm_gpu[0], "gpu_init_failed", line.strip(), "", ts, n))
            continue
        pf = _PROBE_FAIL.search(line)
        if pf:
            log.events.append(DeviceEvent(pf["bdf"].lower(), "init_failed", line.strip(), pf["err"], ts, n))
            continue
        lk = _LINK.search(line)
        if lk:
            log.events.append(DeviceEvent(lk["bdf"].lower(), "link", lk["st"].lower(), lk["nd"], ts, n))
            continue
        d = _DEV.search(line)
        if d is None:
            continue
        bdf, msg = d["bdf"].lower(), d["msg"]
        mod = _MODULE.search(msg)
        if mod:
            what = ", ".join(p for p in (mod["what"], mod["why"]) if p).strip()
            level = (mod["lvl"] or "").lower()
            log.events.append(DeviceEvent(bdf, "module", f"{level}|{what}", mod["mod"], ts, n))
            continue
        if d["drv"].startswith("mlx5") and _INIT_FAIL.search(msg):
            log.events.append(DeviceEvent(bdf, "init_failed", msg.strip(), "", ts, n))
            continue
        if d["drv"].startswith("mlx5") and _HEALTH.search(msg):
            log.events.append(DeviceEvent(bdf, "health", msg.strip(), "", ts, n))
            continue
        if "AER:" in msg or "PCIe Bus Error" in msg:
            port = log.aer.setdefault(bdf, AerPort(bdf, first_line=n))
            r = _RECEIVED.search(msg)
            if r and r["bdf"] and r["bdf"].lower() != bdf and r["bdf"].lower() not in port.affected:
                port.affected.append(r["bdf"].lower())
            s = _SEVERITY.search(msg)
            if s:
                sev[bdf] = s["sev"].strip()
                if sev[bdf] != "Corrected":
                    port.last_uncorrected_ts = ts
                    port.fatal = port.fatal or "(Fatal)" in sev[bdf]
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


def _xid_findings(log: KernelLog, explained: set[str]) -> list[Finding]:
    out: list[Finding] = []
    for x in log.xids:
        if x.xid in APPLICATION_XIDS:
            out.append(
                Finding(
                    "gpu_application_error",
                    x.gpu,
                    "info",
                    f"GPU {x.gpu} reported Xid {x.xid} ({APPLICATION_XIDS[x.xid]}): raised by the application "
                    "(bad kernel or memory access), not by the hardware or the fabric.",
                    {"xid": x.xid, "xid_message": x.message, "gpu": x.gpu},
                    "",
                    str(x.line),
                )
            )
            continue
        if x.xid not in HARDWARE_XIDS:
            continue
        what, severity = HARDWARE_XIDS[x.xid]
        port = _port_of(log, x) if x.xid == 79 else None
        ev: dict[str, object] = {"xid": x.xid, "xid_message": x.message, "gpu": x.gpu}
        if port is not None:
            explained.add(port.bdf)
            ev.update(
                port=port.bdf, aer_corrected=port.corrected, aer_uncorrected=port.uncorrected, affected=port.affected
            )
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
                    kind, x.gpu, severity, f"GPU {x.gpu} reported Xid {x.xid} ({what}).", ev, "failure", str(x.line)
                )
            )
    return out


def _gpu_event_findings(log: KernelLog) -> list[Finding]:
    """GPU lost without an Xid line (the driver's multi-line message), and adapter init failures."""
    out = []
    xid79 = {x.gpu for x in log.xids if x.xid == 79}
    seen: set[tuple[str, str]] = set()
    for e in log.events:
        if e.what not in ("gpu_lost", "gpu_init_failed") or (e.bdf, e.what) in seen:
            continue
        seen.add((e.bdf, e.what))
        if e.what == "gpu_lost" and e.bdf not in xid79:
            out.append(
                Finding(
                    "gpu_pcie_link_failure",
                    e.bdf,
                    "critical",
                    f"GPU {e.bdf} has fallen off the bus and does not respond (the driver's message, equivalent "
                    "to Xid 79, printed without an Xid line). Hardware or PCIe link loss: drain the host, then "
                    "reset/reseat the GPU or RMA it. The driver-load lines after it are not a second fault.",
                    {"equivalent_xid": 79, "message": e.detail},
                    "failure",
                    str(e.line),
                )
            )
        elif e.what == "gpu_init_failed" and not any(f.location == e.bdf for f in out):
            out.append(
                Finding(
                    "gpu_hardware",
                    e.bdf,
                    "error",
                    f"The NVIDIA driver could not initialise GPU {e.bdf} (RmInitAdapter failed): the GPU is unusable "
                    "until reset; check for an earlier Xid/AER and the GPU's power and seating.",
                    {"message": e.detail},
                    "failure",
                    str(e.line),
                )
            )
    return out


def _rnic_event_findings(log: KernelLog) -> list[Finding]:
    """mlx5 port module events, firmware health, and link flaps."""
    out = []
    modules: dict[tuple[str, str], list[DeviceEvent]] = {}
    health: dict[str, list[DeviceEvent]] = {}
    links: dict[tuple[str, str], list[DeviceEvent]] = {}
    for e in log.events:
        if e.what == "module":
            modules.setdefault((e.bdf, e.extra), []).append(e)
        elif e.what in ("health", "init_failed"):
            health.setdefault(e.bdf, []).append(e)
        elif e.what == "link":
            links.setdefault((e.bdf, e.extra), []).append(e)
    for (bdf, mod), evs in sorted(modules.items()):
        errors = [e for e in evs if e.detail.startswith("error|")]
        if not errors:
            continue
        what = errors[0].detail.split("|", 1)[1]
        out.append(
            Finding(
                "transceiver",
                f"{bdf} module {mod}",
                "error",
                f"Port module event on {bdf} module {mod}: {what}. The port refuses or cannot drive the "
                "cable/transceiver"
                + (
                    " (power budget exceeded: an unsupported or over-budget optic, often fixed by a firmware "
                    "update or a supported module; not a broken fiber)"
                    if "power budget" in what.lower()
                    else ""
                )
                + ". Expect CRC/symbol errors or a down link on this port.",
                {"module": int(mod), "events": [e.detail.split("|", 1)[1] for e in errors]},
                "failure",
                str(errors[0].line),
            )
        )
    for bdf, evs in sorted(health.items()):
        init = [e for e in evs if e.what == "init_failed"]
        if init:
            out.append(
                Finding(
                    "rnic",
                    bdf,
                    "error",
                    f"The mlx5 driver could not initialise the RNIC at {bdf} ({init[0].detail}): no netdev and no "
                    "RDMA device on it. Usually a driver/firmware mismatch (update one to match the other) or a "
                    "faulty adapter; check `mlxfwmanager` and the driver version.",
                    {"subkind": "init_failed", "lines": [e.detail for e in init[:5]]},
                    "failure",
                    str(init[0].line),
                )
            )
            evs = [e for e in evs if e.what != "init_failed"]
            if not evs:
                continue
        timeouts = [e for e in evs if "leak of a command" in e.detail]
        fatal = [e for e in evs if e not in timeouts]
        sub, sev = ("firmware_health", "critical") if fatal else ("command_timeout", "error")
        out.append(
            Finding(
                "rnic",
                bdf,
                sev,
                f"mlx5 at {bdf} reported "
                + ("firmware health failure (" + fatal[0].detail + ")" if fatal else "firmware command timeouts")
                + ": the adapter's firmware is not responding correctly while the link may still look up. "
                "Collect the health buffer (devlink health), then reset the adapter or update its firmware; "
                "drain the host if it recurs.",
                {"subkind": sub, "lines": [e.detail for e in evs[:5]], "count": len(evs)},
                "failure",
                str(evs[0].line),
            )
        )
    for (bdf, nd), evs in sorted(links.items()):
        downs = [e for e in evs if e.detail == "down"]
        ups = [e for e in evs if e.detail == "up"]
        # every "Link up" after the first implies a down in between, even when the down line was filtered out
        transitions = max(len(downs), len(ups) - 1)
        if transitions >= 2 or (downs and evs[-1].detail == "down"):
            flapping = transitions >= 2
            out.append(
                Finding(
                    "rnic",
                    f"{nd} ({bdf})",
                    "warning" if flapping and evs[-1].detail == "up" else "error",
                    f"{nd} ({bdf}) "
                    + (f"went down {transitions} times: a flapping port" if flapping else "went down and stayed down")
                    + ". Check the cable/transceiver, the ToR port and the PHY counters (ethtool -S: "
                    "link_down_events_phy, CRC/symbol errors).",
                    {"subkind": "port_flapping" if flapping else "link_down", "downs": transitions, "netdev": nd},
                    "failure",
                    str((downs or evs)[0].line),
                )
            )
    return out


def findings(log: KernelLog) -> list[Finding]:
    """Apply the module's rules; each AER port is reported once, inside the Xid finding when it has one."""
    explained: set[str] = set()
    out = _xid_findings(log, explained)
    out += _gpu_event_findings(log)
    for port in log.aer.values():
        if port.bdf in explained:
            continue
        ev = {"aer_corrected": port.corrected, "aer_uncorrected": port.uncorrected, "affected": port.affected}
        below = f" Affected below it: {', '.join(port.affected)}." if port.affected else ""
        if port.uncorrected or port.last_uncorrected_ts is not None:
            out.append(
                Finding(
                    "pcie_link_failure",
                    port.bdf,
                    "critical" if port.fatal else "error",
                    f"Uncorrected PCIe error at {port.bdf} ({', '.join(port.uncorrected) or 'unknown'}); "
                    "devices below it may be lost." + below + " Drain the host and check the device, slot and "
                    "root port.",
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
                    + "): link signal integrity; a rising rate precedes link failure. Watch aer_dev_correctable."
                    + below,
                    ev,
                    "failure",
                    str(port.first_line),
                )
            )
    out += _rnic_event_findings(log)
    return out


def detect(text: str) -> bool:
    """True when the text holds an AER report, an NVRM/Xid line, an mlx5 module/health line or a link flap."""
    return (
        "PCIe Bus Error" in text
        or "AER:" in text
        or "NVRM:" in text
        or "Port module event" in text
        or bool(_XID.search(text) or _LINK.search(text))
        or bool(_PROBE_FAIL.search(text))
        or any(
            _DEV.search(x) and "mlx5" in x and (_HEALTH.search(x) or _INIT_FAIL.search(x)) for x in text.splitlines()
        )
    )
