"""CPU time, RSS and identity of processes from ``/proc`` (Linux), for the benchmarks."""

from __future__ import annotations

import os
import socket
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its threads so far (``/proc/PID/stat``); NaN if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15 of stat)


def threads_cpu_s(pid: int, name_prefix: str) -> float:
    """User + system CPU seconds so far of the threads of ``pid`` whose name (``comm``) starts with
    ``name_prefix`` (e.g. ``MergeMutate``, the ClickHouse engine's background merges); 0.0 if none."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if not (task / "comm").read_text().startswith(name_prefix):
                continue
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def peak_rss_mib(pid: int) -> float:
    """Peak resident set (``VmHWM``) of ``pid`` in MiB; NaN if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def rss_mib(pid: int) -> float:
    """Current resident set (``VmRSS``) of ``pid`` in MiB; NaN if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def listener_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` (IPv4 or IPv6), from ``/proc/net/tcp*`` and ``/proc/*/fd``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:  # the process ended, or is not ours to read
            continue
        for fd in fds:
            try:  # one fd at a time: a busy broker closes files while they are read, and must still be found
                if os.readlink(fd) in wanted:
                    return int(proc.name)
            except OSError:
                continue
    return None


def free_port() -> int:
    """A TCP port nobody listens on right now (127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
