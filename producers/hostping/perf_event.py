"""``perf_event_open(2)`` through ctypes: open, enable, read and close one counting event.

Stdlib only (the agent and ``scripts/gpu-check`` use it without extra packages). Counting mode
only: no sampling, no ring buffer; one ``read(2)`` of a ``u64`` gives the count since enable.
Uncore PMUs count per socket, so they are opened system-wide on one CPU of the PMU's ``cpumask``
(``pid = -1``, ``cpu = N``), which needs ``kernel.perf_event_paranoid`` <= 0 or CAP_PERFMON
(CAP_SYS_ADMIN before Linux 5.8); the error says so.

Struct layout: ``include/uapi/linux/perf_event.h``, ``PERF_ATTR_SIZE_VER1`` (72 bytes:
``config1``/``config2`` included, which some uncore formats use).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import struct

# perf_event_open syscall numbers (arch/*/entry/syscalls, asm-generic/unistd.h).
_SYSCALL_NR = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331, "i686": 336}
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_TASK_CLOCK = 1
ATTR_SIZE_VER1 = 72
_DISABLED, _INHERIT, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 1, 1 << 5, 1 << 6
_IOC_ENABLE, _IOC_DISABLE = 0x2400, 0x2401  # _IO('$', 0), _IO('$', 1)


class PerfEventError(OSError):
    """An event could not be opened or read; the message names the event and the privilege missing."""


class _Attr(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
    ]


assert ctypes.sizeof(_Attr) == ATTR_SIZE_VER1

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _paranoid() -> str:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            return f.read().strip()
    except OSError:
        return "?"


class PerfCounter:
    """One open counting event (a file descriptor); use as a context manager or call :meth:`close`.

    Args:
        pmu_type: the PMU's ``type`` (``/sys/bus/event_source/devices/<pmu>/type``).
        config, config1, config2: the event encoding (see :func:`producers.hostping.uncore.encode`).
        cpu: the CPU to count on (``-1`` with ``pid >= 0``: the task on any CPU).
        pid: ``-1`` for system-wide counting (uncore), ``0`` for this process.
        label: how errors name the event (``uncore_imc_0/cas_count_read``).

    Raises:
        PerfEventError: the kernel refused (EACCES/EPERM: privilege; ENOENT/EINVAL: the PMU or event
            does not exist here); ``OSError`` on an architecture without a known syscall number.
    """

    def __init__(self, pmu_type: int, config: int, *, config1: int = 0, config2: int = 0, cpu: int = -1,
                 pid: int = -1, label: str = "", exclude_kernel: bool = False) -> None:
        nr = _SYSCALL_NR.get(platform.machine())
        if nr is None:
            raise OSError(f"perf_event_open: no syscall number known for {platform.machine()}")
        attr = _Attr(type=pmu_type, size=ATTR_SIZE_VER1, config=config, config1=config1, config2=config2,
                     flags=_DISABLED | (_EXCLUDE_KERNEL | _EXCLUDE_HV if exclude_kernel else 0))
        fd = _libc.syscall(nr, ctypes.byref(attr), pid, cpu, -1, 0)
        if fd < 0:
            err = ctypes.get_errno()
            hint = ""
            if err in (errno.EACCES, errno.EPERM):
                hint = (f"; kernel.perf_event_paranoid is {_paranoid()}: system-wide (uncore) counters need "
                        "it <= 0, or CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8)")
            elif err in (errno.ENOENT, errno.EINVAL, errno.ENODEV, errno.EOPNOTSUPP):
                hint = "; the PMU or event encoding does not exist on this machine"
            raise PerfEventError(err, f"perf_event_open {label or (pmu_type, hex(config))} on cpu {cpu}: "
                                      f"{os.strerror(err)}{hint}")
        self.fd = int(fd)
        self.label = label
        _libc.ioctl(self.fd, _IOC_ENABLE, 0)

    def read(self) -> int:
        """The count since enable (``u64``).

        Raises:
            PerfEventError: the read returned fewer than 8 bytes (the event was closed or detached).
        """
        data = os.read(self.fd, 8)
        if len(data) != 8:
            raise PerfEventError(errno.EIO, f"{self.label}: short read of {len(data)} bytes")
        return int(struct.unpack("Q", data)[0])

    def close(self) -> None:
        """Disable and close the event (idempotent)."""
        if self.fd >= 0:
            _libc.ioctl(self.fd, _IOC_DISABLE, 0)
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PerfCounter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
