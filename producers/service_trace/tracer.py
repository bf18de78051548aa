"""Load ``qp_trace.bpf.c`` with bcc on an RNIC host and print one event line per QP change.

Needs bcc (the distribution's ``python3-bpfcc``/``python3-bcc``; it is not a PyPI package), root
(or CAP_BPF + CAP_PERFMON) and at least one RDMA device. Where any is missing,
:func:`run_tracer` raises :class:`TracerUnavailable` naming each missing piece; it never makes
up events. The job-published connection list (:func:`producers.controller.load_connections`)
is the fallback on such hosts.

Usage on an RNIC host::

    sudo python -m producers.service_trace.tracer > qp_events.log
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from producers.service_trace.events import QpEvent, format_event

BPF_SOURCE = Path(__file__).with_name("qp_trace.bpf.c")
MODIFY_SYMBOLS = ("_ib_modify_qp", "ib_modify_qp_with_udata")
DESTROY_SYMBOL = "ib_destroy_qp_user"
EV_MODIFY, EV_DESTROY = 1, 2


class TracerUnavailable(RuntimeError):
    """The tracer cannot run on this host; ``missing`` lists what is absent."""

    def __init__(self, missing: list[str]):
        self.missing = missing
        lines = "\n".join(f"  - {m}" for m in missing)
        super().__init__(
            "service tracing (eBPF on modify_qp/destroy_qp) cannot run here:\n"
            f"{lines}\nUse a job-published connection list instead (producers.controller.load_connections)."
        )


def _rdma_devices(sysfs: str | Path) -> list[str]:
    root = Path(sysfs)
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def check_environment(sysfs: str | Path = "/sys/class/infiniband") -> object:
    """Return the ``bcc`` module when everything the tracer needs is here.

    Raises:
        TracerUnavailable: listing every missing piece (bcc not installed, not root, no RDMA device).
    """
    missing = []
    bcc = None
    try:
        import bcc  # type: ignore[import-not-found]
    except ImportError as e:
        missing.append(
            f"bcc is not installed ({e}); install the distribution's python3-bpfcc (Debian/Ubuntu) "
            "or python3-bcc (RHEL/Fedora) and run with that Python"
        )
    if os.geteuid() != 0:
        missing.append(f"not root (euid {os.geteuid()}); loading kprobes needs root or CAP_BPF + CAP_PERFMON")
    if not _rdma_devices(sysfs):
        missing.append(f"no RDMA device ({sysfs} is empty or absent); this host has no RNIC to trace")
    if missing:
        raise TracerUnavailable(missing)
    return bcc


def _to_event(raw: object) -> QpEvent:
    """A :class:`QpEvent` from the ctypes struct bcc decodes for ``struct qp_event_t``."""
    kind = "modify" if raw.kind == EV_MODIFY else "destroy"
    return QpEvent(
        kind=kind,
        pid=int(raw.pid),
        comm=bytes(raw.comm).split(b"\0", 1)[0].decode(errors="replace"),
        device=bytes(raw.dev).split(b"\0", 1)[0].decode(errors="replace"),
        qpn=int(raw.qpn),
        dgid=str(ipaddress.IPv6Address(bytes(raw.dgid))) if kind == "modify" else "",
        flow_label=int(raw.flow_label) & 0xFFFFF,
        sgid_index=int(raw.sgid_index),
        dest_qpn=int(raw.dest_qpn),
        traffic_class=int(raw.traffic_class),
        cgroup=int(raw.cgroup_id),
        ts_ns=int(raw.ts_ns),
    )


def run_tracer(
    out: TextIO = sys.stdout,
    *,
    on_event: Callable[[QpEvent], None] | None = None,
    duration_s: float | None = None,
    sysfs: str | Path = "/sys/class/infiniband",
) -> None:
    """Trace RTR transitions and QP destruction until interrupted (or ``duration_s``).

    Each event is written to ``out`` as a line of :func:`~producers.service_trace.events.format_event`
    and passed to ``on_event`` (e.g. :meth:`ConnectionTable.apply`).

    Raises:
        TracerUnavailable: bcc, root or an RDMA device is missing (see :func:`check_environment`).
    """
    import time

    bcc = check_environment(sysfs)
    b = bcc.BPF(src_file=str(BPF_SOURCE))
    modify = next((s for s in MODIFY_SYMBOLS if b.ksymname(s) != -1), None)
    if modify is None:
        raise TracerUnavailable([f"none of the kernel symbols {', '.join(MODIFY_SYMBOLS)} exist (ib_core not loaded?)"])
    b.attach_kprobe(event=modify, fn_name="trace_modify_qp")
    b.attach_kprobe(event=DESTROY_SYMBOL, fn_name="trace_destroy_qp")
    table = b["qp_events"]

    def handle(cpu: int, data: int, size: int) -> None:
        ev = _to_event(table.event(data))
        out.write(format_event(ev) + "\n")
        out.flush()
        if on_event is not None:
            on_event(ev)

    table.open_perf_buffer(handle)
    end = None if duration_s is None else time.monotonic() + duration_s
    try:
        while end is None or time.monotonic() < end:
            b.perf_buffer_poll(timeout=200)
    except KeyboardInterrupt:
        pass
    finally:
        b.cleanup()


if __name__ == "__main__":
    try:
        run_tracer()
    except TracerUnavailable as e:
        sys.exit(str(e))
