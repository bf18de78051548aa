"""The ``verbs`` probe backend: R-Pingmesh's prober and responder on one UD queue pair per RNIC.

R-Pingmesh §4.2.1 and Table 1: an Unreliable Datagram (UD) QP writes its send
completion when the packet leaves, so the CQE timestamps of an extended CQ
(``ibv_create_cq_ex`` with ``IBV_WC_EX_WITH_COMPLETION_TIMESTAMP``) give

- t2: the prober RNIC's send CQE of the probe; t5: its receive CQE of ACK1;
- t3: the responder RNIC's receive CQE of the probe; t4: its send CQE of ACK1,

in device cycles of a free-running clock, converted to ns with the device's
``hca_core_clock`` (kHz). Differences are taken on one device only: the responder
converts t3 and t4 with its own clock rate and ACK2 carries them. One UD QP
reaches every peer through an address handle per (peer GID, flow label); RoCEv2
derives the UDP source port from the flow label, so copying a job's flow label
copies its 5-tuple (and its ECMP path).

This module has two halves:

- :class:`VerbsProtocol`: the protocol as a state machine over completions
  (packing, ACK matching, timeouts, clock conversion); device-free and tested;
- :class:`VerbsDevice`: the pyverbs resources (PD, extended CQ, UD QP, MR, AHs).
  It needs ``pyverbs`` (the distribution's ``python3-pyverbs`` or the
  ``fabricscope[verbs]`` extra) and an RDMA device, and raises
  :class:`VerbsUnavailable` with what to do when either is missing. It is never
  faked: without a device there are no verbs rows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from producers.probe_protocol import TIMEOUT_NS, Admission, InFlight, PendingProbe
from producers.udp_wire import ACK1, ACK2, PAYLOAD_BYTES, PROBE, Packet, decode

GRH_BYTES = 40  # a UD receive buffer starts with the 40-byte Global Route Header
PROBE_QKEY = 0x11111111
RECV_DEPTH = 512


class VerbsUnavailable(RuntimeError):
    """No pyverbs or no RDMA device here; the message says what to install or use instead."""


@dataclass(frozen=True)
class DeviceClock:
    """An RNIC's free-running clock: ``hca_core_clock`` in kHz (``ibv_query_device_ex``)."""

    khz: int

    def __post_init__(self) -> None:
        if self.khz <= 0:
            raise ValueError(f"hca_core_clock of {self.khz} kHz: the device reports no clock rate")

    def to_ns(self, cycles: int) -> int:
        """Device cycles -> ns on the device's own time line (exact integer arithmetic)."""
        return cycles * 1_000_000 // self.khz


def gid_of_grh(grh: bytes) -> str:
    """The source GID in a GRH (bytes 8..24) as IPv6 text (``::ffff:10.1.1.2`` for IPv4 RoCEv2)."""
    import ipaddress

    addr = ipaddress.IPv6Address(bytes(grh[8:24]))
    return f"::ffff:{addr.ipv4_mapped}" if addr.ipv4_mapped else str(addr)  # as schemas.inventory.gid_from_ip


def flow_label_of_grh(grh: bytes) -> int:
    """The 20-bit flow label in a GRH's first word (version 4 bits, traffic class 8, flow label 20)."""
    return int.from_bytes(grh[:4], "big") & 0xFFFFF


def unpack_recv(buf: bytes) -> tuple[str, int, Packet | None]:
    """Split a UD receive buffer into (source GID, flow label, decoded payload or None)."""
    if len(buf) < GRH_BYTES + PAYLOAD_BYTES:
        return "", 0, None
    grh = buf[:GRH_BYTES]
    return gid_of_grh(grh), flow_label_of_grh(grh), decode(buf[GRH_BYTES : GRH_BYTES + PAYLOAD_BYTES])


@dataclass(frozen=True)
class Send:
    """An action for the device: post ``packet`` to ``(gid, qpn)`` with ``flow_label``; ``ref`` names it."""

    gid: str
    qpn: int
    flow_label: int
    packet: Packet
    ref: tuple[str, Any]


