"""Run until SIGTERM: the one stop flag every long-running command (sink, sources, alerts) uses."""

from __future__ import annotations

import signal
from collections.abc import Callable


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
