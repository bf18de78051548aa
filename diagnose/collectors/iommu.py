"""Collector for IOMMU faults in the kernel log and the IOMMU settings of the kernel command line.

Reads ``<driver> <bdf>: AMD-Vi: Event logged [IO_PAGE_FAULT domain=.. address=.. flags=..]``
(also the older split form ``AMD-Vi: Event logged [`` / ``IO_PAGE_FAULT device=05:00.0 ...``),
Intel's ``DMAR: [DMA Read|Write] Request device [bb:dd.f] fault addr .. [fault reason NN] ...``,
and a kernel command line (``/proc/cmdline``, ``BOOT_IMAGE=...``) with ``iommu=``,
``intel_iommu=`` or ``amd_iommu=``. Rules:

- IO page faults from a GPU or RNIC driver (nvidia, amdgpu, mlx4/mlx5, bnxt_en, irdma, ...):
  ``iommu_fault`` error at that PCI function: the IOMMU blocked a DMA, which is what breaks GPU
  peer-to-peer and GPUDirect RDMA when translation is on (cuda-samples#48: p2p samples crash
  the GPUs under AMD-Vi). On bare metal the usual fix is ``iommu=pt`` (or the IOMMU off), in a
  VM ATS/ACS settings;
- faults from another device (nvme, a NIC driver that is no RNIC), or DMAR faults (which do not
  name the driver): ``iommu_fault`` warning at that device (read ``lspci -s`` to tell what it is);
- a command line enabling translation (``intel_iommu=on``/``amd_iommu=on``) without ``iommu=pt``:
  ``iommu_translation`` info (GPUDirect RDMA and P2P then go through translation).

``amd_iommu_report_page_fault: N callbacks suppressed`` and ``DMAR: DRHD: handling fault status``
lines are counted as evidence, not as findings of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

NAME = "iommu"
READS = "AMD-Vi IO_PAGE_FAULT and DMAR fault lines of dmesg, the kernel command line (iommu=, intel_iommu=, amd_iommu=)"

#: Drivers of GPUs and RNICs: their faults are what breaks P2P and GPUDirect RDMA.
GPU_RNIC_DRIVERS = ("nvidia", "amdgpu", "mlx4_core", "mlx5_core", "mlx4_en", "bnxt_en", "bnxt_re", "irdma", "ice")

_AMDVI = re.compile(
    r"(?:(?P<drv>[\w-]+) (?P<bdf>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d): )?AMD-Vi: Event logged \[IO_PAGE_FAULT"
    r"(?: device=(?P<dev>[0-9a-f]{2}:[0-9a-f]{2}\.\d))?.*?address=(?P<addr>0x[0-9a-f]+)"
)
_AMDVI_SPLIT = re.compile(r"IO_PAGE_FAULT device=(?P<dev>[0-9a-f]{2}:[0-9a-f]{2}\.\d).*?address=(?P<addr>0x[0-9a-f]+)")
_DMAR = re.compile(
    r"DMAR: \[DMA (?P<rw>Read|Write)\] Request device \[(?P<dev>[0-9a-f]{2}:[0-9a-f]{2}\.\d)\] "
    r"(?:PASID \w+ )?fault addr (?P<addr>(?:0x)?[0-9a-f]+)\s*(?:\[fault reason (?P<reason>\d+)\]\s*(?P<why>.*))?"
)
_SUPPRESSED = re.compile(r"(?:amd_iommu_report_page_fault|dmar_fault): (?P<n>\d+) callbacks suppressed")
_CMDLINE = re.compile(r"(?:^|\s)(?:BOOT_IMAGE=\S+|root=\S+)(?:\s|$)")
_IOMMU_ARG = re.compile(r"(?:^|\s)(?P<k>iommu|intel_iommu|amd_iommu)=(?P<v>\S+)")


@dataclass
class IommuLog:
    """Faults per device (``bdf`` -> driver, count, first line, kind), suppressed counts and the command line."""

    faults: dict[str, dict] = field(default_factory=dict)
    suppressed: int = 0
    cmdline: dict[str, str] = field(default_factory=dict)
    cmdline_line: int = 0


def _add(log: IommuLog, bdf: str, drv: str, kind: str, n: int, detail: str) -> None:
    bdf = bdf if bdf.count(":") == 2 else f"0000:{bdf}"
    f = log.faults.setdefault(bdf, {"driver": drv, "count": 0, "line": n, "kind": kind, "details": []})
    f["count"] += 1
    f["driver"] = f["driver"] or drv
    if detail and detail not in f["details"] and len(f["details"]) < 3:
        f["details"].append(detail)


def parse(text: str) -> IommuLog:
    """Faults, suppressed-callback counts and the IOMMU arguments of a command line; other lines skipped."""
    log = IommuLog()
    for n, line in enumerate(text.splitlines(), start=1):
        if m := _AMDVI.search(line):
            if m["bdf"] or m["dev"]:
                _add(log, m["bdf"] or m["dev"], m["drv"] or "", "AMD-Vi IO_PAGE_FAULT", n, "")
        elif m := _AMDVI_SPLIT.search(line):
            _add(log, m["dev"], "", "AMD-Vi IO_PAGE_FAULT", n, "")
        elif m := _DMAR.search(line):
            why = (m["why"] or "").strip()
            _add(log, m["dev"], "", f"DMAR DMA {m['rw']} fault", n, f"reason {m['reason']}: {why}" if why else "")
        elif m := _SUPPRESSED.search(line):
            log.suppressed += int(m["n"])
        elif _CMDLINE.search(line) and (args := dict((a["k"], a["v"]) for a in _IOMMU_ARG.finditer(line))):
            log.cmdline, log.cmdline_line = args, n
    return log


def findings(log: IommuLog) -> list[Finding]:
    """``iommu_fault`` per device (error for GPU/RNIC drivers, else warning) and ``iommu_translation`` info."""
    out = []
    for bdf, f in log.faults.items():
        gpu_rnic = f["driver"] in GPU_RNIC_DRIVERS
        who = f"{f['driver']} {bdf}" if f["driver"] else bdf
        ev = {"driver": f["driver"], "faults": f["count"], "fault": f["kind"], "details": f["details"],
              "callbacks_suppressed": log.suppressed, "gpu_or_rnic": gpu_rnic}
        if gpu_rnic:
            text = (f"The IOMMU blocked {f['count']} DMA(s) of {who} ({f['kind']}): GPU peer-to-peer and GPUDirect "
                    "RDMA fail or corrupt under translation. On bare metal boot with iommu=pt (or the IOMMU off); in "
                    "a VM enable ATS and check ACS.")
        else:
            text = (f"The IOMMU blocked {f['count']} DMA(s) of {who} ({f['kind']}). Check what the device is "
                    "(lspci -s); if it is a GPU or RNIC, peer-to-peer and GPUDirect RDMA are affected.")
        out.append(Finding("iommu_fault", bdf, "error" if gpu_rnic else "warning", text, ev, "config", str(f["line"])))
    on = [k for k, v in log.cmdline.items() if k in ("intel_iommu", "amd_iommu") and v.split(",")[0] == "on"]
    if on and log.cmdline.get("iommu") != "pt":
        out.append(Finding(
            "iommu_translation", "host", "info",
            f"The kernel command line turns IOMMU translation on ({', '.join(f'{k}=on' for k in on)}) without "
            "iommu=pt: GPU peer-to-peer and GPUDirect RDMA DMA go through translation (slower; faults if a mapping "
            "is missing). NVIDIA's guidance for bare-metal GPU hosts is iommu=pt or the IOMMU off.",
            {"cmdline": log.cmdline}, "config", str(log.cmdline_line),
        ))  # fmt: skip
    return out


def detect(text: str) -> bool:
    """True when the text holds an IO page fault, a DMAR fault or a command line with IOMMU arguments."""
    log = parse(text)
    return bool(log.faults or log.cmdline)
