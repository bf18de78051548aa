"""Processes the lab starts (agents, busy-host throttlers), tracked in the state file.

Each is started detached (own session) with its log under ``<lab_dir>/logs``; its
pid and command line are recorded so ``down`` and faults find it again, and a pid
is only signalled while its ``/proc/<pid>/cmdline`` still matches (no recycled pid
is ever killed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def start(directory: Path, state: dict[str, Any], name: str, argv: list[str], **meta: Any) -> int:
    """Start ``argv`` detached as process ``name``; record it in ``state`` (caller writes it).

    Returns:
        The pid.
    """
    logs = directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.log", "ab") as log:
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=os.getcwd(),
        )
    state.setdefault("processes", {})[name] = {"pid": p.pid, "argv": argv, "start_ns": time.time_ns(), **meta}
    return p.pid


def python_argv(module: str, *args: str) -> list[str]:
    """``[sys.executable, -m, module, *args]``: the lab's own interpreter (the venv)."""
    return [sys.executable, "-m", module, *args]


def alive(entry: dict[str, Any]) -> bool:
    """Whether the recorded process still runs the recorded command (zombies count as dead)."""
    pid = entry["pid"]
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        _reap(pid)
        return False
    return raw.split(b"\0")[: len(entry["argv"])] == [a.encode() for a in entry["argv"]]


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def signal_entry(entry: dict[str, Any], sig: int) -> bool:
    """Send ``sig`` to the recorded process if it is still ours; returns whether it was sent."""
    if not alive(entry):
        return False
    try:
        os.kill(entry["pid"], sig)
    except ProcessLookupError:
        return False
    return True


def stop(entry: dict[str, Any], timeout_s: float = 2.0) -> None:
    """SIGCONT then SIGTERM the process; SIGKILL it after ``timeout_s`` seconds."""
    if not signal_entry(entry, signal.SIGCONT):
        return
    signal_entry(entry, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(entry["pid"])
        if not alive(entry):
            return
        time.sleep(0.02)
    signal_entry(entry, signal.SIGKILL)
    _reap(entry["pid"])


def stop_all(directory: Path, state: dict[str, Any]) -> None:
    """Stop every process recorded in ``state``: throttlers first (nothing stays SIGSTOPped), then probers."""
    entries = state.get("processes", {})
    order = {"busy": 0, "prober": 1, "responder": 2}  # probers before responders: no false timeouts
    for name in sorted(entries, key=lambda n: order.get(entries[n].get("role") or entries[n].get("kind"), 3)):
        stop(entries[name])
    entries.clear()
