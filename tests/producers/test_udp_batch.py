"""The compiled batch calls (``producers._udpbatch``) against the kernel: what they read equals what the
pure-Python parsing reads, a refused datagram stops a ``sendmmsg`` at its place and the engine resends the
rest, and only sends that ask for a TX timestamp queue one."""

from __future__ import annotations

import socket
import time

import pytest

from producers import kernel_ts, udp_prober
from producers.udp_prober import Endpoint
from producers.udp_wire import PROBE, encode, fields

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
        data, anc, _f, _addr = wait_for(lambda: _recv_err_py(a), timeout=10, every=0.01, what="the ICMP error")
        py_entry = kernel_ts.errqueue_entry(data, anc)
        assert c_entry == tuple(py_entry) == (kernel_ts.SO_EE_ORIGIN_ICMP, None, 0, 3, 3, "127.0.0.1", payload)
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
