"""Start a stream worker with a configuration handed in (the CLI's ``fabricscope worker``)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

from streams.runtime.config import RuntimeConfig


def _interrupt_and_remember() -> Callable[[], bool]:
    """SIGINT and SIGTERM raise KeyboardInterrupt, as Ctrl-C does, and are remembered: the check returns True
    once one came. Python only prints a KeyboardInterrupt raised inside a callback it runs for the
    interpreter (the import system's module-lock weakref callback, during Faust's imports), and the worker
    then ran on; the check catches that stop before the worker joins its group."""
    came = False

    def _stop(signum: int, frame: object) -> None:
        nonlocal came
        came = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    return lambda: came


def run_worker(config: RuntimeConfig, loglevel: str = "warn") -> None:
    """Run one Faust worker of :mod:`streams.runtime.app` in the foreground (more workers share the partitions).

    The app is built from ``config`` (:func:`streams.runtime.app.build_app`), its side inputs caught up, then
    Faust's worker runs it until it is stopped.

    Raises:
        KeyboardInterrupt: SIGINT or SIGTERM came before Faust's worker took the signals over.
    """
    stopped = _interrupt_and_remember()
    # No banner (--quiet) and no spinner: they glue onto `up`'s progress line and fill log files with
    # escape codes. Faust drops its spinner only below WARN; this makes it drop it at every level.
    import faust.worker

    from streams.runtime.app import build_app

    worker = build_app(config)
    worker.warm_side_inputs()  # before joining the group: the partitions are not held while the paths load
    if stopped():  # a stop whose KeyboardInterrupt Python swallowed on the way here
        raise KeyboardInterrupt

    faust.worker.Worker._disable_spinner_if_level_below_WARN = (  # type: ignore[method-assign]
        lambda self, level: setattr(self, "spinner", None))
    sys.argv = ["fabricscope-worker", "--quiet", "worker", "-l", loglevel, "--without-web"]
    worker.app.main()
