"""Collector for ``nvidia-smi --query-gpu=... --format=csv``: GPU PCIe link generation and width.

Reads the columns ``pci.bus_id``, ``pcie.link.gen.current``, ``pcie.link.gen.max``,
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
_NEEDED = ("pci.bus_id", "pcie.link.gen.current", "pcie.link.width.current")


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
        reading = LinkReading(
            location=_bdf(row["pci.bus_id"]),
            speed_gtps=GEN_GTPS.get(gen or 0),
            width=_int(row.get("pcie.link.width.current")),
            max_speed_gtps=GEN_GTPS.get(gmax or 0),
            max_width=_int(row.get("pcie.link.width.max")),
            device_class="gpu",
            line=int(row["_line"]),
            under_load=util is not None and util >= BUSY_PCT,
        )
        f = assess_link(reading)
        if f is not None:
            ev = dict(f.evidence, gpu_index=row.get("index"), name=row.get("name"), utilization_gpu_pct=util)
            out.append(Finding(f.kind, f.location, f.severity, f.explanation, ev, f.cause, f.source))
    return out


def detect(text: str) -> bool:
    """True when the text holds a CSV header with ``pci.bus_id`` and a ``pcie.link`` column."""
    return any("pci.bus_id" in x and "pcie.link" in x and "," in x for x in text.splitlines())
