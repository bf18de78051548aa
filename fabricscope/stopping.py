"""Stopping when asked: the stop flag long-running commands poll, SIGTERM as Ctrl-C, a bounded clean-up."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO


def stop_requested(*signals: signal.Signals) -> Callable[[], bool]:
    """Install handlers for ``signals`` (default: SIGTERM) and return a check that turns True once one arrives.

    The loops poll the check between batches and then finish cleanly (flush the producer,
    close the store) instead of dying mid-write. Must be called from the main thread
    (Python's rule for signal handlers).

    Raises:
        ValueError: called from another thread than the main one.
    """
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    for sig in signals or (signal.SIGTERM,):
        signal.signal(sig, _stop)
    return lambda: stopping


def interrupt_on_terminate() -> Callable[[], None]:
    """Make SIGTERM (``kill PID``, ``timeout``, systemd) and SIGINT raise ``KeyboardInterrupt`` in the main thread.

    For commands that clean up in ``finally`` blocks (``up``, ``demo``: the lab, children, a broker they
    started). SIGINT is reinstalled too: a shell without job control starts ``cmd &`` with SIGINT
    ignored, and ``kill -INT PID`` would then do nothing. Returns a function that restores the old
    handlers.
    """
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)

    def restore() -> None:
        signal.signal(signal.SIGTERM, old_term if old_term is not None else signal.SIG_DFL)
        signal.signal(signal.SIGINT, old_int if old_int is not None else signal.default_int_handler)

    return restore


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class Cleanup:
    """The clean-up phase of a command, bounded: a second signal, or overrunning ``deadline_s``, exits at once.

    Use as a context manager around the ``finally`` of a command that started things. Record what is
    still to be undone with :meth:`owe` and tick it off with :meth:`done`; on a second SIGINT/SIGTERM
    or when the deadline passes, ``on_abort`` runs (e.g. SIGKILL the children), a line on stderr names
    what was left behind and how to remove it, and the process exits with 1 (``os._exit``: no
    ``finally`` below us may block again).

    Args:
        command: who speaks (``fabricscope up``).
        deadline_s: the most the clean-up may take (seconds); None: no bound (a library call inside a
            test runner, where exiting the process is not ours to do), a second signal still aborts.
        on_abort: called before exiting early; must not block.
        out: where the line goes (default stderr).
    """

    def __init__(self, command: str, deadline_s: float | None = 8.0, on_abort: Callable[[], None] | None = None,
                 out: TextIO | None = None) -> None:
        self.command, self.deadline_s, self.on_abort = command, deadline_s, on_abort
        self.out = out
        self.left: dict[str, str] = {}
        self._timer: threading.Timer | None = None
        self._old: list[tuple[int, Any]] = []

    def owe(self, key: str, text: str) -> None:
        """Something still to undo: ``text`` says what it is and how to remove it by hand."""
        self.left[key] = text

    def done(self, key: str) -> None:
        """``key`` was undone."""
        self.left.pop(key, None)

    def __enter__(self) -> Cleanup:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old.append((sig, signal.signal(sig, lambda *_: self.abort("a second signal"))))
        if self.deadline_s is not None:
            self._timer = threading.Timer(self.deadline_s, self.abort,
                                          args=(f"clean-up overran {self.deadline_s:.0f} s",))
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for sig, old in self._old:
            signal.signal(sig, old if old is not None else signal.SIG_DFL)

    def abort(self, reason: str) -> None:
        """Exit now (exit code 1), saying why and what was left behind."""
        if self.on_abort is not None:
            with contextlib.suppress(Exception):
                self.on_abort()
        left = "; ".join(self.left.values()) or "nothing"
        print(f"{self.command}: {reason}: exiting now; left behind: {left}", file=self.out or sys.stderr, flush=True)
        os._exit(1)


def forget_caught_interrupts() -> None:
    """Let ``python -m`` exit with the code the program chose after a KeyboardInterrupt it caught.

    CPython (3.8-3.11) records a KeyboardInterrupt that leaves an ``exec()``/``eval()`` of source text
    (a dataclass or namedtuple being defined, for one) in a process-wide flag, even when the program
    catches it further up; ``python -m`` then ends the process by SIGINT (exit status -2) after the
    program exited 0 or 1. A SIGTERM that lands while ``up`` defines a dataclass hits it. Called by
    ``fabricscope/__main__.py`` on the way out; an interrupt nobody caught sets the flag again after
    this and still exits by SIGINT. Without the flag (another interpreter) it does nothing.
    """
    import ctypes

    with contextlib.suppress(ValueError, AttributeError, OSError):
        ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 0


def call_abandonable(fn: Callable[[], object], timeout_s: float) -> bool:
    """Run ``fn`` in a daemon thread and wait at most ``timeout_s``; returns whether it finished.

    For calls no signal can interrupt and that take no timeout (librdkafka's consumer ``close()``):
    past the timeout the caller goes on and the thread is abandoned with the process.
    """
    t = threading.Thread(target=fn, daemon=True, name=getattr(fn, "__name__", "abandonable"))
    t.start()
    t.join(timeout_s)
    return not t.is_alive()
