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
    stop_many([entry], timeout_s)


def stop_many(entries: list[dict[str, Any]], timeout_s: float = 2.0) -> None:
    """:func:`stop` for several processes at once: all are signalled, then waited on together.

    A udp agent takes up to its producer's flush (seconds) to exit; one at a time, a lab of a dozen
    agents took longer than ``fabricscope up`` may spend on its whole clean-up. Together they take
    at most ``timeout_s`` (then SIGKILL).
    """
    live = [e for e in entries if signal_entry(e, signal.SIGCONT)]
    for e in live:
        signal_entry(e, signal.SIGTERM)
    live = _wait_gone(live, timeout_s)
    for e in live:
        signal_entry(e, signal.SIGKILL)
    _wait_gone(live, KILL_WAIT_S)  # SIGKILL is not instant: gone when we return, before the namespaces go


KILL_WAIT_S = 1.0
"""How long :func:`stop_many` waits for SIGKILLed processes to be gone (they are, within milliseconds)."""


def _wait_gone(entries: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
    """Wait up to ``timeout_s`` for ``entries`` to exit (reaping our children); returns those still alive."""
    deadline = time.monotonic() + timeout_s
    while entries:
        for e in entries:
            _reap(e["pid"])
        entries = [e for e in entries if alive(e)]
        if not entries or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    return entries


STOP_ORDER = {"busy": 0, "prober": 1, "responder": 2}
"""The order processes stop in: throttlers first (nothing stays SIGSTOPped), then probers, then
responders (a responder gone before its probers makes false timeouts), then anything else."""


def stop_in_order(entries: list[dict[str, Any]]) -> None:
    """Stop ``entries`` a stage of :data:`STOP_ORDER` at a time, each stage at once (:func:`stop_many`)."""
    stages: dict[int, list[dict[str, Any]]] = {}
    for entry in entries:
        stages.setdefault(STOP_ORDER.get(entry.get("role") or entry.get("kind"), 3), []).append(entry)
    for stage in sorted(stages):
        stop_many(stages[stage])


def stop_all(directory: Path, state: dict[str, Any]) -> None:
    """Stop every process recorded in ``state`` (:func:`stop_in_order`) and empty the record."""
    entries = state.get("processes", {})
    stop_in_order(list(entries.values()))
    entries.clear()
