"""Busy host: stop a responder in SIGSTOP/SIGCONT bursts (``python -m infra.lab.busy``).

R-Pingmesh §6: a training job that keeps the agent's CPU busy makes ACKs leave
late, so probes to every RNIC of that host time out together and briefly. A CPU
hog on two shared cores delays a responder by milliseconds only, so the lab
stops it outright for ``--stop-ms`` (default 700, past the 500 ms timeout) every
``--stop-ms + --run-ms``. The kernel still stamps arriving probes (t3), so only
the responder delay t4 - t3 grows; network RTT does not.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import time

_running = True


def _stop(*_: object) -> None:
    global _running
    _running = False


def throttle(pid: int, stop_ms: float, run_ms: float, duration_s: float | None = None) -> None:
    """Alternate SIGSTOP for ``stop_ms`` and SIGCONT for ``run_ms`` on ``pid``; always ends with SIGCONT."""
    end = time.monotonic() + duration_s if duration_s else None
    try:
        while _running and (end is None or time.monotonic() < end):
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stop_ms / 1000)
            os.kill(pid, signal.SIGCONT)
            time.sleep(run_ms / 1000)
    except ProcessLookupError:
        return
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m infra.lab.busy", description=__doc__.splitlines()[0])
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--stop-ms", type=float, default=700.0)
    ap.add_argument("--run-ms", type=float, default=300.0)
    ap.add_argument("--duration", type=float)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    throttle(a.pid, a.stop_ms, a.run_ms, a.duration)


if __name__ == "__main__":
    main()
