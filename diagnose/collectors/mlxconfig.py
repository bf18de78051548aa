"""Collector for ``mlxconfig -d <dev> q`` (``query``): the RNIC's firmware configuration.

Rows are ``NAME  value...`` under ``Configurations:`` with the columns that header names
(``Default Current Next Boot``, or ``Next Boot`` alone). Rules:

- a parameter whose ``Next Boot`` differs from ``Current``: ``rnic_config`` warning, the
  running firmware is not what was configured (a reboot or ``mlxfwreset`` is pending);
- ``ATS_ENABLED False``: informational (matters for GPUDirect RDMA under an IOMMU/VM, Hostping #8);
- ``LINK_TYPE_P<n>`` and ``SRIOV_EN``/``NUM_OF_VFS`` are kept as evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

NAME = "mlxconfig"
READS = "mlxconfig -d <dev> q (firmware configuration: pending changes, ATS, link type, SR-IOV)"

_HEADER = re.compile(r"^\s*Configurations:\s+(?P<cols>.+?)\s*$")
_ROW = re.compile(r"^\s+(?P<name>[A-Z][A-Z0-9_]+(?:\[[\d.]+\])?)\s+(?P<vals>\S.*?)\s*$")
_DEVICE = re.compile(r"^\s*(?:Device|PCI device):\s+(?P<dev>\S+)")
KEEP = ("LINK_TYPE_P1", "LINK_TYPE_P2", "SRIOV_EN", "NUM_OF_VFS", "ATS_ENABLED", "PCI_WR_ORDERING")


@dataclass
class MlxConfig:
    """One device's rows: ``{name: {column: value}}`` and the line of each row."""

    device: str = ""
    columns: list[str] = field(default_factory=list)
    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)


def parse(text: str) -> MlxConfig:
    """Rows under the ``Configurations:`` header; other lines are skipped."""
    cfg = MlxConfig()
    for n, line in enumerate(text.splitlines(), start=1):
        if (d := _DEVICE.match(line)) and not cfg.device:
            cfg.device = d["dev"]
        elif h := _HEADER.match(line):
            cfg.columns = re.findall(r"Default|Current|Next Boot", h["cols"])
        elif cfg.columns and (r := _ROW.match(line)):
            vals = r["vals"].split()
            if len(vals) == len(cfg.columns):
                cfg.rows[r["name"]] = dict(zip(cfg.columns, vals, strict=True))
                cfg.lines[r["name"]] = n
    return cfg


def findings(cfg: MlxConfig) -> list[Finding]:
    """Pending changes (warning) and ATS disabled (info)."""
    out = []
    where = cfg.device or "RNIC"
    pending = {
        k: (v["Current"], v["Next Boot"])
        for k, v in cfg.rows.items()
        if "Current" in v and "Next Boot" in v and v["Current"] != v["Next Boot"]
    }
    if pending:
        first = min(cfg.lines[k] for k in pending)
        out.append(
            Finding(
                "rnic_config",
                where,
                "warning",
                f"{len(pending)} firmware parameter(s) of {where} differ between Current and Next Boot ("
                + ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in list(pending.items())[:5])
                + "): the running configuration is not the one set. Reboot or mlxfwreset before trusting it.",
                {"pending": {k: list(v) for k, v in pending.items()}},
                "config",
                str(first),
            )
        )
    ats = cfg.rows.get("ATS_ENABLED", {})
    value = ats.get("Current") or ats.get("Next Boot") or ""
    if value.startswith("False"):
        out.append(
            Finding(
                "ats_disabled",
                where,
                "info",
                f"ATS is disabled in {where}'s firmware: with an IOMMU (VMs, passthrough) every GPUDirect RDMA "
                "access is translated at the root complex (Hostping #8). Bare metal without IOMMU: no effect.",
                {k: cfg.rows[k] for k in KEEP if k in cfg.rows},
                "config",
                str(cfg.lines["ATS_ENABLED"]),
            )
        )
    return out


def detect(text: str) -> bool:
    """True when the text holds an mlxconfig ``Configurations:`` header."""
    return any(_HEADER.match(x) and re.search(r"Current|Next Boot|Default", x) for x in text.splitlines())
