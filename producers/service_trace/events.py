"""Service-tracing events and the connection table built from them (no bcc needed).

The tracer (:mod:`producers.service_trace.tracer`) prints one line per kernel event (the
``MODIFY`` line is wrapped here; it is one line)::

    MODIFY ts=123 pid=4242 comm=python cgroup=77 dev=mlx5_0 qpn=0x1a2 dqpn=0x3b4
           dgid=::ffff:10.0.2.1 fl=0x12345 sgid_index=3 tc=104
    DESTROY ts=130 pid=4242 comm=python cgroup=77 dev=mlx5_0 qpn=0x1a2

Fields are ``key=value`` separated by single spaces; in ``comm`` a space is written ``\\x20`` and a
backslash ``\\x5c`` (a task name may contain both). ``MODIFY`` is a QP's transition to RTR with an
address vector: from then on its packets go to ``dgid`` with flow label ``fl``, hence UDP source
port :func:`producers.controller.udp_sport_from_flow_label` (RoCEv2). ``DESTROY`` ends it.

:class:`ConnectionTable` applies events in order and yields the connection dicts that
:func:`producers.controller.service` copies into the ``service`` pinglist.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from producers.controller import udp_sport_from_flow_label
from schemas.inventory import Inventory

FLOW_LABEL_MASK = 0xFFFFF
KINDS = ("modify", "destroy")
_ESC = re.compile(r"\\x([0-9a-fA-F]{2})")


@dataclass(frozen=True)
class QpEvent:
    """One kernel event on a QP.

    Attributes:
        kind: ``"modify"`` (transition to RTR with an address vector) or ``"destroy"``.
        pid: the process (tgid) that made the call.
        comm: its task name.
        device: the RDMA device, e.g. ``"mlx5_0"``.
        qpn: the local QP number.
        dgid: destination GID text (``modify`` only; ``""`` for ``destroy``).
        flow_label: 20-bit IPv6 flow label the application set (0: the driver picks the port).
        sgid_index: source GID table index.
        dest_qpn: the remote QP number (0 when not given).
        traffic_class: the IPv6 traffic class byte (DSCP << 2 | ECN) from the address vector.
        cgroup: the cgroup v2 id of the process (0 when unknown).
        ts_ns: kernel monotonic timestamp.
    """

    kind: str
    pid: int
    comm: str
    device: str
    qpn: int
    dgid: str = ""
    flow_label: int = 0
    sgid_index: int = 0
    dest_qpn: int = 0
    traffic_class: int = 0
    cgroup: int = 0
    ts_ns: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"QpEvent.kind is {self.kind!r}; use one of {', '.join(KINDS)}")


def _escape_comm(comm: str) -> str:
    return comm.replace("\\", "\\x5c").replace(" ", "\\x20")


def _unescape_comm(text: str) -> str:
    return _ESC.sub(lambda m: chr(int(m.group(1), 16)), text)


def format_event(ev: QpEvent) -> str:
    """The event as one tracer output line (see the module docstring); :func:`parse_event` reads it back."""
    head = (
        f"{ev.kind.upper()} ts={ev.ts_ns} pid={ev.pid} comm={_escape_comm(ev.comm)} cgroup={ev.cgroup} "
        f"dev={ev.device} qpn={ev.qpn:#x}"
    )
    if ev.kind == "destroy":
        return head
    return (
        f"{head} dqpn={ev.dest_qpn:#x} dgid={ev.dgid} fl={ev.flow_label:#x} "
        f"sgid_index={ev.sgid_index} tc={ev.traffic_class}"
    )


def _int(fields: dict[str, str], key: str, default: int | None = None) -> int:
    if key not in fields:
        if default is None:
            raise KeyError(key)
        return default
    return int(fields[key], 0)


def parse_event(line: str) -> QpEvent:
    """Parse one tracer line.

    Raises:
        ValueError: not a ``MODIFY``/``DESTROY`` line, a required field is missing or malformed
            (the message quotes the line).
    """
    parts = line.strip().split(" ")
    if not parts or parts[0] not in ("MODIFY", "DESTROY"):
        raise ValueError(f"not a service-trace event (expected MODIFY or DESTROY first): {line!r}")
    fields: dict[str, str] = {}
    for p in parts[1:]:
        if not p:
            continue
        key, sep, value = p.partition("=")
        if not sep:
            raise ValueError(f"field {p!r} is not key=value in: {line!r}")
        fields[key] = value
    kind = parts[0].lower()
    try:
        dgid = ""
        if kind == "modify":
            dgid = str(ipaddress.IPv6Address(fields["dgid"]))
        return QpEvent(
            kind=kind,
            pid=_int(fields, "pid"),
            comm=_unescape_comm(fields.get("comm", "")),
            device=fields["dev"],
            qpn=_int(fields, "qpn"),
            dgid=dgid,
            flow_label=_int(fields, "fl", 0) & FLOW_LABEL_MASK,
            sgid_index=_int(fields, "sgid_index", 0),
            dest_qpn=_int(fields, "dqpn", 0),
            traffic_class=_int(fields, "tc", 0),
            cgroup=_int(fields, "cgroup", 0),
            ts_ns=_int(fields, "ts", 0),
        )
    except KeyError as e:
        raise ValueError(f"missing field {e.args[0]!r} in: {line!r}") from None
    except ValueError as e:
        raise ValueError(f"bad field value ({e}) in: {line!r}") from None


def parse_lines(lines: Iterable[str]) -> Iterator[QpEvent]:
    """Parse tracer output, skipping blank lines and ``#`` comments."""
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            yield parse_event(line)


