"""The child processes of `fabricscope up`: started, watched, restarted with backoff, killed with their parent.

A child that exits is restarted after 1, 2, 4 … 30 s (logged with its exit code and the
tail of its log). One that had to be restarted ``max_restarts`` times within ``window_s``
seconds (default 5 in 5 min, systemd's ``StartLimitBurst``/``StartLimitIntervalSec``
idea) has *failed for good*: the supervisor reports it and the caller stops and exits
non-zero. Each child gets ``PR_SET_PDEATHSIG`` = SIGTERM (prctl(2)), so if the parent is
SIGKILLed or OOM-killed its children stop too instead of holding the store and the
consumer groups of the next run. The child sets it itself at start-up
(:func:`die_with_parent_from_env`, called by ``python -m fabricscope``): Python code in a
``preexec_fn`` runs in a fork of a multi-threaded process, which is never safe.

Every child runs in a process group (or session) of its own, so a terminal's Ctrl-C reaches
``up`` only; :meth:`Supervisor.stop` ends each group with ``killpg``, so a child's own helpers
go with it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from infra.process_group import die_with_parent, kill_group, signal_group

log = logging.getLogger("fabricscope.up")

PARENT_ENV = "FABRICSCOPE_DIE_WITH_PARENT"
"""Environment variable naming the pid whose death ends this process (set by :meth:`Supervisor.add`)."""


def die_with_parent_from_env() -> None:
    """At a child's start: if :data:`PARENT_ENV` names a pid, die with it (and exit now if it is gone).

    The variable is removed from the environment, so this process's own children are not bound to a
    grandparent they never had.
    """
    want = os.environ.pop(PARENT_ENV, "")
    if want.isdigit():
        die_with_parent(signal.SIGTERM, int(want))  # exits if the parent died before prctl took effect


def child_env(env: dict[str, str] | None) -> dict[str, str]:
    """``env`` (default this process's) plus :data:`PARENT_ENV` naming this process."""
    return {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}


@dataclass
class Child:
    """One supervised process: its name, argv, environment and log file."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    own_session: bool = False  # a session (setsid) of its own: under autogroup scheduling, a CPU share of its own
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: deque = field(default_factory=deque)  # monotonic times of its restarts
    due: float | None = None  # when it is restarted next (None: not waiting)
    backoff_s: float = 1.0
    failed: bool = False


def log_tail(path: Path, lines: int = 5) -> str:
    """The last ``lines`` non-empty lines of a log file ('' if none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join([ln for ln in text.splitlines() if ln.strip()][-lines:])


class Supervisor:
    """Starts children, restarts the ones that exit, and says when one failed for good.

    Args:
        max_restarts, window_s: a child that exits again after this many restarts within this many
            seconds failed for good.
        max_backoff_s: the longest wait before a restart (the wait doubles from 1 s).
        clock: monotonic seconds (tests may pass their own).
    """

    def __init__(self, max_restarts: int = 5, window_s: float = 300.0, max_backoff_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.children: list[Child] = []
        self.max_restarts, self.window_s, self.max_backoff_s = max_restarts, window_s, max_backoff_s
        self.clock = clock

    def add(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None,
            own_session: bool = False) -> Child:
        """Start ``argv`` as child ``name``, its stdout and stderr appended to ``log_path``; with ``own_session``
        in a session of its own (Linux autogroup scheduling shares the CPU between sessions first, so the child's
        share is not carved out of its siblings'). A ``python -m fabricscope`` child dies with this process; any
        other must call :func:`die_with_parent_from_env` at its start to do the same."""
        c = Child(name, argv, Path(log_path), env, own_session)
        self.children.append(c)
        self._start(c)
        return c

    def _start(self, c: Child) -> None:
        c.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(c.log_path, "ab") as out:
            # Ctrl-C reaches the parent only (a process group, or a session, of the child's own): it stops them in order
            group = {"start_new_session": True} if c.own_session else {"process_group": 0}
            c.proc = subprocess.Popen(c.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      env=child_env(c.env), **group)
        c.started_at = self.clock()

    def poll(self) -> list[Child]:
        """Restart the children that exited once their backoff is over; returns those that failed for good."""
        now = self.clock()
        for c in self.children:
            if c.failed or c.proc is None:
                continue
            code = c.proc.poll()
            if code is None:
                if now - c.started_at > 60:
                    c.backoff_s = 1.0  # up for a minute: a later crash starts the backoff over
                continue
            if c.due is None:
                while c.restarts and c.restarts[0] < now - self.window_s:
                    c.restarts.popleft()
                tail = log_tail(c.log_path)
                if len(c.restarts) >= self.max_restarts:
                    c.failed = True
                    log.error("%s exited (code %s) after %d restarts within %.0f s: failed for good; "
                              "last lines of %s:\n%s", c.name, code, len(c.restarts), self.window_s, c.log_path, tail)
                    continue
                c.due = now + c.backoff_s
                log.warning("%s exited (code %s); restarting in %.0f s; last lines of %s:\n%s",
                            c.name, code, c.backoff_s, c.log_path, tail)
                c.backoff_s = min(c.backoff_s * 2, self.max_backoff_s)
            elif now >= c.due:
                c.due = None
                c.restarts.append(now)
                self._start(c)
                log.warning("%s restarted (pid %d; %d restart(s) in the last %.0f s)",
                            c.name, c.proc.pid, len(c.restarts), self.window_s)
        return [c for c in self.children if c.failed]

    def running(self) -> list[Child]:
        """Children whose process runs now."""
        return [c for c in self.children if c.proc is not None and c.proc.poll() is None]

    def terminate(self) -> None:
        """SIGTERM every child's group at once (:meth:`stop` waits for them; call :meth:`poll` no more)."""
        for c in reversed(self.children):
            c.due = None
            if c.proc is not None:
                signal_group(c.proc, signal.SIGTERM)

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM every child's group at once, SIGKILL the groups still running after ``timeout_s``.

        At once rather than one by one, so the whole stop takes the slowest child's time, not the sum.
        """
        self.terminate()
        deadline = time.monotonic() + timeout_s
        for c in self.children:
            if c.proc is None:
                continue
            try:
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0f s; killed", c.name, timeout_s)
            kill_group(c.proc)

    def kill(self) -> list[str]:
        """SIGKILL every child's group now (a second Ctrl-C); returns the names of those that were running."""
        names = [c.name for c in self.running()]
        for c in self.children:
            if c.proc is not None:
                kill_group(c.proc)
        return names
