"""The compiled batch calls (``producers._udpbatch``) against the kernel: what they read equals what the
pure-Python parsing reads, a refused datagram stops a ``sendmmsg`` at its place and the engine resends the
rest, only sends that ask for a TX timestamp queue one, and the prober's ACKs and TX stamps fill in its
pending probes as the Python steps do."""

from __future__ import annotations

import socket
import time

import pytest

from producers import kernel_ts, udp_prober
from producers.probe_protocol import PendingProbe
from producers.udp_prober import Endpoint
from producers.udp_wire import ACK1, ACK2, PROBE, TRACE_REPLY, encode, fields

from conftest import wait_for

batch = udp_prober._udpbatch
pytestmark = pytest.mark.skipif(batch is None, reason="producers._udpbatch is not built (no C compiler)")


def _sock() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    kernel_ts.enable(s)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    return s


def _errqueue(s: socket.socket, want: int) -> list[tuple]:
    got: list[tuple] = []
    wait_for(lambda: got.extend(batch.recv_err(s.fileno(), False)) or len(got) >= want, timeout=10, every=0.01,
             what=f"{want} error-queue entries")
    return got


def test_batched_reads_equal_the_python_parsing() -> None:
    a, b = _sock(), _sock()
    try:
        t0 = time.time_ns()
        tx = kernel_ts.tx_flags(False)
        items = [(encode(PROBE, seq, 7), "127.0.0.1", b.getsockname()[1], 0, 100 + seq, tx) for seq in range(5)]
        assert batch.send_many(a.fileno(), items) == 5
        rx: list[tuple] = []
        wait_for(lambda: rx.extend(batch.recv_rx(b.fileno(), False)) or len(rx) >= 5, timeout=10, every=0.01,
                 what="5 datagrams")
        assert [r[0] for r in rx] == [i[0] for i in items]
        assert {(r[1], r[2]) for r in rx} == {a.getsockname()}
        assert all(t0 <= r[3] <= time.time_ns() for r in rx)  # kernel RX stamps on the realtime clock
        stamps = _errqueue(a, 5)
        assert [(e[0], e[2]) for e in stamps] == [(kernel_ts.SO_EE_ORIGIN_TIMESTAMPING, 100 + i) for i in range(5)]
        assert all(t0 <= e[1] <= time.time_ns() for e in stamps)
        assert batch.recv_rx(b.fileno(), False) == [] and batch.recv_err(a.fileno(), False) == []

        # an ICMP port unreachable, read once by each path: the same entry but for nothing
        closed = _sock()
        port = closed.getsockname()[1]
        closed.close()
        payload = encode(PROBE, 9, 7)
        a.sendto(payload, ("127.0.0.1", port))
        (c_entry,) = _errqueue(a, 1)
        a.sendto(payload, ("127.0.0.1", port))
        data, anc, _f, addr = wait_for(lambda: _recv_err_py(a), timeout=10, every=0.01, what="the ICMP error")
        py_entry = kernel_ts.errqueue_entry(data, anc, False, addr)
        # with where the datagram went (msg_name): the responder keys an ACK's unreachable by it
        assert c_entry == tuple(py_entry) == (kernel_ts.SO_EE_ORIGIN_ICMP, None, 0, 3, 3, "127.0.0.1", payload,
                                              "127.0.0.1", port)
    finally:
        a.close()
        b.close()


def _recv_err_py(s: socket.socket) -> tuple | None:
    try:
        return s.recvmsg(256, kernel_ts.ANCBUF, kernel_ts.ERRQUEUE_FLAGS)
    except BlockingIOError:
        return None