def calc_flow_label(lqpn: int, rqpn: int) -> int:
    """The kernel's ``rdma_calc_flow_label``: the label a driver derives when the application gives 0."""
    fl = (lqpn * rqpn) & 0xFFFFFFFFFFFFFFFF
    fl ^= fl >> 20
    fl ^= fl >> 40
    return fl & FLOW_LABEL_MASK


def _gid_key(gid: str) -> int | None:
    try:
        return int(ipaddress.IPv6Address(gid))
    except ValueError:
        return None


def ib_netdev_map(sysfs: str | Path = "/sys/class/infiniband", port: int = 1, gid_index: int = 0) -> dict[str, str]:
    """RDMA device → netdev on this host, from ``<dev>/ports/<port>/gid_attrs/ndevs/<gid_index>``.

    Devices without a RoCE netdev (or an unreadable entry) are left out; no devices gives ``{}``.
    """
    out: dict[str, str] = {}
    root = Path(sysfs)
    if not root.is_dir():
        return out
    for dev in sorted(root.iterdir()):
        try:
            out[dev.name] = (dev / "ports" / str(port) / "gid_attrs" / "ndevs" / str(gid_index)).read_text().strip()
        except OSError:
            continue
    return out


JobOf = Callable[[QpEvent], str | None]


class ConnectionTable:
    """The live RC connections of one host, from its QP events.

    ``modify`` (RTR) adds or replaces the QP ``(device, qpn)``; ``destroy`` removes it. Only
    connections whose destination GID is an RNIC of the inventory become pinglist entries
    (others, e.g. to storage outside the fabric, are counted in :attr:`unmapped`).

    Args:
        inv: the cluster inventory (destination GIDs → RNICs).
        host: the inventory host these events came from.
        devices: RDMA device name → netdev or RNIC id on ``host`` (e.g. ``{"mlx5_0": "eth0"}``,
            from :func:`ib_netdev_map`); a device absent here is looked up as a netdev or RNIC id itself.
        job_of: the job id of an event's process: a callable, or a mapping tried by pid, cgroup id
            then comm; when it gives nothing the job id is the process's comm.
    """

    def __init__(
        self,
        inv: Inventory,
        host: str,
        devices: Mapping[str, str] | None = None,
        job_of: JobOf | Mapping[int | str, str] | None = None,
    ) -> None:
        self.inv = inv
        self.host = host
        self.devices = dict(devices or {})
        self._job_of = job_of
        self.qps: dict[tuple[str, int], QpEvent] = {}
        self.unmapped = 0
        self._by_gid = {k: r.id for r in inv.rnics.values() if (k := _gid_key(r.gid)) is not None}
        self._local = {r.netdev: r.id for r in (inv.rnics[i] for i in inv.rnics_of_host(host))}
        self._local.update({i: i for i in inv.rnics_of_host(host)})

    def apply(self, ev: QpEvent) -> None:
        """Apply one event: RTR adds (or replaces, on re-connect) the QP, destroy removes it."""
        key = (ev.device, ev.qpn)
        if ev.kind == "modify":
            self.qps[key] = ev
        else:
            self.qps.pop(key, None)

    def apply_all(self, events: Iterable[QpEvent]) -> ConnectionTable:
        for ev in events:
            self.apply(ev)
        return self

    def job_id(self, ev: QpEvent) -> str:
        j = self._job_of
        if callable(j):
            found = j(ev)
        elif j is not None:
            found = next((j[k] for k in (ev.pid, ev.cgroup, ev.comm) if k in j), None)
        else:
            found = None
        return found or ev.comm

    def src_rnic(self, device: str) -> str | None:
        """The local RNIC id of an RDMA device name, or ``None``."""
        name = self.devices.get(device, device)
        return self._local.get(name)

    def connections(self) -> list[dict]:
        """Connection dicts for :func:`producers.controller.service`, one per distinct 5-tuple.

        Keys: ``job_id``, ``src_rnic``, ``dst_rnic``, ``flow_label``, ``src_port`` (from the flow
        label; a label of 0 is replaced by the driver's ``rdma_calc_flow_label(qpn, dest_qpn)``),
        ``qpn``, ``dest_qpn`` and, when the address vector set one, ``traffic_class`` (DSCP).
        """
        out: dict[tuple, dict] = {}
        self.unmapped = 0
        for (device, qpn), ev in sorted(self.qps.items()):
            src = self.src_rnic(device)
            key = _gid_key(ev.dgid)
            dst = self._by_gid.get(key) if key is not None else None
            if src is None or dst is None:
                self.unmapped += 1
                continue
            fl = ev.flow_label or (calc_flow_label(qpn, ev.dest_qpn) if ev.dest_qpn else 0)
            conn = {
                "job_id": self.job_id(ev),
                "src_rnic": src,
                "dst_rnic": dst,
                "flow_label": fl,
                "src_port": udp_sport_from_flow_label(fl),
                "qpn": qpn,
                "dest_qpn": ev.dest_qpn,
            }
            if ev.traffic_class >> 2:
                conn["traffic_class"] = ev.traffic_class >> 2
            out.setdefault((conn["job_id"], src, dst, conn["src_port"], conn.get("traffic_class")), conn)
        return list(out.values())
