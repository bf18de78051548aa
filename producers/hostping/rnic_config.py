"""RNIC transport configuration from ``mlxreg -d <dev> --reg_name ROCE_ACCL --get`` output.

Hostping #9 (RNIC "slow start") and #10 (small TX window) give the same bandwidth matrix
(every path of one RNIC below baseline); the registers tell them apart:
``roce_slow_restart_en`` / ``roce_slow_restart_idle_en`` and ``roce_tx_window_en``.
Output lines are ``field_name | 0x00000001``.
"""

from __future__ import annotations

import re

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