def test_a_refused_datagram_stops_sendmmsg_and_the_endpoint_sends_the_rest() -> None:
    a, b = _sock(), _sock()
    try:
        dst = b.getsockname()
        # a broadcast without SO_BROADCAST is refused (EACCES) by the kernel, at its place in the batch
        items = [(encode(PROBE, s, 1), ip, dst[1], 0, -1, 0)
                 for s, ip in enumerate(["127.0.0.1", "127.0.0.1", "255.255.255.255", "127.0.0.1"])]
        assert batch.send_many(a.fileno(), items) == 2
        with pytest.raises(ValueError, match="not an IPv4 address"):
            batch.send_many(a.fileno(), [(b"x", "no-such-host", 1, 0, -1, 0)])

        ep = Endpoint(a, "127.0.0.1", a.getsockname()[1], 0, "A1", hardware=False)
        for seq, ip in enumerate(["127.0.0.1", "255.255.255.255", "127.0.0.1", "127.0.0.1"]):
            ep.queue(encode(PROBE, 10 + seq, 1), (ip, dst[1]), ("probe", 10 + seq))
        assert ep.flush() == 3 and ep.outbox == []
        got: list[tuple] = []
        wait_for(lambda: got.extend(batch.recv_rx(b.fileno(), False)) or len(got) >= 5, timeout=10, every=0.01,
                 what="the datagrams sent")
        seqs = [fields(r[0])[1] for r in got]
        assert seqs == [0, 1, 10, 12, 13]
        # each sent datagram's TX timestamp comes back under the key it was remembered by
        stamps = _errqueue(a, 3)
        assert sorted(ep.sent.pop(e[2]) for e in stamps) == [("probe", 10), ("probe", 12), ("probe", 13)]
        assert ep.sent == {}
    finally:
        a.close()
        b.close()


@pytest.mark.usefixtures("socket_calls")
def test_only_sends_with_an_owner_queue_a_tx_timestamp() -> None:
    a, b = _sock(), _sock()
    try:
        ep = Endpoint(a, "127.0.0.1", a.getsockname()[1], 0, "A1", hardware=False)
        dst = b.getsockname()
        assert ep.send(encode(PROBE, 1, 1), dst, ("probe", 1))
        assert ep.send(encode(PROBE, 2, 1), dst)  # an ACK2 or trace packet: nobody reads its send time
        ep.queue(encode(PROBE, 3, 1), dst)
        ep.queue(encode(PROBE, 4, 1), dst, ("probe", 4))
        assert ep.flush() == 2
        stamps = _errqueue(a, 2)
        assert sorted(ep.sent.pop(e[2]) for e in stamps) == [("probe", 1), ("probe", 4)]
        assert batch.recv_err(a.fileno(), False) == []  # loopback stamps at send: a third would be here
    finally:
        a.close()
        b.close()


def test_the_prober_calls_fill_in_pending_probes_as_the_python_steps_do() -> None:
    prober, responder, stranger = _sock(), _sock(), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        stranger.bind(("127.0.0.2", 0))
        dst = responder.getsockname()
        entry = {"dst_ip": "127.0.0.1"}
        ep = Endpoint(prober, "127.0.0.1", prober.getsockname()[1], 0, "A1", hardware=False)
        pending = {seq: PendingProbe(entry, seq, 1_000, 2_000, False) for seq in (1, 2, 3)}
        for seq in (1, 2):
            assert ep.send(encode(PROBE, seq, 5, 6), dst, ("probe", seq))
        ep.sent[999] = ("ack1", ("x",))  # an entry the C side leaves to the Python steps
        kept, rest = wait_for(lambda: (lambda r: r if r[0] >= 2 else None)(
            batch.prober_err(prober.fileno(), False, pending, ep.sent)), timeout=10, every=0.01, what="2 TX stamps")
        assert (kept, rest) == (2, []) and list(ep.sent) == [999]
        assert pending[1].t2 is not None and pending[2].t2 is not None and pending[3].t2 is None
        t_before = time.time_ns()
        here = prober.getsockname()
        responder.sendto(encode(ACK1, 1, 5, 6), here)  # ACK1 first: seq 1 waits for its ACK2
        responder.sendto(encode(ACK2, 2, 5, 6, 111, 222, True), here)  # ACK2 first: seq 2 waits for its ACK1
        stranger.sendto(encode(ACK1, 3, 5, 6), here)  # from another address than the probe's: dropped
        responder.sendto(encode(ACK2, 1, 5, 6, 333, 444), here)  # completes seq 1
        responder.sendto(encode(TRACE_REPLY, 9, 0), here)  # not an ACK: left to the Python steps
        got: list = []
        wait_for(lambda: got.append(batch.prober_rx(prober.fileno(), False, pending)) or sum(
            len(f) + len(o) for f, o in got) >= 2, timeout=10, every=0.01, what="the replies")
        finished = [p for f, _ in got for p in f]
        others = [o for _, os in got for o in os]
        assert [p.seq for p in finished] == [1] and sorted(pending) == [2, 3]
        p1 = finished[0]
        assert (p1.t3, p1.t4, p1.responder_hw) == (333, 444, False)
        assert t_before <= p1.t5 <= p1.t6 <= time.time_ns()  # kernel RX stamp, then the read's clock
        assert (pending[2].t3, pending[2].t4, pending[2].responder_hw, pending[2].t5) == (111, 222, True, None)
        assert pending[3].t5 is None  # the stranger's ACK1
        assert [(fields(o[0])[0], o[1]) for o in others] == [(TRACE_REPLY, "127.0.0.1")]
    finally:
        for s in (prober, responder, stranger):
            s.close()


