"""Process groups: every child fabricscope starts leads a group (or session) of its own, and is ended as one.

``killpg`` rather than ``kill``: a child's own helpers (a shell's java, a builder's forks) are in
its group and go with it, and a terminal's Ctrl-C reaches only the foreground group of the parent.
"""

from __future__ import annotations

import contextlib
import ctypes
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


_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, parent_pid: int | None = None) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent thread exits (Linux ``PR_SET_PDEATHSIG``).

    Called by the child itself at start-up, never in a ``preexec_fn`` (Python code in a fork of a
    multi-threaded process is not safe). With ``parent_pid``: exit now if the parent is already gone.

    Raises:
        OSError: prctl(2) refused.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)
