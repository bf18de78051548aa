"""PCIe AER counters from sysfs: ``/sys/bus/pci/devices/<bdf>/aer_dev_{correctable,nonfatal,fatal}``.

Each file holds ``Name count`` lines and a ``TOTAL_ERR_*`` line, cumulative since boot
(Linux >= 4.17). The same rules as the kernel-log parser (:mod:`diagnose.collectors.dmesg`), from counters:
non-fatal or fatal errors -> ``pcie_link_failure``; correctable errors only (replay
timeouts ``Timeout``, ``BadTLP``, ``BadDLLP``, ``RxErr``) -> ``pcie_link_errors`` (warning).
A live monitor compares two reads (:func:`producers.hostping.hw_counters.deltas`).
"""

from __future__ import annotations

from producers.hostping.findings import Finding
from producers.hostping.sysfs import SysfsSnapshot
from producers.hostping.sysfs_pcie import PCI_DEVICES, device_dirs

FILES = ("aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal")


def parse_counts(text: str | None) -> dict[str, int]:
    """``"RxErr 0\\nTimeout 3\\nTOTAL_ERR_COR 3"`` -> ``{"RxErr": 0, "Timeout": 3, "TOTAL_ERR_COR": 3}``."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def read(snap: SysfsSnapshot) -> dict[str, dict[str, dict[str, int]]]:
    """``{bdf: {"aer_dev_correctable": {name: count}, ...}}`` for devices with any AER file."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for bdf, path in device_dirs(snap).items():
        for f in FILES:
            v = snap.read(f"{path}/{f}")
            if v is None:
                v = snap.read(f"{PCI_DEVICES}/{bdf}/{f}")
            if v is not None:
                out.setdefault(bdf, {})[f] = parse_counts(v)
    return out


def findings(snap: SysfsSnapshot) -> list[Finding]:
    """One finding per device with a non-zero AER counter (cumulative since boot)."""
    out = []
    for bdf, files in sorted(read(snap).items()):
        nonzero = {f: {k: v for k, v in c.items() if v and not k.startswith("TOTAL")} for f, c in files.items()}
        unc = {**nonzero.get("aer_dev_nonfatal", {}), **nonzero.get("aer_dev_fatal", {})}
        cor = nonzero.get("aer_dev_correctable", {})
        if unc:
            fatal = bool(nonzero.get("aer_dev_fatal"))
            out.append(
                Finding(
                    "pcie_link_failure",
                    bdf,
                    "critical" if fatal else "error",
                    f"Uncorrectable PCIe errors counted at {bdf} ({', '.join(f'{k} x{v}' for k, v in unc.items())})"
                    + (" after correctable ones" if cor else "")
                    + ". Check the device, its slot/riser and the port above it; drain the host if they recur.",
                    {"aer": nonzero, "cumulative": True},
                    "failure",
                )
            )
        elif cor:
            out.append(
                Finding(
                    "pcie_link_errors",
                    bdf,
                    "warning",
                    f"Correctable PCIe errors counted at {bdf} ({', '.join(f'{k} x{v}' for k, v in cor.items())}): "
                    "link signal integrity. Cumulative since boot: alert on a rising rate.",
                    {"aer": nonzero, "cumulative": True},
                    "failure",
                )
            )
    return out
