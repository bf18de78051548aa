"""The child processes of `fabricscope up`: restart with backoff, failed for good, die with their parent."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from fabricscope.settings import Settings
from fabricscope.supervise import Supervisor
from fabricscope.up import EXIT_FAILED, _watch
from infra.runlock import Busy, RunLock, holder

from conftest import REPO, wait_for


class Clock:
    """A monotonic clock the test moves by hand (backoffs without waiting for them)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _exited(c) -> None:  # noqa: ANN001 - a Child
    c.proc.wait(timeout=60)


def test_a_killed_child_is_restarted_with_backoff_and_logged(tmp_path: Path, caplog) -> None:
    clock = Clock()
    sup = Supervisor(clock=clock)
    c = sup.add("worker0", [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                tmp_path / "worker0.log")
    first = c.proc.pid
    try:
        os.kill(first, signal.SIGKILL)
        _exited(c)
        with caplog.at_level(logging.WARNING, logger="fabricscope.up"):
            assert sup.poll() == []
            assert "worker0 exited (code -9); restarting in 1 s" in caplog.text
            assert c.proc.pid == first  # not before its backoff is over
            clock.t += 1.0
            sup.poll()
        assert c.proc.pid != first and c.proc.poll() is None
        assert "worker0 restarted" in caplog.text
        os.kill(c.proc.pid, signal.SIGKILL)
        _exited(c)
        sup.poll()
        assert c.due == clock.t + 2.0  # backoff doubled: 1 s, then 2 s
    finally:
        sup.stop(timeout_s=5)


def test_five_restarts_in_five_minutes_fail_for_good(tmp_path: Path) -> None:
    clock = Clock()
    sup = Supervisor(clock=clock)
    c = sup.add("sink", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "sink.log")
    polls = 0
    while not sup.poll():
        _exited(c)
        clock.t += 31.0  # past any backoff (max 30 s): 5 restarts take < 5 min
        polls += 1
        assert polls < 20
    assert c.failed and c.proc.poll() == 3
    assert len(c.restarts) == 5 and c.restarts[-1] - c.restarts[0] < 300


def test_restarts_spread_over_more_than_the_window_never_fail(tmp_path: Path) -> None:
    clock = Clock()
    sup = Supervisor(clock=clock)
    c = sup.add("worker0", [sys.executable, "-c", "raise SystemExit(1)"], tmp_path / "w.log")
    for _ in range(12):
        _exited(c)
        assert sup.poll() == []
        clock.t += 100.0  # one crash every 100 s: at most 3 restarts in any 5 min
        sup.poll()
    assert not c.failed


def test_up_exits_non_zero_when_a_child_failed_for_good(tmp_path: Path) -> None:
    sup = Supervisor(max_restarts=2, max_backoff_s=0.05)
    sup.add("source-synthetic", [sys.executable, "-c", "raise SystemExit(4)"], tmp_path / "src.log")
    s = Settings(fabricscope_var=tmp_path)
    assert _watch(s, sup, duration=60) == EXIT_FAILED


def test_children_die_when_their_parent_is_killed(tmp_path: Path) -> None:
    parent = tmp_path / "parent.py"
    parent.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from fabricscope.supervise import Supervisor\n"
        "sup = Supervisor()\n"
        "code = 'from fabricscope.supervise import die_with_parent_from_env as d; d(); import time; time.sleep(120)'\n"
        "c = sup.add('sink', [sys.executable, '-c', code],\n"
        f"            Path({str(tmp_path)!r}) / 'c.log')\n"
        "print(c.proc.pid, flush=True)\n"
        "time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, str(parent)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    child = int(p.stdout.readline())
    os.kill(child, 0)  # alive
    p.kill()  # SIGKILL: no handler runs in the parent
    p.wait()
    wait_for(lambda: not _alive(child), timeout=60, every=0.05, what="the child gone with its SIGKILLed parent")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_run_lock_names_the_holder_and_frees_when_it_dies(tmp_path: Path) -> None:
    path = tmp_path / "up.lock"
    p = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom infra.runlock import RunLock\n"
                          f"lock = RunLock(__import__('pathlib').Path({str(path)!r}), 'store').acquire()\n"
                          "print('held', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout.readline().strip() == "held"
    try:
        try:
            RunLock(path, "the store").acquire()
            raise AssertionError("a second holder got the lock")
        except Busy as b:
            assert b.pid == p.pid and f"in use by pid {p.pid}" in str(b)
        assert holder(path) == p.pid
    finally:
        p.kill()
        p.wait()
    assert holder(path) is None  # the kernel dropped the dead holder's lock
    with RunLock(path, "the store"):
        assert holder(path) == os.getpid()
