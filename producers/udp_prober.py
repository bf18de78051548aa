"""The ``udp`` probe backend: R-Pingmesh's prober, responder and tracer over UDP.

One :class:`UdpEngine` per agent process owns a UDP socket per 5-tuple source
(RNIC address, source port, DSCP) and runs the paper's protocol (§4.2.1):

1. the prober reads its clock (t1) and sends a 50-byte probe; the kernel's TX
   timestamp of it is t2 (prober clock);
2. the responder's kernel stamps its arrival (t3), the responder sends ACK1,
   whose TX timestamp is t4 (responder clock), then ACK2 carrying t3 and t4;
3. the prober's kernel stamps ACK1's arrival (t5) and the prober reads its clock
   when it sees ACK1 (t6). No reply within 500 ms is a timeout.

So network RTT = (t5 - t2) - (t4 - t3), responder delay = t4 - t3, prober delay
= (t6 - t1) - (t5 - t2), each difference on one clock. A responder answers only
registered sources, rate-limits each, and ignores probes addressed to another
QPN (a restarted responder has a new one, so stale probes time out as in RoCE).

Path tracing sends TTL-limited copies on the same socket (same 5-tuple, so the
same ECMP path) and reads the ICMP time-exceeded sources from the error queue
(``IP_RECVERR``); the destination answers with a trace reply. Rows are plain
column dicts of ``probe.v1`` / ``path.v1`` (:mod:`schemas.records`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from producers import kernel_ts
from producers.probe_protocol import TIMEOUT_NS, Admission, InFlight, PendingProbe, ReplyBudget
from producers.udp_wire import ACK1, ACK2, PAYLOAD_BYTES, PROBE, TRACE, TRACE_REPLY, Packet, encode, fields
from schemas.records import NO_ANSWER

# The compiled batch calls (setup.py); without them (no C compiler at install time, or
# FABRICSCOPE_AGENT_SOCKETS=python), one system call per datagram, the same protocol.
try:
    from producers import _udpbatch
except ImportError:  # pragma: no cover - a host without a C compiler at install time
    _udpbatch = None
if os.environ.get("FABRICSCOPE_AGENT_SOCKETS") == "python":
    _udpbatch = None
SOCKET_CALLS = "batched (recvmmsg/sendmmsg)" if _udpbatch is not None else "one datagram per call (pure Python)"

log = logging.getLogger("fabricscope.agent.udp")

DEFAULT_DST_PORT = 4791  # RoCEv2's UDP port; the lab has no RDMA, so the udp backend may use it
MAX_HOPS = 8
SO_RCVBUFFORCE = 33
# linux/in.h: don't fragment, ignoring the path MTU (probes are far under any MTU). RoCEv2 sets DF on every
# packet, and a DF datagram of an unconnected socket gets IP ID 0 instead of a hashed, random one
# (__ip_select_ident, 3 % of the agent's CPU samples in perf before).
IP_MTU_DISCOVER, IP_PMTUDISC_PROBE = 10, 3
RESPONDER_RCVBUF = 4 * 1024 * 1024  # bytes
MAX_REVERSE_FLOWS = 4096  # reverse-trace candidates kept between rounds (state stays bounded)
REVERSE_FLOWS_PER_PEER = 8  # reverse traces per peer address and trace interval
TRACE_INTERVAL_S = 60.0  # a 5-tuple's path (and a flow's ACK path) is traced again after this
PROBE_UNREACH_S = 5.0  # an unreachable answering a probe names a router on its 5-tuple's path for this long
# (a failing tuple is traced again every 5 s: its probes' unreachables are never older than that)
PROBE_UNREACH_NS = int(PROBE_UNREACH_S * 1e9)
MAX_UNREACHABLE_TUPLES = 4096  # 5-tuples whose last unreachable is kept (state stays bounded)
MAX_ROUNDS = 16  # read rounds per poll: packets that keep coming (a busy peer) cannot hold back the sends
_EPOLLIN, _EPOLLERR = select.EPOLLIN, select.EPOLLERR
_ANSWERED = (PROBE, TRACE)  # the packets a reply answers: what they bring in is what replies may send out
_TTL_CMSG = {ttl: (socket.SOL_IP, kernel_ts.IP_TTL, struct.pack("=i", ttl)) for ttl in range(1, 256)}
_KEY = struct.Struct("=I")
_TX_FLAGS = {hw: kernel_ts.tx_flags(hw) for hw in (False, True)}
_TX_CMSG = {hw: (socket.SOL_SOCKET, kernel_ts.SO_TIMESTAMPING, struct.pack("=I", f)) for hw, f in _TX_FLAGS.items()}


@dataclass(frozen=True)
class LocalRnic:
    """An RNIC of this host: name (``A1``), address, netdev and its ToR."""

    name: str
    ip: str
    netdev: str = ""
    tor: str = ""


@dataclass
class Endpoint:
    """One UDP socket bound to ``(ip, port)`` with DSCP ``tos``; ``sent`` maps timestamp keys to owners.

    Replies queued with :meth:`queue` leave together at :meth:`flush` (one ``sendmmsg`` with
    :mod:`producers._udpbatch`, else one ``sendmsg`` each).
    """

    sock: socket.socket
    ip: str
    port: int
    tos: int
    rnic: str
    hardware: bool
    responder: bool = False
    next_key: int = 0
    explicit_keys: ClassVar[bool] = True
    sent: dict[int, tuple[str, Any]] = field(default_factory=dict)
    outbox: list[tuple[bytes, tuple[str, int], tuple[str, Any] | None]] = field(default_factory=list)

    def send(self, pkt: Packet | bytes, addr: tuple[str, int], ref: tuple[str, Any] | None = None, ttl: int = 0
             ) -> bool:
        """Send ``pkt`` (a Packet or its 50 encoded bytes) now; ``ref`` is told the TX timestamp. Returns
        False when the kernel refused.

        Only a send with a ``ref`` asks for a TX timestamp (``SO_TIMESTAMPING`` cmsg). It names its key
        with ``SCM_TS_OPT_ID`` (Linux 6.13+), so a failed send can never shift the keys of later ones;
        older kernels count. An ICMP error queued on the socket fails the next send once (``sk_err``),
        so a failed send is retried once.
        """
        key = self.next_key & 0xFFFF_FFFF
        anc = [_TTL_CMSG[ttl]] if ttl else []
        if ref is not None:
            anc.append(_TX_CMSG[self.hardware])
            if Endpoint.explicit_keys:
                anc.append((socket.SOL_SOCKET, kernel_ts.SCM_TS_OPT_ID, _KEY.pack(key)))
        payload = pkt if isinstance(pkt, bytes) else pkt.encode()
        for attempt in range(2):
            try:
                self.sock.sendmsg((payload,), anc, 0, addr)
                break
            except OSError as e:
                if e.errno == errno.EINVAL and Endpoint.explicit_keys and ref is not None:
                    Endpoint.explicit_keys = False  # kernel without SCM_TS_OPT_ID
                    return self.send(pkt, addr, ref, ttl)
                if attempt:  # no route (link down), ...: nothing left, no timestamp will come
                    log.debug("send %s -> %s failed: %s", self.ip, addr, e)
                    return False
        if ref is not None:
            self._remember(key, ref)
        return True

    def _remember(self, key: int, ref: tuple[str, Any]) -> None:
        self.sent[key] = ref
        self.next_key += 1
        self._trim()

    def _trim(self) -> None:
        if len(self.sent) > 4096:  # timestamps that never came (dropped by the kernel)
            for k in sorted(self.sent)[:1024]:
                del self.sent[k]

    def queue(self, payload: bytes, addr: tuple[str, int], ref: tuple[str, Any] | None = None) -> None:
        """Queue ``payload`` for ``addr`` until :meth:`flush` (``ref`` as for :meth:`send`)."""
        self.outbox.append((payload, addr, ref))

    def flush(self) -> int:
        """Send what :meth:`queue` holds, in order; returns how many the kernel took."""
        out, self.outbox = self.outbox, []
        done, fd, tx = 0, self.sock.fileno(), _TX_FLAGS[self.hardware]
        while out:
            if _udpbatch is None or not Endpoint.explicit_keys:  # one by one (a kernel without SCM_TS_OPT_ID)
                return done + sum(self.send(p, a, r) for p, a, r in out)
            base = self.next_key
            items = [(p, a[0], a[1], 0, (base + i) & 0xFFFF_FFFF if r is not None else -1, tx if r is not None else 0)
                     for i, (p, a, r) in enumerate(out)]
            # keys are numbered as if every queued send had a ref; only the ref'd ones are remembered
            n = _udpbatch.send_many(fd, items)
            for i in range(n):
                if out[i][2] is not None:
                    self.sent[(base + i) & 0xFFFF_FFFF] = out[i][2]
            self.next_key = base + n  # a refused one is resent alone under the next key
            done += n
            if n == len(out):
                break
            p, a, r = out[n]  # refused: alone, to retry once and learn why (send keeps its own keys)
            done += self.send(p, a, r)
            out = out[n + 1:]
        self._trim()
        return done


@dataclass
class Trace:
    """A path trace in flight: one TTL-limited packet per hop; ``hops[ttl]`` = ICMP time-exceeded source;
    ``unreachable`` = a router that answered one of them with ICMP destination unreachable (no route on)."""

    direction: str
    src_rnic: str
    dst_rnic: str
    src: tuple[str, int]
    dst: tuple[str, int]
    deadline: int
    hops: dict[int, str] = field(default_factory=dict)
    reached: int | None = None
    unreachable: str | None = None


class UdpEngine:
    """Prober, responder and tracer of one agent over kernel-timestamped UDP sockets.

    Args:
        agent_id: the uploading agent (one per host).
        host: this host's name.
        rnics: this host's RNICs.
        netns: network namespace to open sockets in (``None``: the current one).
        qpns: RNIC -> QPN of its probe queue pair (default: random 24-bit per RNIC and
            start, so a restarted agent has new ones: R-Pingmesh's stale-QPN rule).
        allowed_sources: addresses the responder answers (the registry); others are ignored.
        reverse_peers: addresses whose ACK paths the responder traces (the agent's own probe targets,
            plus any the controller asks for); :attr:`reverse_peers` may be replaced later.
        responder: answer probes on ``dst_port`` of every RNIC.
        hardware: try NIC hardware timestamps (falls back to software per RNIC).
        rate_limit: per-source responder limit, packets/s (burst = the same number).
        address_names: interface address -> node name, to name traced hops.
        on_probe, on_path: called with each finished ``probe.v1`` / ``path.v1`` row (a dict).
        on_finished: when given, called with lists of finished probes (:class:`PendingProbe`) instead of
            ``on_probe`` with each row: the caller builds a batch's columns at once (:class:`FinishedProbes`).
    """

    def __init__(
        self,
        agent_id: str,
        host: str,
        rnics: Iterable[LocalRnic],
        *,
        netns: str | None = None,
        qpns: dict[str, int] | None = None,
        allowed_sources: Iterable[str] = (),
        reverse_peers: Iterable[str] = (),
        responder: bool = True,
        dst_port: int = DEFAULT_DST_PORT,
        hardware: bool = False,
        rate_limit: float = 500.0,
        address_names: dict[str, str] | None = None,
        on_probe: Callable[[dict[str, Any]], None] | None = None,
        on_path: Callable[[dict[str, Any]], None] | None = None,
        on_finished: Callable[[list[PendingProbe]], None] | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.host = host
        self.rnics = {r.name: r for r in rnics}
        self.netns = netns
        self.qpns = {name: (qpns or {}).get(name) or (int.from_bytes(os.urandom(3), "big") | 1) for name in self.rnics}
        self.dst_port = dst_port
        self.hardware_wanted = hardware
        self.rate_limit = rate_limit
        self.address_names = dict(address_names or {})
        self.on_probe = on_probe or (lambda row: None)
        self.on_path = on_path or (lambda row: None)
        self._epoll = select.epoll()
        self._by_fd: dict[int, Endpoint] = {}
        self._table: dict[int, tuple[Any, ...]] | None = None  # see _dispatch_table
        self._table_keys: bool | None = None
        self._busy: list[Endpoint] = []  # endpoints with queued replies (flush)
        self.endpoints: dict[tuple[str, int, int], Endpoint] = {}
        # id(entry) -> (entry, its QPN, endpoint, destination, own QPN, row fields): see send_probe
        self._resolved: dict[int, tuple[dict[str, Any], int, Endpoint, tuple[str, int], int, dict[str, Any]]] = {}
        self._hw: dict[str, bool] = {}
        self.inflight = InFlight(agent_id, host, lambda row: self.on_probe(row), on_finished=on_finished)
        self.pending = self.inflight.pending
        self.traces: dict[int, tuple[int, int]] = {}  # trace packet seq -> (trace id, ttl)
        # (src ip, src port, dst ip, dst port) -> (router that answered a datagram of it with unreachable, mono ns)
        self._unreachable_by_tuple: dict[tuple[str, int, str, int], tuple[str, int]] = {}
        self._acks_turned: set[tuple[str, int, str, int]] = set()  # ACK flows a router answered since the last look
        self._trace_state: dict[int, Trace] = {}
        self._seq = int.from_bytes(os.urandom(4), "big") << 16
        self.reverse_seen: dict[tuple[str, int, str, int], int] = {}
        # flows whose ACK path was traced within two trace intervals -> when (at most 16 a peer)
        self.reverse_traced: dict[tuple[str, int, str, int], int] = {}
        self.reverse_peers: set[str] = set(reverse_peers)
        self.counters = {"dropped_unregistered": 0, "dropped_rate": 0, "dropped_stale_qpn": 0, "answered": 0,
                         "dropped_budget": 0}
        self.admission = Admission(set(allowed_sources), rate_limit, self.counters)
        self.allowed = self.admission.allowed
        # with the compiled calls the responder's token buckets and budget are the C gate's (the same rules)
        self.budget: ReplyBudget | Any = ReplyBudget() if _udpbatch is None else _udpbatch.Gate(rate_limit)
        if responder:
            for r in self.rnics.values():
                self.endpoint(r.name, self.dst_port, 0, responder=True)

    # ---- sockets -----------------------------------------------------------------

    def _hardware_for(self, rnic: LocalRnic) -> bool:
        if rnic.name not in self._hw:
            ok = False
            if self.hardware_wanted and rnic.netdev:
                with kernel_ts.in_netns(self.netns):
                    ok = kernel_ts.hardware_timestamping(rnic.netdev)
            self._hw[rnic.name] = ok
        return self._hw[rnic.name]

    def endpoint(self, rnic: str, port: int = 0, tos: int = 0, responder: bool = False) -> Endpoint:
        """The socket for source ``(rnic's address, port)`` with DSCP ``tos``; opened on first use.

        Port 0 picks an ephemeral port (the endpoint is then keyed by the real one).
        """
        r = self.rnics[rnic]
        key = (r.ip, port, tos)
        if port and key in self.endpoints:
            return self.endpoints[key]
        hw = self._hardware_for(r)
        with kernel_ts.in_netns(self.netns):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_PROBE)
        if tos:
            s.setsockopt(socket.SOL_IP, socket.IP_TOS, tos << 2)
        kernel_ts.enable(s, hw)
        if responder:  # bursts from many probers and trace packets must not overflow the queue
            try:
                s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RESPONDER_RCVBUF)
            except PermissionError:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RESPONDER_RCVBUF)
        s.bind((r.ip, port))
        s.setblocking(False)
        ep = Endpoint(s, r.ip, s.getsockname()[1], tos, rnic, hw, responder)
        self.endpoints[(r.ip, ep.port, tos)] = ep
        self._by_fd[s.fileno()] = ep
        if self._table is not None:  # one socket more (a new 5-tuple): added, not the whole table again
            h = self._handler(ep)
            if h is not None:
                self._table[s.fileno()] = h
        self._epoll.register(s.fileno(), _EPOLLIN)  # EPOLLERR (the error queue) is always reported
        return ep

    def close(self) -> None:
        """Close every socket."""
        for ep in self.endpoints.values():
            self._epoll.unregister(ep.sock.fileno())
            ep.sock.close()
        self.endpoints.clear()
        self._by_fd.clear()
        self._table = None
        self._resolved.clear()
        self._epoll.close()

    def forget_entries(self) -> None:
        """Drop what :meth:`send_probe` kept of the entries it was given (call when the pinglist is replaced)."""
        self._resolved.clear()

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFF_FFFF_FFFF_FFFF
        return self._seq

    # ---- prober ------------------------------------------------------------------

    def send_probe(self, entry: dict[str, Any]) -> int:
        """Send one probe for pinglist ``entry`` (a ``probe.v1``-shaped dict); returns its seq.

        The entry needs ``prober_rnic``, ``dst_ip``, ``qpn`` and may set ``src_port``
        (0: ephemeral), ``dst_port`` and ``traffic_class``.
        """
        return self.send_probes([entry])[0]

    def resolve(self, entry: dict[str, Any]) -> tuple[dict[str, Any], int, Endpoint, tuple[str, int], int,
                                                     dict[str, Any]]:
        """``(entry, its QPN, endpoint, destination, own QPN, row fields)`` of pinglist ``entry``: its socket
        (opened on first use) and what its probes' rows carry.

        Kept by the entry's identity while its QPN is unchanged (a restarted responder's changes it), so a probe
        copies no dict and opens nothing. An entry without a source port gets an ephemeral one once, kept like a
        fixed one: its probes share one 5-tuple, whose path can be traced, and a socket is not opened per probe.
        """
        qpn = int(entry.get("qpn") or 0)
        hit = self._resolved.get(id(entry))
        if hit is None or hit[0] is not entry or hit[1] != qpn or hit[2].sock.fileno() < 0:
            ep = hit[2] if hit is not None and hit[0] is entry and hit[2].sock.fileno() >= 0 else self.endpoint(
                entry["prober_rnic"], int(entry.get("src_port") or 0), int(entry.get("traffic_class") or 0))
            dst = (entry["dst_ip"], int(entry.get("dst_port") or self.dst_port))
            row = dict(entry, src_ip=ep.ip, src_port=ep.port, dst_port=dst[1])
            hit = (entry, qpn, ep, dst, self.qpns[ep.rnic], row)
            if len(self._resolved) > 65_536:
                self._resolved.clear()
            self._resolved[id(entry)] = hit
        return hit

    def send_probes(self, entries: list[dict[str, Any]]) -> list[int]:
        """Send one probe for each pinglist entry (as :meth:`send_probe`), in order; returns their seqs.

        With :mod:`producers._udpbatch` they leave in one call (a ``sendmsg`` each: every 5-tuple is a socket),
        each probe's t1 read just before its send; a probe the kernel refuses is sent again alone (retried once,
        its error learned), and the rest after it.
        """
        seqs, items, owners, probes = [], [], [], []
        compiled = _udpbatch is not None and Endpoint.explicit_keys
        deadline = time.monotonic_ns() + TIMEOUT_NS  # one round's probes leave within microseconds of each other
        resolved = self._resolved
        for entry in entries:
            hit = resolved.get(id(entry))  # resolve's fast path, inline: it runs per probe
            if hit is None or hit[0] is not entry or hit[1] != int(entry.get("qpn") or 0) or hit[2].sock.fileno() < 0:
                hit = self.resolve(entry)
            _, qpn, ep, dst, own_qpn, row = hit
            self._seq = seq = (self._seq + 1) & 0xFFFF_FFFF_FFFF_FFFF
            seqs.append(seq)
            p = PendingProbe(row, seq, 0, deadline, ep.hardware)
            probes.append(p)
            if compiled:
                key = ep.next_key & 0xFFFF_FFFF
                ep.next_key += 1
                items.append((ep.sock.fileno(), seq, qpn, own_qpn, dst[0], dst[1], key, _TX_FLAGS[ep.hardware], p,
                              ep.sent))
            owners.append((ep, seq, qpn, own_qpn, dst))
        self.inflight.add_many(probes)
        if not compiled:
            for p, (ep, seq, qpn, own_qpn, dst) in zip(probes, owners, strict=True):
                p.t1 = time.time_ns()
                ep.send(encode(PROBE, seq, qpn, own_qpn), dst, ("probe", seq))
            return seqs
        start = 0
        while start < len(items):
            start += _udpbatch.send_probes(items[start:] if start else items)  # each key in its socket's sent
            if start < len(items):  # refused: alone, to retry once and learn why (send keeps its own keys)
                ep, seq, qpn, own_qpn, dst = owners[start]
                probes[start].t1 = time.time_ns()
                ep.send(encode(PROBE, seq, qpn, own_qpn), dst, ("probe", seq))
                start += 1
        return seqs

    def trim_sent(self) -> None:
        """Bound every socket's map of TX timestamp keys (:meth:`Endpoint._trim`): timestamps the kernel never
        gave stay there. The probes' sends add keys without trimming; the agent calls this once a second."""
        for ep in self.endpoints.values():
            ep._trim()

    def expire(self, now_mono: int | None = None) -> int:
        """Finish probes past their deadline (timeouts, or ok without ACK2); returns how many."""
        now = now_mono if now_mono is not None else time.monotonic_ns()
        n = self.inflight.expire(now)
        for tid, tr in list(self._trace_state.items()):
            if tr.deadline <= now:
                self._finish_trace(tid)
        return n

    # ---- tracer ------------------------------------------------------------------

    def trace(
        self, ep: Endpoint, dst: tuple[str, int], dst_rnic: str, direction: str = "forward", max_hops: int = MAX_HOPS
    ) -> int:
        """Trace the path of 5-tuple ``(ep, dst)``: one TTL-limited packet per hop, sent at once.

        The row goes to ``on_path`` when every hop answered or after 500 ms.
        Returns the trace id.
        """
        tid = self._next_seq()
        self._trace_state[tid] = Trace(
            direction, ep.rnic, dst_rnic, (ep.ip, ep.port), dst, time.monotonic_ns() + TIMEOUT_NS
        )
        for ttl in range(1, max_hops + 1):
            seq = self._next_seq()
            self.traces[seq] = (tid, ttl)
            ep.send(encode(TRACE, seq, 0, self.qpns[ep.rnic]), dst, None, ttl=ttl)
        return tid

    def _trace_hit(self, seq: int, offender: str | None) -> None:
        hit = self.traces.get(seq)
        if hit is None:
            return
        tid, ttl = hit
        tr = self._trace_state.get(tid)
        if tr is None:
            return
        if offender is None:
            tr.reached = ttl if tr.reached is None else min(tr.reached, ttl)
        else:
            tr.hops[ttl] = offender
        if tr.reached is not None and all(t in tr.hops for t in range(1, tr.reached)):
            self._finish_trace(tid)

    def _trace_unreachable(self, seq: int, offender: str) -> None:
        """A router answered trace packet ``seq`` with ICMP destination unreachable: it has no route to the
        destination (a static route lost with its link, a withdrawn prefix), so the path ends there. Linux
        looks up the route before it checks the TTL, so such a router sends no time-exceeded at all: without
        this the trace would stop one hop early, at the switch before it. The destination's own answer (port
        unreachable) is not a hop."""
        hit = self.traces.get(seq)
        tr = self._trace_state.get(hit[0]) if hit is not None else None
        if tr is not None and offender and offender != tr.dst[0] and tr.reached is None:
            tr.unreachable = offender

    def _sent_unreachable(self, ep: Endpoint, kind: int, seq: int, offender: str, dst: tuple[str, int]) -> None:
        """A router answered a datagram ``ep`` sent to ``dst`` (a probe, or an ACK of the responder's) with ICMP
        destination unreachable: remember it for that 5-tuple (:data:`PROBE_UNREACH_S`), so a trace of the tuple
        (the probe's path; the ACK's, the responder's reverse trace) whose own answers that router held back
        still ends there (see :meth:`_finish_trace`). Kept only for a pending probe, or for an ACK flow of a peer
        whose ACK paths this host traces, and only from an address of the fabric: not the destination's own
        answer, nor an error anyone could send quoting an ACK to anywhere."""
        if not offender or offender == dst[0] or (self.address_names and offender not in self.address_names):
            return
        flow = (ep.ip, ep.port, dst[0], dst[1])
        if kind == PROBE:
            p = self.pending.get(seq)
            if p is None or p.entry.get("dst_ip") != dst[0]:
                return
        elif flow not in self.reverse_traced and flow not in self.reverse_seen:
            return
        now = time.monotonic_ns()
        if len(self._unreachable_by_tuple) >= MAX_UNREACHABLE_TUPLES:
            horizon = now - PROBE_UNREACH_NS
            self._unreachable_by_tuple = {k: v for k, v in self._unreachable_by_tuple.items() if v[1] > horizon}
            if len(self._unreachable_by_tuple) >= MAX_UNREACHABLE_TUPLES:
                return
        self._unreachable_by_tuple[flow] = (offender, now)
        if kind != PROBE:  # the prober traces a failing tuple again itself; the responder learns it only here
            self._acks_turned.add(flow)

    def _finish_trace(self, tid: int) -> None:
        tr = self._trace_state.pop(tid)
        for seq in [s for s, (t, _) in self.traces.items() if t == tid]:
            del self.traces[seq]
        last = (tr.reached - 1) if tr.reached else max(tr.hops, default=0)
        stop = tr.unreachable if tr.reached is None else None  # a router without a route on ends the path
        if stop is None and tr.reached is None:
            stop = self._unreachable_after(tr)
        if stop is not None:
            # after the hops that answered in a row from the first (every TTL from the router's own hop on gets
            # its unreachable, some rate-limited away)
            last = 0
            while last + 1 in tr.hops and tr.hops[last + 1] != stop:
                last += 1
        names = [tr.src_rnic]
        for ttl in range(1, last + 1):
            ip = tr.hops.get(ttl)
            names.append(self.address_names.get(ip, ip) if ip else NO_ANSWER)
        if stop is not None:
            names.append(self.address_names.get(stop, stop))
        complete = tr.reached is not None and NO_ANSWER not in names
        if tr.reached is not None:
            names.append(tr.dst_rnic)
        self.on_path(
            {
                "agent_id": self.agent_id,
                "trace_ns": time.time_ns(),
                "direction": tr.direction,
                "src_rnic": tr.src_rnic,
                "dst_rnic": tr.dst_rnic,
                "src_ip": tr.src[0],
                "dst_ip": tr.dst[0],
                "src_port": tr.src[1],
                "dst_port": tr.dst[1],
                "hops": ",".join(names),
                "complete": complete,
            }
        )

    def _unreachable_after(self, tr: Trace) -> str | None:
        """The router that answered a probe of ``tr``'s 5-tuple with destination unreachable in the last
        :data:`PROBE_UNREACH_S`, when the trace's own answers are consistent with it: the hops that answered
        are TTL 1, 2, ... in a row and the router is none of them (it had no route, so it answered no
        time-exceeded). Linux limits such answers per source address (a burst of 5, then one a second, whatever
        ``icmp_ratelimit`` says), so while a tuple's probes keep hitting the router, its trace packets get none
        and the trace would end at the hop before it, where the path it held before a reroute still fits."""
        seen = self._unreachable_by_tuple.get((tr.src[0], tr.src[1], tr.dst[0], tr.dst[1]))
        if seen is None or time.monotonic_ns() - seen[1] > PROBE_UNREACH_NS:
            return None
        answered = sorted(tr.hops)
        if answered != list(range(1, len(answered) + 1)) or seen[0] in tr.hops.values():
            return None
        return seen[0]

    def trace_reverse_paths(self, since_mono: int, interval_ns: int = int(TRACE_INTERVAL_S * 1e9),
                            now_mono: int | None = None) -> int:
        """Responder side: trace the ACK path (reverse 5-tuple) of probers answered since ``since_mono``.

        Called every few seconds, so that a flow's ACK path is known seconds after its first answer, not a
        trace interval later. A flow is traced again once its last trace is ``interval_ns`` old. Only flows
        from :attr:`reverse_peers` (peers this host probes itself, or that the controller names) were kept,
        and at most :data:`REVERSE_FLOWS_PER_PEER` traces per peer leave in any ``interval_ns``: what a
        source sends can add no more than that constant, however many ports it uses or how often this is
        called; the flows a peer's cap holds back go first at the next free slot (the longest untraced
        first). Every candidate is forgotten after the call. Returns the traces sent.
        """
        now = time.monotonic_ns() if now_mono is None else now_mono
        # kept two intervals: a flow's last trace orders the candidates (the longest untraced first), so a
        # peer with more than 8 flows to this host gets each traced in turn, not the same 8 every interval
        known = {f: t for f, t in self.reverse_traced.items() if now - t < 2 * interval_ns}
        per_peer: dict[str, int] = {}
        for f, t in known.items():
            if now - t < interval_ns:
                per_peer[f[2]] = per_peer.get(f[2], 0) + 1
        n = 0
        seen, self.reverse_seen = self.reverse_seen, {}
        turned, self._acks_turned = self._acks_turned, set()
        last = ((known.get(f, -(2**62)), f) for f, at in seen.items() if at >= since_mono)  # never traced: first
        due = sorted(x for x in last if now - x[0] >= interval_ns or (x[1] in turned and now - x[0] > PROBE_UNREACH_NS))
        for _, flow in due:
            lip, lport, rip, rport = flow
            ep = self.endpoints.get((lip, lport, 0))
            # a flow whose ACKs a router turned away is traced again (once per 5 s at most) past the peer's cap
            if ep is None or (per_peer.get(rip, 0) >= REVERSE_FLOWS_PER_PEER and flow not in turned):
                continue
            per_peer[rip] = per_peer.get(rip, 0) + 1
            known[flow] = now
            self.trace(ep, (rip, rport), self.address_names.get(rip, rip), direction="reverse")
            n += 1
        self.reverse_traced = known
        return n

    # ---- event loop --------------------------------------------------------------

    def poll(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for packets and timestamps, handle all that came, expire deadlines.

        One wakeup handles everything queued on every socket: each round reads each socket that epoll
        reports (``EPOLLIN``: packets; ``EPOLLERR``: the error queue, TX timestamps and ICMP errors),
        sends the replies that round queued, and asks again without waiting, until nothing is left or
        :data:`MAX_ROUNDS` rounds are done (what is left stays ready for the next poll). With
        :mod:`producers._udpbatch` a read takes every queued datagram of the socket (``recvmmsg``) and
        a socket's replies leave in one ``sendmmsg``; without it, one datagram per read and per send.
        Reads are driven by the readiness epoll reports, so no read ends in ``EAGAIN`` on the normal
        path, and replies that depend on a TX timestamp (ACK2) go out in the same wakeup as the ACK1
        they follow.
        """
        events = self._epoll.poll(timeout_s)
        rounds = 0
        while events and rounds < MAX_ROUNDS:
            if _udpbatch is not None:
                self._dispatch(events)
            else:
                for fd, ev in events:
                    self._on_event(fd, ev)
            self.flush()
            events = self._epoll.poll(0)
            rounds += 1
        self.expire()

    def _on_event(self, fd: int, ev: int) -> None:
        ep = self._by_fd.get(fd)
        if ep is None:
            return
        if ev & _EPOLLERR:
            self._read_errqueue(ep)
        if ev & _EPOLLIN:
            self._read_rx(ep)

    def _dispatch_table(self) -> dict[int, tuple[Any, ...]]:
        """fd -> how :func:`producers._udpbatch.dispatch` serves the socket (:meth:`_handler`); built again only
        when the kernel turns out to lack ``SCM_TS_OPT_ID`` (the responders' steps go back to Python)."""
        if self._table is None or self._table_keys is not Endpoint.explicit_keys:
            table: dict[int, tuple[Any, ...]] = {}
            for fd, ep in self._by_fd.items():
                h = self._handler(ep)
                if h is not None:
                    table[fd] = h
            self._table, self._table_keys = table, Endpoint.explicit_keys
        return self._table

    def _handler(self, ep: Endpoint) -> tuple[Any, ...] | None:
        # every prober socket, and the responder sockets whose steps are compiled (_compiled_responder); None:
        # the socket is left to the engine's steps
        if not ep.responder:
            return (0, ep.hardware, ep.sent)
        if self._compiled_responder(ep):
            return (1, ep.hardware, ep, self.qpns[ep.rnic], ep.ip, ep.port, ep.sent, _TX_FLAGS[ep.hardware])
        return None

    def _dispatch(self, events: list[tuple[int, int]]) -> None:
        # One C call serves every ready socket of the wakeup (the per-socket steps of _read_rx and _read_errqueue);
        # what it leaves is what those steps would have handed to Python anyway (traces, ICMP, unsent replies).
        finished, left = _udpbatch.dispatch(events, self._dispatch_table(), self.pending, self.budget,
                                            (self.allowed, self.reverse_peers, self.counters, self.reverse_seen))
        if finished:
            self.inflight.finish_many(finished)
        for kind, fd, a, b, c in left:
            ep = self._by_fd.get(fd)
            if ep is None:
                continue
            if kind == 0:
                self._on_event(fd, a)
            elif kind == 1:
                self._unsent(ep, c)
                self._errqueue_entries(ep, a, b)
            elif kind == 2:
                self._unsent(ep, b)
                self._rx_datagrams(ep, a)
            else:
                ep._trim()

    def _unsent(self, ep: Endpoint, unsent: list[tuple[bytes, tuple[str, int], tuple[str, Any] | None]]) -> None:
        for payload, addr, ref in unsent:
            self._reply(ep, payload, addr, ref)

    def _rx_datagrams(self, ep: Endpoint, batch: list[tuple[bytes, str, int, int | None]]) -> None:
        # what the compiled steps left: a responder's replies of its reverse traces, a prober's trace replies
        t_user = time.time_ns()
        replies = ep.responder and self._compiled_responder(ep)  # they add nothing to the budget
        for data, ip, port, t_rx in batch:
            if replies:
                self._on_packet(ep, fields(data), (ip, port), t_rx, t_user)
            else:
                self._on_datagram(ep, data, (ip, port), t_rx, t_user)

    def flush(self) -> None:
        """Send every endpoint's queued replies (:meth:`Endpoint.flush`)."""
        busy, self._busy = self._busy, []
        for ep in busy:
            ep.flush()

    def _reply(self, ep: Endpoint, payload: bytes, addr: tuple[str, int], ref: tuple[str, Any] | None = None
               ) -> None:
        if not ep.outbox:
            self._busy.append(ep)
        ep.queue(payload, addr, ref)

    def _compiled_responder(self, ep: Endpoint) -> bool:
        # its ACK1s are keyed by SCM_TS_OPT_ID; a kernel without it gets the Python steps (Endpoint.send learns it)
        return ep.responder and _udpbatch is not None and Endpoint.explicit_keys and not isinstance(
            self.budget, ReplyBudget)

    def _read_rx(self, ep: Endpoint) -> None:
        if self._compiled_responder(ep):
            # admission, budget, ACK1 and trace replies in C; what it could not send goes out by the engine's flush
            try:
                ep.next_key, batch, unsent = _udpbatch.responder_rx(
                    ep.sock.fileno(), ep.hardware, self.budget,
                    (self.qpns[ep.rnic], self.allowed, self.reverse_peers, self.counters, self.reverse_seen, ep.ip,
                     ep.port), ep.sent, ep.next_key, _TX_FLAGS[ep.hardware])
            except OSError:  # as below
                return
            ep._trim()
            self._unsent(ep, unsent)
            self._rx_datagrams(ep, batch)
            return
        if _udpbatch is not None:
            try:
                if ep.responder:
                    batch = _udpbatch.recv_rx(ep.sock.fileno(), ep.hardware)
                else:  # a prober socket: its ACK1s and ACK2s are handled in C, the rest (trace replies) here
                    finished, batch = _udpbatch.prober_rx(ep.sock.fileno(), ep.hardware, self.pending)
                    self.inflight.finish_many(finished)
            except OSError:  # a queued ICMP error surfaced as sk_err (now cleared); the error queue has it
                return
            self._rx_datagrams(ep, batch)
            return
        try:
            data, anc, _flags, addr = ep.sock.recvmsg(256, kernel_ts.ANCBUF)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # as above
            return
        self._on_datagram(ep, data, addr, kernel_ts.timestamp_from_cmsgs(anc, ep.hardware), time.time_ns())

    def _on_datagram(self, ep: Endpoint, data: bytes, addr: tuple[str, int], t_rx: int | None, t_user: int) -> None:
        f = fields(data)
        if f is None:
            return
        src = addr[0]
        # what a source asked (probes, traces), bounded by the registry: the budget of what is answered
        if f[0] in _ANSWERED and (src in self.allowed or src in self.reverse_peers):
            self.budget.received(src, len(data), time.monotonic())
        self._on_packet(ep, f, addr, t_rx, t_user)

    def _read_errqueue(self, ep: Endpoint) -> None:
        entries: list[tuple[int, int | None, int, int, int, str, bytes, str, int]] = []
        kept = 0
        if self._compiled_responder(ep):
            with contextlib.suppress(OSError):  # ACK2 for each ACK1's TX timestamp, sent in C
                kept, entries, unsent = _udpbatch.responder_err(ep.sock.fileno(), ep.hardware, self.qpns[ep.rnic],
                                                                ep.sent)
                self._unsent(ep, unsent)
        elif _udpbatch is not None:
            with contextlib.suppress(OSError):
                if ep.responder:
                    entries = _udpbatch.recv_err(ep.sock.fileno(), ep.hardware)
                else:  # a prober socket: the probes' TX timestamps are handled in C, the rest (ICMP) here
                    kept, entries = _udpbatch.prober_err(ep.sock.fileno(), ep.hardware, self.pending, ep.sent)
        else:
            try:
                data, anc, _flags, addr = ep.sock.recvmsg(256, kernel_ts.ANCBUF, kernel_ts.ERRQUEUE_FLAGS)
            except (BlockingIOError, InterruptedError):
                pass
            else:
                e = kernel_ts.errqueue_entry(data, anc, ep.hardware, addr)
                if e is None:
                    return
                entries = [e]
        self._errqueue_entries(ep, kept, entries)

    def _errqueue_entries(self, ep: Endpoint, kept: int,
                          entries: list[tuple[int, int | None, int, int, int, str, bytes, str, int]]) -> None:
        if not entries and not kept:
            # EPOLLERR with an empty error queue: a pending socket error; reading it clears it (else epoll
            # would report it again at once, for ever)
            ep.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            return
        for origin, ts_ns, key, icmp_type, _code, offender, payload, dst_ip, dst_port in entries:
            if origin == kernel_ts.SO_EE_ORIGIN_TIMESTAMPING:
                ref = ep.sent.pop(key, None)
                if ref is not None and ts_ns is not None:
                    self._on_tx_timestamp(ep, ref, ts_ns)
            elif icmp_type in (11, 3):  # time exceeded: one hop of a trace; unreachable: a router without a route on
                f = fields(payload)
                if f is not None and f[0] == TRACE:
                    (self._trace_hit if icmp_type == 11 else self._trace_unreachable)(f[1], offender)
                elif f is not None and icmp_type == 3 and f[0] in (PROBE, ACK1, ACK2):
                    self._sent_unreachable(ep, f[0], f[1], offender, (dst_ip, dst_port))

    def _on_packet(self, ep: Endpoint, f: tuple[int, int, int, int, int, int, int], addr: tuple[str, int],
                   t_rx: int | None, t_user: int) -> None:
        kind, seq, pkt_qpn, prober_qpn, t3, t4, hw = f
        if kind == ACK1:
            p = self.pending.get(seq)
            if p is not None and p.t5 is None and addr[0] == p.entry["dst_ip"]:
                p.t5 = t_rx if t_rx is not None else t_user
                p.t6 = t_user
                if p.t3 is not None:
                    self.inflight.finish(p)
        elif kind == ACK2:
            p = self.pending.get(seq)
            if p is not None and addr[0] == p.entry["dst_ip"]:
                p.t3, p.t4, p.responder_hw = t3, t4, bool(hw)
                if p.t5 is not None:
                    self.inflight.finish(p)
        elif kind == PROBE:
            if not ep.responder or not self.admission.admit(addr[0], time.monotonic()):
                return
            qpn = self.qpns[ep.rnic]
            if pkt_qpn != qpn:
                self.counters["dropped_stale_qpn"] += 1
                return
            if not self.budget.allow(addr[0], 2 * PAYLOAD_BYTES, time.monotonic()):  # ACK1 and ACK2
                self.counters["dropped_budget"] += 1
                return
            t3 = t_rx if t_rx is not None else t_user
            self._reply(ep, encode(ACK1, seq, qpn, prober_qpn), addr, ("ack1", (addr, seq, t3, prober_qpn)))
            self.counters["answered"] += 1
            flow = (ep.ip, ep.port, addr[0], addr[1])
            if addr[0] in self.reverse_peers and (flow in self.reverse_seen
                                                  or len(self.reverse_seen) < MAX_REVERSE_FLOWS):
                self.reverse_seen[flow] = time.monotonic_ns()
        elif kind == TRACE:
            if self.admission.admit(addr[0], time.monotonic()):
                if not self.budget.allow(addr[0], PAYLOAD_BYTES, time.monotonic()):
                    self.counters["dropped_budget"] += 1
                    return
                # QPN 0: a trace reply tells nothing a sender without the responder's QPN should learn.
                self._reply(ep, encode(TRACE_REPLY, seq, 0), addr)
        elif kind == TRACE_REPLY:
            self._trace_hit(seq, None)

    def _on_tx_timestamp(self, ep: Endpoint, ref: tuple[str, Any], ts: int) -> None:
        kind, data = ref
        if kind == "probe":
            p = self.pending.get(data)
            if p is not None:
                p.t2 = ts
        elif kind == "ack1":
            addr, seq, t3, prober_qpn = data
            self._reply(ep, encode(ACK2, seq, self.qpns[ep.rnic], prober_qpn, t3, ts, ep.hardware), addr)
