"""RNIC transport configuration from ``mlxreg -d <dev> --reg_name ROCE_ACCL --get`` output.

Hostping #9 (RNIC "slow start") and #10 (small TX window) give the same bandwidth matrix
(every path of one RNIC below baseline); the registers tell them apart:
``roce_slow_restart_en`` / ``roce_slow_restart_idle_en`` and ``roce_tx_window_en``.
Output lines are ``field_name | 0x00000001``.
"""

from __future__ import annotations

import re

from producers.hostping.findings import Finding

_FIELD = re.compile(r"^\s*(?P<name>[A-Za-z_][\w]*)\s*\|\s*(?P<val>0x[0-9a-fA-F]+|\d+)\s*$")


def parse_roce_accl(text: str) -> dict[str, bool]:
    """``{"slow_start": bool, "tx_window": bool}`` from ROCE_ACCL fields.

    Raises:
        ValueError: neither field is in the text (wrong register or a truncated capture).
    """
    fields = {m["name"].lower(): int(m["val"], 0) for line in text.splitlines() if (m := _FIELD.match(line))}
    if not {"roce_slow_restart_en", "roce_tx_window_en"} & fields.keys():
        raise ValueError(
            "no roce_slow_restart_en / roce_tx_window_en field: capture `mlxreg -d <dev> --reg_name ROCE_ACCL --get`"
        )
    return {
        "slow_start": bool(fields.get("roce_slow_restart_en", 0) or fields.get("roce_slow_restart_idle_en", 0)),
        "tx_window": bool(fields.get("roce_tx_window_en", 0)),
    }


NAME = "roce_accl"
READS = "mlxreg -d <dev> --reg_name ROCE_ACCL --get (RoCE slow restart, TX window, adaptive retransmission)"


def parse(text: str) -> dict[str, int]:
    """Every ``field | value`` line of the register dump (values as integers)."""
    return {m["name"].lower(): int(m["val"], 0) for line in text.splitlines() if (m := _FIELD.match(line))}


def findings(fields: dict[str, int]) -> list[Finding]:
    """State of the transport features that change per-RNIC bandwidth (informational: a state, not a fault).

    Hostping #9 (slow start after idle) and #10 (TX window) show as every path of one RNIC
    below baseline; this tells which feature to suspect when the bandwidth matrix shows that.
    """
    if not {"roce_slow_restart_en", "roce_tx_window_en"} & fields.keys():
        return []
    on = parse_roce_accl("\n".join(f"{k} | {v}" for k, v in fields.items()))
    enabled = [
        k
        for k in ("roce_slow_restart_en", "roce_slow_restart_idle_en", "roce_tx_window_en", "roce_adp_retrans_en")
        if fields.get(k)
    ]
    return [
        Finding(
            "rnic_config",
            "ROCE_ACCL",
            "info",
            "RoCE transport features enabled: "
            + (", ".join(enabled) or "none")
            + (". Slow restart ramps a QP up slowly after idle (Hostping #9)" if on["slow_start"] else "")
            + (". The TX window caps bytes in flight per QP (Hostping #10)" if on["tx_window"] else "")
            + ". Not a fault by itself: suspect these when every path of this RNIC is below baseline.",
            {"fields": {k: v for k, v in fields.items() if not k.endswith("_select")}, **on},
            "",
        )
    ]


def detect(text: str) -> bool:
    """True when the text holds a ``roce_slow_restart_en`` or ``roce_tx_window_en`` register field."""
    return bool({"roce_slow_restart_en", "roce_tx_window_en"} & parse(text).keys())
