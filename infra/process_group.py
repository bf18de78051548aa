"""Process groups: every child fabricscope starts leads a group (or session) of its own, and is ended as one.

``killpg`` rather than ``kill``: a child's own helpers (a shell's java, a builder's forks) are in
its group and go with it, and a terminal's Ctrl-C reaches only the foreground group of the parent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to the process group ``proc`` leads; quiet when the group is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the group ``proc`` leads (helpers it left behind included) and reap ``proc``."""
    signal_group(proc, signal.SIGKILL)
    proc.wait()
