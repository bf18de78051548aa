"""Service tracing (R-Pingmesh §3.2): learn a job's RC connections from the kernel's modify_qp/destroy_qp.

* ``qp_trace.bpf.c`` — the bcc kprobe program (RTR transitions and QP destruction).
* :mod:`.events` — the event line format, :class:`~.events.QpEvent` and the
  :class:`~.events.ConnectionTable` that turns events into connection dicts for
  :func:`producers.controller.service`.
* :mod:`.tracer` — :func:`~.tracer.run_tracer`, which loads the program with bcc on an RNIC host.

Without RDMA or bcc (as on the development machines) only the parsing and list building run;
the job-published connection list (:func:`producers.controller.load_connections`) is the fallback.
"""

from producers.service_trace.events import ConnectionTable, QpEvent, format_event, parse_event, parse_lines

__all__ = ["ConnectionTable", "QpEvent", "format_event", "parse_event", "parse_lines"]
