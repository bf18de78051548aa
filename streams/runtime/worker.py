"""Start a stream worker with a configuration handed in (the CLI's ``fabricscope worker``)."""

from __future__ import annotations

import sys

from streams.runtime.config import RuntimeConfig, configure


def run_worker(config: RuntimeConfig, loglevel: str = "warn") -> None:
    """Run one Faust worker of :mod:`streams.runtime.app` in the foreground (more workers share the partitions).

    The app declares its topics when imported, so ``config`` is set first.
    """
    configure(config)
    from streams.runtime.app import app  # imported after configure(): the topology reads the configuration

    sys.argv = ["fabricscope-worker", "worker", "-l", loglevel, "--without-web"]
    app.main()
