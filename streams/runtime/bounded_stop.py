"""Faust's worker with a bounded stop: a stream worker that is asked to stop is gone within seconds.

Faust's worker (``mode.Worker``) stops on the first SIGINT or SIGTERM by awaiting every service's stop,
and takes no further notice of a second signal; a stop that hangs keeps the process for good (a stream
worker under a backlog of ``probes.raw``, sent SIGTERM by its benchmark, still ran minutes later with
its main thread idle in ``Worker.stop_and_shutdown``). Here the first signal also starts a timer: past
:data:`STOP_DEADLINE_S`, or on a second signal, the process exits at once with code 1 and a line on
stderr. Nothing is lost by that: the offsets it did not commit are read again by its group, and the
store writer takes a replayed message once (its dedup tokens).
"""

from __future__ import annotations

import os
import sys
import threading
from signal import Signals

import faust

STOP_DEADLINE_S = 10.0
"""Seconds a stream worker's stop may take (Faust commits, leaves the group and flushes its producer)."""


class BoundedStopWorker(faust.Worker):
    """Faust's worker (``faust.Worker``) whose stop on a signal is bounded (see the module docstring).

    Attributes:
        stop_deadline_s: seconds from the first SIGINT/SIGTERM to the exit, at most.
    """

    stop_deadline_s: float = STOP_DEADLINE_S

    def _schedule_shutdown(self, sig: Signals) -> None:
        # mode calls this for every SIGINT/SIGTERM; it acts on the first only
        if self._signal_stop_time:
            exit_now("a second signal")
        timer = threading.Timer(self.stop_deadline_s, exit_now, args=(f"its stop overran {self.stop_deadline_s:g} s",))
        timer.daemon = True  # a stop in time ends the process, timer and all
        timer.start()
        super()._schedule_shutdown(sig)


def exit_now(reason: str) -> None:
    """Say why on stderr and end the process with code 1, no clean-up (``os._exit``: nothing may block it)."""
    print(f"fabricscope worker: {reason}: exiting now; its group reads again what it did not commit",
          file=sys.stderr, flush=True)
    os._exit(1)
