"""Flapping link: take a ToR's uplink down and up again on a period (``python -m infra.lab.flap``).

R-Pingmesh §5: a flapping port (a marginal optic, a loose cable) drops every packet while it is down,
for ``--down-s`` of every ``--period-s``, and passes them in between; far ToRs keep hashing onto it, so
probes through it fail in bursts. The interface is the ToR end of the cable (as ``link-down``); it is
always left up when the process ends (SIGTERM, SIGINT, or ``--duration``).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import threading

_stop = threading.Event()


def _set(netns: str, dev: str, state: str) -> None:
    subprocess.run(["ip", "netns", "exec", netns, "ip", "link", "set", "dev", dev, state], check=False,
                   capture_output=True)


def flap(netns: str, dev: str, period_s: float, down_s: float, duration_s: float | None = None) -> None:
    """Set ``dev`` in ``netns`` down for ``down_s`` then up for ``period_s - down_s``, until stopped or
    ``duration_s`` has passed; always ends with the link up.

    Raises:
        ValueError: ``down_s`` not in (0, ``period_s``).
    """
    if not 0 < down_s < period_s:
        raise ValueError(f"down_s={down_s} must be in (0, period_s={period_s})")
    stop_at = threading.Timer(duration_s, _stop.set) if duration_s else None
    if stop_at:
        stop_at.start()
    try:
        while not _stop.is_set():
            _set(netns, dev, "down")
            if _stop.wait(down_s):
                break
            _set(netns, dev, "up")
            _stop.wait(period_s - down_s)
    finally:
        _set(netns, dev, "up")
        if stop_at:
            stop_at.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m infra.lab.flap", description=__doc__.splitlines()[0])
    ap.add_argument("--netns", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--period-s", type=float, default=10.0)
    ap.add_argument("--down-s", type=float, default=2.0)
    ap.add_argument("--duration", type=float)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: _stop.set())
    signal.signal(signal.SIGINT, lambda *_: _stop.set())
    flap(a.netns, a.dev, a.period_s, a.down_s, a.duration)


if __name__ == "__main__":
    main()
