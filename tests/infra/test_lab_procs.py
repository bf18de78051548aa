"""The lab's process table: processes stop together, a stage at a time, and none outlives its stop."""

from __future__ import annotations

import sys
from pathlib import Path

from infra.lab import procs

from conftest import wait_for

# Says when SIGTERM came (CLOCK_MONOTONIC, one clock for every process of the machine), then ignores
# it: a stubborn agent that only SIGKILL stops.
STUBBORN = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: pathlib.Path(str(out) + ".term").write_text(repr(time.monotonic())))
pathlib.Path(str(out) + ".ready").write_text("")
while True:
    time.sleep(1)
"""


def _start(tmp_path: Path, state: dict, name: str, role: str) -> dict:
    procs.start(tmp_path, state, name, [sys.executable, "-c", STUBBORN, str(tmp_path / name)], kind="agent",
                role=role)
    wait_for(lambda: (tmp_path / f"{name}.ready").exists(), every=0.02, what=f"{name} to install its handler")
    return state["processes"][name]


def _termed_at(tmp_path: Path, name: str) -> float:
    return float((tmp_path / f"{name}.term").read_text())


def test_stubborn_processes_are_signalled_together_and_killed_after_one_timeout(tmp_path: Path) -> None:
    state: dict = {}
    entries = [_start(tmp_path, state, f"H{i}.prober", "prober") for i in range(4)]
    procs.stop_many(entries, timeout_s=1.0)
    assert not any(procs.alive(e) for e in entries)
    termed = [_termed_at(tmp_path, f"H{i}.prober") for i in range(4)]
    # one at a time, each would have had the whole timeout before the next was signalled
    assert max(termed) - min(termed) < 1.0, termed


def test_stop_all_stops_probers_before_responders_and_empties_the_table(tmp_path: Path) -> None:
    state: dict = {}
    for host in ("H1", "H2"):
        _start(tmp_path, state, f"{host}.responder", "responder")
        _start(tmp_path, state, f"{host}.prober", "prober")
    entries = list(state["processes"].values())
    procs.stop_all(tmp_path, state)
    assert state["processes"] == {}
    assert not any(procs.alive(e) for e in entries)
    probers = [_termed_at(tmp_path, f"{h}.prober") for h in ("H1", "H2")]
    responders = [_termed_at(tmp_path, f"{h}.responder") for h in ("H1", "H2")]
    assert max(probers) < min(responders)  # a responder gone before its probers makes false timeouts
