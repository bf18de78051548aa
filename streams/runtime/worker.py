"""Start a stream worker with a configuration handed in (the CLI's ``fabricscope worker``)."""

from __future__ import annotations

import sys

from streams.runtime.config import RuntimeConfig


def run_worker(config: RuntimeConfig, loglevel: str = "warn") -> None:
    """Run one Faust worker of :mod:`streams.runtime.app` in the foreground (more workers share the partitions).

    The app is built from ``config`` (:func:`streams.runtime.app.build_app`), its side inputs caught up, then
    Faust's worker runs it until it is stopped.
    """
    # No banner (--quiet) and no spinner: they glue onto `up`'s progress line and fill log files with
    # escape codes. Faust drops its spinner only below WARN; this makes it drop it at every level.
    import faust.worker

    from streams.runtime.app import build_app

    worker = build_app(config)
    worker.warm_side_inputs()  # before joining the group: the partitions are not held while the paths load

    faust.worker.Worker._disable_spinner_if_level_below_WARN = (  # type: ignore[method-assign]
        lambda self, level: setattr(self, "spinner", None))
    sys.argv = ["fabricscope-worker", "--quiet", "worker", "-l", loglevel, "--without-web"]
    worker.app.main()
