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
