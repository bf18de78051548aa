"""Flapping link: take a ToR's uplink down and up again on a period (``python -m infra.lab.flap``).

R-Pingmesh §5: a flapping port (a marginal optic, a loose cable) drops every packet while it is down,
for ``--down-s`` of every ``--period-s``, and passes them in between; far ToRs keep hashing onto it, so
probes through it fail in bursts. The interface is the ToR end of the cable (as ``link-down``); it is
always left up when the process ends (SIGTERM, SIGINT, or ``--duration``).
"""

from __future__ import annotations

import argparse
import math
import signal
import threading
import time

from pyroute2 import IPRoute

_stop = threading.Event()


def flap(netns: str, dev: str, period_s: float, down_s: float, duration_s: float | None = None) -> None:
    """Set ``dev`` in ``netns`` down for ``down_s`` then up for ``period_s - down_s``, until stopped or
    ``duration_s`` has passed; always ends with the link up.

    One netlink socket in the namespace (pyroute2), opened once: this process forks nothing per flap, and
    it runs no thread of its own, so the one fork pyroute2 makes to enter the namespace is of a
    single-threaded process.

    Raises:
        ValueError: ``down_s`` not in (0, ``period_s``); ``dev`` not in ``netns``.
    """
    if not 0 < down_s < period_s:
        raise ValueError(f"down_s={down_s} must be in (0, period_s={period_s})")
    deadline = time.monotonic() + duration_s if duration_s else math.inf

    def done_after(s: float) -> bool:
        """Wait ``s`` seconds or less; True when stopped or past the deadline."""
        return _stop.wait(max(0.0, min(s, deadline - time.monotonic()))) or time.monotonic() >= deadline

    with IPRoute(netns=netns) as ipr:
        found = ipr.link_lookup(ifname=dev)
        if not found:
            raise ValueError(f"no interface {dev!r} in netns {netns!r}")
        try:
            while True:
                ipr.link("set", index=found[0], state="down")
                if done_after(down_s):
                    break
                ipr.link("set", index=found[0], state="up")
                if done_after(period_s - down_s):
                    break
        finally:
            ipr.link("set", index=found[0], state="up")


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
