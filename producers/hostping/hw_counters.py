"""RDMA port counters from sysfs: ``/sys/class/infiniband/<dev>/ports/<port>/{hw_counters,counters}/*``.

``hw_counters`` (mlx5) count RoCE transport events: ``local_ack_timeout_err``
(retransmission timeouts, i.e. loss), ``out_of_sequence``, ``packet_seq_err``,
``np_cnp_sent``/``rp_cnp_handled`` (DCQCN congestion notifications). ``counters``
hold the IB port counters (``link_downed``, ``link_error_recovery``, ``symbol_error``).
All are cumulative since boot: a live monitor uses :func:`deltas` between two reads
(Hostping §3.2: anomaly metrics every 1 s).
"""

from __future__ import annotations

import re

from producers.hostping.findings import Finding
from producers.hostping.sysfs import SysfsSnapshot

_PATH = re.compile(r"^/sys/class/infiniband/(?P<dev>[^/]+)/ports/(?P<port>\d+)/(?:hw_counters|counters)/(?P<n>\w+)$")
IB_ROOT = "/sys/class/infiniband"
LOSS_COUNTERS = ("local_ack_timeout_err", "out_of_sequence", "packet_seq_err", "implied_nak_seq_err")
CONGESTION_COUNTERS = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets")
FLAP_COUNTERS = ("link_downed", "link_error_recovery")

Port = tuple[str, int]


def read(snap: SysfsSnapshot) -> dict[Port, dict[str, int]]:
    """``{(rdma_dev, port): {counter: value}}`` from a live root or a capture; non-integers are skipped."""
    paths = [k for k in snap.files if _PATH.match(k)]
    if snap.root is not None:
        for dev in snap.listdir(IB_ROOT):
            for port in snap.listdir(f"{IB_ROOT}/{dev}/ports"):
                for sub in ("hw_counters", "counters"):
                    base = f"{IB_ROOT}/{dev}/ports/{port}/{sub}"
                    paths += [f"{base}/{n}" for n in snap.listdir(base)]
    out: dict[Port, dict[str, int]] = {}
    for p in paths:
        m = _PATH.match(p)
        v = snap.read(p)
        if m is None or v is None:
            continue
        try:
            out.setdefault((m["dev"], int(m["port"])), {})[m["n"]] = int(v)
        except ValueError:
            continue
    return out


def deltas(prev: dict[str, int], cur: dict[str, int]) -> dict[str, int]:
    """Per-counter increase between two reads; a counter that went down (reset) counts from zero."""
    return {k: (v - prev[k] if k in prev and v >= prev[k] else v) for k, v in cur.items()}


def first_line(snap: SysfsSnapshot, port: Port) -> str:
    """Capture line of the port's first counter, as a string ('' for a live tree)."""
    lines = [n for k, n in snap.lines.items() if k.startswith(f"{IB_ROOT}/{port[0]}/ports/{port[1]}/")]
    return str(min(lines)) if lines else ""


def findings(snap: SysfsSnapshot) -> list[Finding]:
    """Port flapping from ``link_downed``/``link_error_recovery`` (cumulative, so a warning)."""
    out = []
    for (dev, port), c in read(snap).items():
        flaps = {k: c[k] for k in FLAP_COUNTERS if c.get(k, 0) > 0}
        if flaps:
            out.append(
                Finding(
                    "rnic",
                    f"{dev}/port{port}",
                    "warning",
                    "The RDMA port went down or retrained since boot: a flapping port, cable or transceiver. "
                    "Compare with a second read (deltas) before draining; check the cable and the ToR port.",
                    {"subkind": "port_flapping", **flaps, "cumulative": True},
                    "failure",
                    first_line(snap, (dev, port)),
                )
            )
    return out
