"""Collector for ``nvidia-smi --query-gpu=... --format=csv``: GPU PCIe link generation and width.

Reads the columns ``pcie.link.gen.current``, ``pcie.link.width.current`` and, when present,
``pci.bus_id`` (else the GPU is named by ``index``), ``pcie.link.gen.max``,
``pcie.link.width.current``, ``pcie.link.width.max`` and, when present,
``utilization.gpu``, ``index`` and ``name`` (``nvidia-smi --help-query-gpu``). nvidia-smi's
``max`` is what "this GPU and system configuration" can do, so current below max is a
downgrade, judged by :func:`producers.hostping.pcie_link.assess_link`: a width below max is
a fault; a generation below max at full width is power saving unless the GPU is busy
(``utilization.gpu`` >= 50 %), like an idle GPU at 2.5 GT/s in lspci (field case 12).
"""

from __future__ import annotations

import csv
import io
import re

from producers.hostping.findings import Finding
from producers.hostping.pcie_link import LinkReading, assess_link

NAME = "nvidia_smi_query"
READS = "nvidia-smi --query-gpu=pci.bus_id,pcie.link.gen.*,pcie.link.width.*[,utilization.gpu] --format=csv"

GEN_GTPS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
BUSY_PCT = 50
_NEEDED = ("pcie.link.gen.current", "pcie.link.width.current")


def _key(col: str) -> str:
    return re.sub(r"\s*\[.*\]\s*$", "", col.strip()).lower()


def _int(v: str | None) -> int | None:
    m = re.search(r"\d+", v or "")
    return int(m.group()) if m else None


def _bdf(v: str) -> str:
    parts = v.strip().lower().split(":")
    if len(parts) == 3 and len(parts[0]) == 8:
        parts[0] = parts[0][-4:]
    return ":".join(parts)


def parse(text: str) -> list[dict[str, str]]:
    """Rows of the CSV as ``{column: value}`` (units in brackets dropped from column names)."""
    lines = text.splitlines()
    start = next((i for i, x in enumerate(lines) if "pcie.link" in x and "," in x), None)
    if start is None:
        return []
    reader = csv.reader(io.StringIO("\n".join(lines[start:])), skipinitialspace=True)
    header = [_key(c) for c in next(reader)]
    rows = []
    for n, rec in enumerate(reader, start=start + 2):
        if len(rec) != len(header):
            continue
        row = dict(zip(header, (r.strip() for r in rec), strict=True))
        row["_line"] = str(n)
        rows.append(row)
    return rows


def findings(rows: list[dict[str, str]]) -> list[Finding]:
    """One finding per GPU whose link runs below what nvidia-smi says it can do."""
    out = []
    for row in rows:
        if not all(k in row for k in _NEEDED):
            continue
        gen, gmax = _int(row.get("pcie.link.gen.current")), _int(row.get("pcie.link.gen.max"))
        util = _int(row.get("utilization.gpu"))
        where = (
            _bdf(row["pci.bus_id"])
            if row.get("pci.bus_id")
            else f"GPU{row['index']}"
            if row.get("index")
            else f"GPU at line {row['_line']}"
        )
        reading = LinkReading(
            location=where,
            speed_gtps=GEN_GTPS.get(gen or 0),
            width=_int(row.get("pcie.link.width.current")),
            max_speed_gtps=GEN_GTPS.get(gmax or 0),
            max_width=_int(row.get("pcie.link.width.max")),
            device_class="gpu",
            line=int(row["_line"]),
            under_load=util is not None and util >= BUSY_PCT,
        )
        f = assess_link(reading)
        if f is None:
            continue
        ev = dict(f.evidence, gpu_index=row.get("index"), name=row.get("name"), utilization_gpu_pct=util)
        severity, text = f.severity, f.explanation
        if "width" in ev.get("downgraded", []):
            # width.max is the GPU's and the slot's, not the board's connector: x8 boards in x16 slots
            # (some GeForce cards) read current 8 / max 16 while healthy. lspci LnkCap of the GPU decides.
            severity = "warning"
            ev["confirm_with"] = "lspci -vvv LnkCap of the GPU and its port"
            text += (
                " nvidia-smi's width.max ignores the board's connector (an x8 board in an x16 slot reads 8/16): "
                "confirm with lspci LnkCap of the GPU before acting."
            )
        out.append(Finding(f.kind, f.location, severity, text, ev, f.cause, f.source))
    return out


def detect(text: str) -> bool:
    """True when the text holds a CSV header with the current PCIe generation and width columns."""
    return any("pcie.link.gen.current" in x and "pcie.link.width.current" in x and "," in x for x in text.splitlines())
