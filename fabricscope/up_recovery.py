"""What a running `fabricscope up` owns, on disk, so the next `up` can take over after a crash.

``up`` writes ``$FABRICSCOPE_VAR/up.json`` (0600) as it starts things: whether it started the
local Kafka broker (and where), the lab directory it builds, and its children's pids and
command lines. It removes the file after a clean stop. An ``up`` that finds the file while the
run lock's previous holder is dead (``kill -9``, OOM, a power cut) takes over, one line each:

- the broker the dead run started is adopted: this run stops it when it stops;
- the dead run's children still running (``PR_SET_PDEATHSIG`` normally ends them) are killed;
- its lab is removed (the lab's own sweep, :func:`infra.lab.netns.down`), and built anew when
  this run uses the lab.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RECORD = "up.json"


@dataclass
class UpRecord:
    """What one ``up`` run owns. ``children``: name -> ``{"pid": int, "argv": [str]}``."""

    pid: int
    kafka_bootstrap: str = ""  # set while this run owns the local broker it started
    lab_dir: str = ""  # set while this run has a lab built or building
    children: dict[str, dict[str, Any]] = field(default_factory=dict)

    def save(self, var: Path) -> None:
        """Write the record atomically (0600)."""
        tmp = var / (RECORD + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(self), f)
        tmp.replace(var / RECORD)


def load_record(var: Path) -> UpRecord | None:
    """The record a previous run left in ``var``, or None (none, or unreadable: then it is ignored)."""
    try:
        data = json.loads((var / RECORD).read_text())
        return UpRecord(int(data["pid"]), str(data.get("kafka_bootstrap", "")), str(data.get("lab_dir", "")),
                        dict(data.get("children", {})))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear_record(var: Path) -> None:
    """Remove the record (a clean stop)."""
    (var / RECORD).unlink(missing_ok=True)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def still_ours(entry: dict[str, Any]) -> bool:
    """Whether the recorded child still runs its recorded command (a recycled pid never matches)."""
    pid, argv = int(entry.get("pid", 0)), list(entry.get("argv", []))
    return pid > 0 and bool(argv) and _cmdline(pid)[: len(argv)] == argv


def take_over(var: Path, previous_pid: int) -> tuple[UpRecord | None, list[str]]:
    """After the run lock showed a dead previous holder: end its children; returns its record and what was done.

    The broker and the lab are reported, not touched here: the caller adopts the broker (when it still
    answers) and the lab's own sweep removes the lab.

    Returns:
        (the dead run's record or None, one line per thing found).
    """
    rec = load_record(var)
    if rec is None or rec.pid != previous_pid:
        return None, []
    lines = []
    for name, entry in sorted(rec.children.items()):
        if still_ours(entry):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry["pid"]), signal.SIGKILL)
            lines.append(f"its {name} (pid {entry['pid']}) was still running: killed")
    if rec.kafka_bootstrap:
        lines.append(f"the Kafka broker it started on {rec.kafka_bootstrap}: adopted (this run stops it)")
    if rec.lab_dir:
        lines.append(f"its lab in {rec.lab_dir}: removed (its namespaces and agents)")
    return rec, lines