@dataclass
class VerbsProtocol:
    """Prober and responder logic of one RNIC over completions (no device access).

    The device layer calls :meth:`probe` to start a probe, and
    :meth:`on_send_cqe` / :meth:`on_recv_cqe` with each completion; both return
    the :class:`Send` actions to post. Finished rows go to ``on_probe``.

    Args:
        agent_id, host, rnic: names for the rows.
        clock: this RNIC's clock (cycles -> ns).
        qpn: this RNIC's UD QPN (probes to another QPN are ignored: stale QPN).
        allowed_gids: registered source GIDs the responder answers.
        rate_limit: per-source responder limit, packets/s.
    """

    agent_id: str
    host: str
    rnic: str
    clock: DeviceClock
    qpn: int
    allowed_gids: set[str] = field(default_factory=set)
    rate_limit: float = 500.0
    on_probe: Callable[[dict[str, Any]], None] = lambda row: None
    pending: dict[int, PendingProbe] = field(default_factory=dict)
    counters: dict[str, int] = field(
        default_factory=lambda: {"dropped_unregistered": 0, "dropped_rate": 0, "dropped_stale_qpn": 0}
    )
    _seq: int = field(default_factory=lambda: int.from_bytes(os.urandom(4), "big") << 16)

    def __post_init__(self) -> None:
        self._inflight = InFlight(self.agent_id, self.host, self.on_probe, self.pending)
        self._admission = Admission(self.allowed_gids, self.rate_limit, self.counters)

    def probe(self, entry: dict[str, Any], now_mono: int | None = None) -> Send:
        """Start a probe for pinglist ``entry`` (needs ``gid``, ``qpn``, ``dst_ip``); t1 is read here."""
        self._seq += 1
        seq = self._seq
        t1 = time.time_ns()
        now = now_mono if now_mono is not None else time.monotonic_ns()
        e = dict(entry, src_port=int(entry.get("src_port") or 0), dst_port=int(entry.get("dst_port") or 4791))
        p = PendingProbe(e, seq, t1, now + TIMEOUT_NS, hardware=True)
        self._inflight.add(p)
        pkt = Packet(PROBE, seq, int(entry["qpn"]), self.qpn)
        return Send(str(entry["gid"]), int(entry["qpn"]), int(entry.get("flow_label") or 0), pkt, ("probe", seq))

    def on_send_cqe(self, ref: tuple[str, Any], ts_cycles: int) -> list[Send]:
        """A send completion: t2 of a probe, or t4 of an ACK1 (then ACK2 goes out)."""
        kind, data = ref
        ts = self.clock.to_ns(ts_cycles)
        if kind == "probe":
            p = self.pending.get(data)
            if p is not None:
                p.t2 = ts
            return []
        if kind == "ack1":
            gid, src_qpn, flow_label, seq, t3, prober_qpn = data
            ack2 = Packet(ACK2, seq, self.qpn, prober_qpn, t3, ts, True)
            return [Send(gid, src_qpn, flow_label, ack2, ("ack2", seq))]
        return []

    def on_recv_cqe(self, buf: bytes, src_qpn: int, ts_cycles: int) -> list[Send]:
        """A receive completion with its buffer (GRH + payload): probe, ACK1 or ACK2.

        The responder answers with the probe's flow label, so ACKs hash like the probe's reverse.
        """
        t_user = time.time_ns()
        gid, flow_label, pkt = unpack_recv(buf)
        if pkt is None:
            return []
        ts = self.clock.to_ns(ts_cycles)
        if pkt.kind == PROBE:
            if not self._admission.admit(gid, time.monotonic()):
                return []
            if pkt.qpn != self.qpn:
                self.counters["dropped_stale_qpn"] += 1
                return []
            ack1 = Packet(ACK1, pkt.seq, self.qpn, pkt.prober_qpn)
            ref = ("ack1", (gid, src_qpn, flow_label, pkt.seq, ts, pkt.prober_qpn))
            return [Send(gid, src_qpn, flow_label, ack1, ref)]
        p = self.pending.get(pkt.seq)
        if p is None or gid != p.entry.get("gid"):
            return []
        if pkt.kind == ACK1 and p.t5 is None:
            p.t5, p.t6 = ts, t_user
        elif pkt.kind == ACK2:
            p.t3, p.t4, p.responder_hw = pkt.t3, pkt.t4, pkt.hardware
        if p.t5 is not None and p.t3 is not None:
            self._inflight.finish(p)
        return []

    def expire(self, now_mono: int | None = None) -> int:
        """Finish probes past their 500 ms deadline; returns how many."""
        return self._inflight.expire(now_mono if now_mono is not None else time.monotonic_ns())


