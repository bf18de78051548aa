"""One `fabricscope up` per store and per lab: an exclusive ``fcntl`` lock on a file that holds the owner's pid.

The kernel drops an ``flock`` when its holder dies (SIGKILL and OOM included), so a stale
file never blocks a new run; the pid written inside only names the owner in the refusal.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO


class Busy(RuntimeError):
    """Another process holds the lock; ``pid`` is its pid (0 when it wrote none yet)."""

    def __init__(self, path: Path, pid: int, what: str, hint: str = "stop it first") -> None:
        self.path, self.pid, self.what = path, pid, what
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"{what} is in use by {who} (lock {path}); {hint}")


class RunLock:
    """An exclusive, non-blocking lock on ``path`` (created 0600, parent 0700); release on close or exit.

    Raises:
        Busy: on :meth:`acquire` when another live process holds it.
    """

    def __init__(self, path: Path, what: str, note: str = "", hint: str = "stop it first") -> None:
        self.path, self.what, self.note, self.hint = Path(path), what, note, hint
        self._f: IO[str] | None = None
        self.previous_pid = 0
        """After :meth:`acquire`: the pid a previous holder left in the file (it died holding the lock), else 0."""

    def acquire(self) -> RunLock:
        """Take the lock and write this pid into the file."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        f = os.fdopen(fd, "r+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = f.readline().strip()
            f.close()
            raise Busy(self.path, int(text) if text.isdigit() else 0, self.what, self.hint) from None
        f.seek(0)
        text = f.readline().strip()
        self.previous_pid = int(text) if text.isdigit() and int(text) != os.getpid() else 0
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n{self.note}\n")
        f.flush()
        self._f = f
        return self

    def release(self) -> None:
        """Drop the lock; the file keeps the note (who made what), not the pid."""
        if self._f is not None:
            self._f.seek(0)
            self._f.truncate()
            self._f.write(f"\n{self.note}\n")
            self._f.close()
            self._f = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


def holder(path: Path) -> int | None:
    """The pid holding the lock at ``path`` (0 if it wrote none), or None when nobody holds it."""
    try:
        f = open(path)  # noqa: SIM115 - closed below on both paths
    except OSError:
        return None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = f.readline().strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(f, fcntl.LOCK_UN)
    return None


def note(path: Path) -> str:
    """The note the last holder of the lock at ``path`` left ('' when none)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return ""
    return lines[1] if len(lines) > 1 else ""