def test_dispatch_serves_a_wakeup_s_sockets_and_leaves_the_rest_to_the_engine_s_steps() -> None:
    """One ``dispatch`` call per wakeup: a prober socket's TX stamp and ACKs finish its probe (as prober_err and
    prober_rx do), its trace reply is left (kind 2), and a socket the table does not hold is left as its event
    (kind 0), untouched; an empty error queue is left (kind 1, 0 kept) for the engine to clear the socket error."""
    import select

    prober, responder, other = _sock(), _sock(), _sock()
    ep_poll = select.epoll()
    try:
        dst = responder.getsockname()
        ep = Endpoint(prober, "127.0.0.1", prober.getsockname()[1], 0, "A1", hardware=False)
        pending = {7: PendingProbe({"dst_ip": "127.0.0.1"}, 7, 1_000, 2_000, False)}
        assert ep.send(encode(PROBE, 7, 5, 6), dst, ("probe", 7))
        here = prober.getsockname()
        responder.sendto(encode(ACK1, 7, 5, 6), here)
        responder.sendto(encode(ACK2, 7, 5, 6, 333, 444), here)
        responder.sendto(encode(TRACE_REPLY, 9, 0), here)
        responder.sendto(encode(ACK1, 1, 5, 6), other.getsockname())
        for s in (prober, other):
            ep_poll.register(s.fileno(), select.EPOLLIN)
        table = {prober.fileno(): (0, False, ep.sent)}
        shared = (set(), set(), {}, {})
        finished: list = []
        left: list = []

        def served() -> bool:
            f, rest = batch.dispatch(ep_poll.poll(0), table, pending, batch.Gate(100.0), shared)
            finished.extend(f)
            left.extend(rest)
            return bool(finished) and any(k == 2 for k, *_ in left)

        wait_for(served, timeout=10, every=0.01, what="the probe finished and its trace reply left")
        assert [p.seq for p in finished] == [7] and pending == {} and ep.sent == {}
        assert (finished[0].t3, finished[0].t4) == (333, 444) and finished[0].t2 is not None
        rx = [(a, b) for k, fd, a, b, _ in left if k == 2]
        assert [(fields(d[0])[0], d[1]) for d in rx[0][0]] == [(TRACE_REPLY, "127.0.0.1")] and rx[0][1] == []
        assert (0, other.fileno(), select.EPOLLIN, None, None) in left  # not in the table: the engine's steps
        assert batch.recv_rx(other.fileno(), False)[0][0] == encode(ACK1, 1, 5, 6)  # left unread
        # EPOLLERR with nothing queued (a pending socket error, as the kernel reports it): left, 0 kept
        _, rest = batch.dispatch([(prober.fileno(), select.EPOLLERR)], table, pending, batch.Gate(100.0), shared)
        assert rest == [(1, prober.fileno(), 0, [], [])]
    finally:
        ep_poll.close()
        for s in (prober, responder, other):
            s.close()