def _import_pyverbs() -> Any:
    try:
        import pyverbs.device  # noqa: F401
    except ImportError as e:
        raise VerbsUnavailable(
            "pyverbs is not installed: on RNIC hosts install the distribution's python3-pyverbs "
            "(or `pip install fabricscope[verbs]` with rdma-core's build deps); elsewhere use --source udp or sim"
        ) from e
    import pyverbs

    return pyverbs


def list_devices() -> list[str]:
    """Names of the RDMA devices (``mlx5_0``, ...).

    Raises:
        VerbsUnavailable: no pyverbs, or no RDMA device (no RNIC, no rxe/siw).
    """
    _import_pyverbs()
    import pyverbs.device as d
    from pyverbs.pyverbs_error import PyverbsRDMAError

    try:
        devs = d.get_device_list()
    except PyverbsRDMAError as e:
        raise VerbsUnavailable(f"no RDMA device on this host ({e}); use --source udp (the netns lab) or sim") from e
    if not devs:
        raise VerbsUnavailable("no RDMA device on this host; use --source udp (the netns lab) or sim")
    return [dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name) for dev in devs]


class VerbsDevice:
    """pyverbs resources of one RNIC: PD, timestamping extended CQ, one UD QP, buffers, AHs.

    Args:
        name: RDMA device (``mlx5_0``).
        port: port number (1).
        gid_index: RoCEv2 GID index of the probe source.

    Raises:
        VerbsUnavailable: no pyverbs or no such device.
    """

    def __init__(self, name: str, port: int = 1, gid_index: int = 3) -> None:
        if name not in list_devices():
            raise VerbsUnavailable(f"RDMA device {name!r} not found; devices here: {', '.join(list_devices())}")
        import pyverbs.enums as e
        from pyverbs.cq import CQEX, CqInitAttrEx
        from pyverbs.device import Context
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

        self.e = e
        self.port = port
        self.gid_index = gid_index
        self.ctx = Context(name=name)
        self.clock = DeviceClock(int(self.ctx.query_device_ex().hca_core_clock))
        self.pd = PD(self.ctx)
        flags = e.IBV_WC_STANDARD_FLAGS | e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
        self.cq = CQEX(self.ctx, CqInitAttrEx(cqe=2 * RECV_DEPTH, wc_flags=flags))
        cap = QPCap(max_send_wr=RECV_DEPTH, max_recv_wr=RECV_DEPTH, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.cq, rcq=self.cq, cap=cap))
        self.qp.to_rts(QPAttr(qkey=PROBE_QKEY, port_num=port))
        self.slot = GRH_BYTES + PAYLOAD_BYTES
        self.mr = MR(self.pd, self.slot * 2 * RECV_DEPTH, e.IBV_ACCESS_LOCAL_WRITE)
        self.ahs: dict[tuple[str, int], Any] = {}
        self.refs: dict[int, tuple[str, Any]] = {}
        self._next_send = 0
        for i in range(RECV_DEPTH):
            self._post_recv(i)

    @property
    def qpn(self) -> int:
        return int(self.qp.qp_num)

    def _post_recv(self, i: int) -> None:
        from pyverbs.wr import SGE, RecvWR

        self.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(self.mr.buf + i * self.slot, self.slot, self.mr.lkey)]))

    def _ah(self, gid: str, flow_label: int) -> Any:
        key = (gid, flow_label)
        if key not in self.ahs:
            from pyverbs.addr import AH, GID, AHAttr, GlobalRoute

            gr = GlobalRoute(dgid=GID(gid), sgid_index=self.gid_index, flow_label=flow_label, hop_limit=64)
            self.ahs[key] = AH(self.pd, attr=AHAttr(gr=gr, is_global=1, port_num=self.port))
        return self.ahs[key]

    def post(self, s: Send) -> None:
        """Post one send of ``s.packet`` to ``(s.gid, s.qpn)`` on the flow label's path."""
        from pyverbs.wr import SGE, SendWR

        i = RECV_DEPTH + self._next_send % RECV_DEPTH
        self._next_send += 1
        self.mr.write(s.packet.encode(), PAYLOAD_BYTES, i * self.slot)
        wr_id = RECV_DEPTH + self._next_send
        wr = SendWR(
            wr_id=wr_id,
            opcode=self.e.IBV_WR_SEND,
            num_sge=1,
            sg=[SGE(self.mr.buf + i * self.slot, PAYLOAD_BYTES, self.mr.lkey)],
        )
        wr.set_wr_ud(self._ah(s.gid, s.flow_label), s.qpn, PROBE_QKEY)
        self.refs[wr_id] = s.ref
        self.qp.post_send(wr)

    def poll(self, proto: VerbsProtocol) -> int:
        """Drain the CQ into ``proto``, posting the sends it asks for; returns completions handled."""
        from pyverbs.cq import PollCqAttr

        n = 0
        actions: list[Send] = []
        if self.cq.start_poll(PollCqAttr()) != 0:
            return 0
        while True:
            n += 1
            if self.cq.status == self.e.IBV_WC_SUCCESS:
                ts = int(self.cq.read_timestamp())
                wr_id = int(self.cq.wr_id)
                if self.cq.read_opcode() == self.e.IBV_WC_RECV:
                    buf = self.mr.read(self.slot, wr_id * self.slot)
                    actions += proto.on_recv_cqe(bytes(buf), int(self.cq.read_src_qp()), ts)
                    self._post_recv(wr_id)
                else:
                    ref = self.refs.pop(wr_id, None)
                    if ref is not None:
                        actions += proto.on_send_cqe(ref, ts)
            if self.cq.next_poll() != 0:
                break
        self.cq.end_poll()
        for a in actions:
            self.post(a)
        return n


class VerbsEngine:
    """The agent-facing engine of the verbs backend: one :class:`VerbsDevice` and protocol per RNIC.

    Same calls as :class:`producers.udp_prober.UdpEngine` that the agent uses
    (``send_probe``, ``poll``, ``expire``, ``close``, ``qpns``, ``pending``,
    ``counters``); path tracing stays with the udp tracer (RoCE switches answer
    TTL-limited UDP like any router, R-Pingmesh §3.2).

    Args:
        rnics: ``{"name", "ibdev", "port", "gid_index"}`` dicts, one per RNIC.
        allowed_gids: registered source GIDs.

    Raises:
        VerbsUnavailable: no pyverbs or a named device is missing.
    """

    def __init__(
        self,
        agent_id: str,
        host: str,
        rnics: list[dict[str, Any]],
        *,
        allowed_gids: set[str],
        rate_limit: float = 500.0,
        on_probe: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.devices: dict[str, VerbsDevice] = {}
        self.protos: dict[str, VerbsProtocol] = {}
        for r in rnics:
            dev = VerbsDevice(r["ibdev"], int(r.get("port", 1)), int(r.get("gid_index", 3)))
            self.devices[r["name"]] = dev
            self.protos[r["name"]] = VerbsProtocol(
                agent_id,
                host,
                r["name"],
                dev.clock,
                dev.qpn,
                set(allowed_gids),
                rate_limit,
                on_probe or (lambda row: None),
            )
        self.qpns = {name: dev.qpn for name, dev in self.devices.items()}

    @property
    def pending(self) -> dict[int, PendingProbe]:
        return {s: p for proto in self.protos.values() for s, p in proto.pending.items()}

    @property
    def counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for proto in self.protos.values():
            for k, v in proto.counters.items():
                out[k] = out.get(k, 0) + v
        return out

    def send_probe(self, entry: dict[str, Any]) -> int:
        """Post one probe of pinglist ``entry`` (needs ``gid`` and ``qpn`` of the responder)."""
        s = self.protos[entry["prober_rnic"]].probe(entry)
        self.devices[entry["prober_rnic"]].post(s)
        return int(s.ref[1])

    def send_probes(self, entries: list[dict[str, Any]]) -> list[int]:
        """Post one probe of each entry, in order (:meth:`send_probe`); returns their seqs."""
        return [self.send_probe(e) for e in entries]

    def poll(self, timeout_s: float) -> None:
        """Drain every CQ; sleep up to 1 ms when nothing completed; expire deadlines."""
        n = sum(dev.poll(self.protos[name]) for name, dev in self.devices.items())
        if not n and timeout_s > 0:
            time.sleep(min(timeout_s, 0.001))
        self.expire()

    def expire(self, now_mono: int | None = None) -> int:
        return sum(p.expire(now_mono) for p in self.protos.values())

    def close(self) -> None:
        self.devices.clear()
