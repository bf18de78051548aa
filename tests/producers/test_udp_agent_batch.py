"""The udp agent's batched loop over loopback: probes due within one batch leave together, a batch's
probe.v1 columns equal the rows of its probes, an ICMP error on a probe socket neither wedges nor spins
the poll, and one process (role ``both``) traces the ACK paths it answers as a responder alone does."""

from __future__ import annotations

import contextlib
import socket
import time
from array import array

import pyarrow.ipc as ipc
import pytest

from producers.probe_protocol import TIMEOUT_NS, FinishedProbes, PendingProbe, probe_columns, probe_row
from producers.udp_agent import Agent
from producers.udp_prober import LocalRnic, UdpEngine
from producers.udp_wire import fields
from schemas.arrow_nano import MaskedInts, encode_columns

from conftest import free_port, wait_for

pytestmark = pytest.mark.usefixtures("socket_calls")


def _port() -> int:
    return free_port(kind=socket.SOCK_DGRAM)


def test_probe_columns_are_the_rows_of_each_probe() -> None:
    entry = {"pinglist": "inter_tor", "prober_rnic": "A1", "responder_rnic": "B2", "responder_host": "H3",
             "src_ip": "10.1.1.2", "dst_ip": "10.2.2.2", "src_port": 49152, "dst_port": 4791, "qpn": 77,
             "flow_label": 5, "job_id": "j1"}
    other = {"prober_rnic": "A2", "src_ip": "10.1.2.2", "dst_ip": "10.2.1.2", "src_port": 49153, "dst_port": 4791}
    ok = PendingProbe(entry, seq=1, t1=100, deadline=0, hardware=True, t2=110, t3=500, t4=520, t5=900, t6=950,
                      responder_hw=True)
    lost_ack2 = PendingProbe(entry, seq=2, t1=200, deadline=0, hardware=True, t2=210, t5=1_000, t6=1_100)
    soft = PendingProbe(other, seq=3, t1=300, deadline=0, hardware=False, t2=310, t3=600, t4=650, t5=990, t6=999,
                        responder_hw=False)
    cols = probe_columns("H1", "H1", [ok, lost_ack2, soft])
    assert cols["status"] == ["ok", "timeout", "ok"]
    assert cols["t3"] == [500, None, 600] and cols["t5"] == [900, None, 990] and cols["t6"] == [950, None, 999]
    assert cols["t2"] == [110, 210, 310]  # the prober's own TX stamp stays on a timeout
    assert cols["ts_source"] == ["hardware", "software", "software"]  # no ACK2: the responder's clock unknown
    assert cols["pinglist"] == ["inter_tor", "inter_tor", "tor_mesh"]
    assert cols["prober_host"] == ["H1"] * 3 and cols["responder_host"] == ["H3", "H3", ""]
    assert cols["qpn"] == [77, 77, 0] and cols["flow_label"] == [5, 5, 0] and cols["job_id"] == ["j1", "j1", None]
    assert cols["seq"] == [1, 2, 3] and cols["agent_id"] == ["H1"] * 3
    for i, p in enumerate((ok, lost_ack2, soft)):
        assert probe_row("H1", "H1", p) == {k: v[i] for k, v in cols.items()}
    assert probe_columns("H1", "H1", []) == {k: [] for k in cols}


def test_probes_due_within_one_batch_leave_together_and_keep_their_rate() -> None:
    agent = Agent({"host": "H1", "rnics": [{"name": "A1", "ip": "127.0.0.1"}], "dst_port": _port(),
                   "role": "prober", "trace_interval_s": 3600}, sink=lambda *a: None)
    try:
        agent.set_entries([{"prober_rnic": "A1", "dst_ip": "127.0.0.1", "src_port": _port(), "qpn": 9,
                            "rate_pps": 1} for _ in range(4)])
        t0 = time.monotonic_ns()
        agent._schedule = [(t0, 0), (t0 + 3_000_000, 1), (t0 + 9_000_000, 2), (t0 + 15_000_000, 3)]
        agent.run_due(t0 - 1, 10_000_000)
        assert not agent.engine.pending  # nothing due yet: a wakeup before the earliest probe sends nothing
        agent.run_due(t0, 10_000_000)
        assert len(agent.engine.pending) == 3  # the three due by t0 + 10 ms, in one wakeup
        assert sorted(agent._schedule) == [(t0 + 15_000_000, 3), (t0 + 1_000_000_000, 0),
                                           (t0 + 1_003_000_000, 1), (t0 + 1_009_000_000, 2)]  # each its own rate
    finally:
        agent.engine.close()
    with pytest.raises(ValueError, match="send_batch_ms 'x'"):
        Agent({"host": "H1", "rnics": [], "send_batch_ms": "x"}, sink=lambda *a: None)


def test_an_icmp_error_on_a_probe_socket_neither_wedges_nor_spins_the_poll() -> None:
    """A probe to a port nobody listens on: loopback answers ICMP port unreachable, which lands on the
    socket's error queue and sets its pending error (EPOLLERR). The poll reads it, the TX stamp too, and
    epoll then reports nothing; the probe ends as a timeout with its t2."""
    rows: list[dict] = []
    engine = UdpEngine("H1", "H1", [LocalRnic("A1", "127.0.0.1")], responder=False, on_probe=rows.append)
    try:
        closed = _port()
        engine.send_probe({"prober_rnic": "A1", "dst_ip": "127.0.0.1", "dst_port": closed, "src_port": _port(),
                           "qpn": 5})
        p = next(iter(engine.pending.values()))
        wait_for(lambda: (engine.poll(0.01), p.t2 is not None and engine._epoll.poll(0) == [])[1], timeout=30,
                 every=0.0, what="the TX stamp read and the ICMP error cleared")
        assert engine.expire(time.monotonic_ns() + TIMEOUT_NS) == 1
    finally:
        engine.close()
    assert len(rows) == 1 and rows[0]["status"] == "timeout" and rows[0]["t2"] is not None
    assert rows[0]["t5"] is None and rows[0]["dst_port"] == closed


def test_one_process_prober_and_responder_traces_the_ack_paths_it_answers() -> None:
    """Role ``both`` (the one-process agent): its responder part runs the reverse-trace rounds too."""
    port = _port()
    reverse: list[dict] = []
    cfg = {"host": "H1", "rnics": [{"name": "A1", "ip": "127.0.0.1", "tor": "A"}], "dst_port": port,
           "allowed_sources": ["127.0.0.1"], "upload_interval_s": 0.3, "trace_interval_s": 0.5}

    def sink(schema: str, payload: bytes, key: str, headers: list[tuple[str, bytes]]) -> None:
        if schema == "path.v1":
            reverse.extend(r for r in ipc.open_stream(payload).read_all().to_pylist() if r["direction"] == "reverse")
        if reverse:
            agent.stop()

    agent = Agent(cfg, sink=sink)
    assert agent.role == "both"
    src_port = _port()
    agent.set_entries([{"prober_rnic": "A1", "responder_rnic": "A1", "dst_ip": "127.0.0.1", "dst_port": port,
                        "src_port": src_port, "qpn": agent.engine.qpns["A1"], "rate_pps": 20}])
    agent.run(duration_s=60)  # only bounds a failure: stopped by the sink
    assert reverse, "no reverse trace from the one-process agent"
    r = reverse[0]
    assert (r["src_port"], r["dst_port"]) == (port, src_port)  # the ACK's 5-tuple: responder port -> prober's
    assert r["hops"] == "A1,127.0.0.1" and r["complete"]  # loopback: the prober's socket answers at TTL 1


def test_probes_sent_together_keep_their_order_and_each_its_own_send_time() -> None:
    """Over both socket paths: probes of one batch leave in order, each t1 read at its own send (t1 <= t2 on the
    one clock), and a probe the kernel refuses (a broadcast address without SO_BROADCAST) stays pending to time
    out while the probes after it still leave."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    engine = UdpEngine("H1", "H1", [LocalRnic("A1", "127.0.0.1")], responder=False)
    try:
        entries = [{"prober_rnic": "A1", "dst_ip": ip, "dst_port": rx.getsockname()[1], "src_port": _port(),
                    "qpn": 9} for ip in ("127.0.0.1", "127.0.0.1", "255.255.255.255", "127.0.0.1")]
        t0 = time.time_ns()
        seqs = engine.send_probes(entries)
        assert seqs == sorted(seqs) and len(set(seqs)) == 4 and sorted(engine.pending) == seqs
        got: list[bytes] = []

        def arrived() -> bool:
            with contextlib.suppress(BlockingIOError):
                while True:
                    got.append(rx.recv(256))
            return len(got) >= 3

        wait_for(arrived, timeout=10, every=0.01, what="the three probes that could leave")
        assert [fields(d)[1] for d in got] == [seqs[0], seqs[1], seqs[3]]
        wait_for(lambda: engine.poll(0.01) or all(engine.pending[s].t2 for s in (seqs[0], seqs[1], seqs[3])),
                 timeout=10, every=0.0, what="the TX timestamps")
        sent = [engine.pending[s] for s in seqs]
        assert all(t0 <= p.t1 for p in sent) and [p.t1 for p in sent] == sorted(p.t1 for p in sent)
        assert all(p.t1 <= p.t2 for p in sent if p.t2 is not None) and sent[2].t2 is None
        assert engine.expire(time.monotonic_ns() + TIMEOUT_NS) == 4  # no answers: all four time out
    finally:
        engine.close()
        rx.close()


def test_finished_probes_kept_compact_give_the_rows_of_their_probes() -> None:
    """FinishedProbes (what an agent holds until its upload) gives probe_columns' rows, t1 and seq as arrays
    and t2-t6 as masked arrays, which the encoder reads as buffers; a probe without ACK2 is a timeout whose
    t3-t6 are null, t2 kept."""
    e1 = {"prober_rnic": "A1", "src_ip": "10.0.0.1", "dst_ip": "10.0.0.2", "src_port": 1, "dst_port": 2, "qpn": 7}
    e2 = dict(e1, prober_rnic="A2")
    ok = PendingProbe(e1, 10, 100, 0, True, t2=110, t3=200, t4=210, t5=300, t6=305, responder_hw=True)
    timeout = PendingProbe(e2, 11, 120, 0, False, t2=130, t5=310, t6=320)
    unsent = PendingProbe(e1, 12, 140, 0, False)
    done = FinishedProbes()
    for p in (ok, timeout, unsent):
        done.add(p)
    cols = done.columns("H1", "H1")
    assert len(done) == 3 and isinstance(cols["seq"], array) and isinstance(cols["t1"], array)
    assert {k: list(v) for k, v in cols.items()} == probe_columns("H1", "H1", [ok, timeout, unsent])
    assert list(cols["seq"]) == [10, 11, 12] and list(cols["t1"]) == [100, 120, 140]
    assert all(isinstance(cols[t], MaskedInts) for t in ("t2", "t3", "t4", "t5", "t6"))  # read as buffers too
    assert list(cols["t2"]) == [110, 130, None] and list(cols["t5"]) == [300, None, None]
    assert list(cols["t3"]) == [200, None, None]
    assert cols["status"] == ["ok", "timeout", "timeout"] and cols["ts_source"] == ["hardware", "software", "software"]
    assert cols["prober_rnic"] == ["A1", "A2", "A1"]
    cols["upload_ns"] = [1] * 3
    table = ipc.open_stream(encode_columns("probe.v1", cols)).read_all()
    assert table["seq"].to_pylist() == [10, 11, 12] and table["t2"].to_pylist() == [110, 130, None]
    assert FinishedProbes().columns("H1", "H1")["seq"] == array("Q")


def test_an_entry_without_a_source_port_probes_from_one_ephemeral_socket() -> None:
    """An entry that names no source port gets one from the kernel once and keeps it: 40 probes of it are
    answered over one 5-tuple (its path can be traced), and the engine holds two sockets, not one per probe."""
    port = _port()
    finished: list = []
    engine = UdpEngine("H1", "H1", [LocalRnic("A1", "127.0.0.1")], dst_port=port, allowed_sources=["127.0.0.1"],
                       on_finished=finished.extend)
    try:
        entry = {"prober_rnic": "A1", "dst_ip": "127.0.0.1", "qpn": engine.qpns["A1"]}
        for _ in range(40):
            engine.send_probes([entry])
            engine.poll(0.001)
        wait_for(lambda: engine.poll(0.01) or len(finished) == 40, timeout=10, every=0.0, what="40 answers")
        assert {p.entry["src_port"] for p in finished} == {engine.resolve(entry)[2].port}
        assert all(p.t3 is not None and p.t5 is not None for p in finished)  # answered, not timed out
        assert len(engine.endpoints) == 2  # the responder's and the entry's
    finally:
        engine.close()


@pytest.mark.skipif(not hasattr(socket, "AF_PACKET"), reason="AF_PACKET is Linux's")
def test_probes_leave_with_dont_fragment_set_as_rocev2_packets_do() -> None:
    """Read off the loopback device: a probe's IPv4 header has DF set (RoCEv2 sets it on every packet); the
    kernel then gives it IP ID 0 instead of hashing a random one per datagram."""
    try:
        raw = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
    except PermissionError:
        pytest.skip("reading the loopback device needs CAP_NET_RAW")
    dst = _port()
    engine = UdpEngine("H1", "H1", [LocalRnic("A1", "127.0.0.1")], responder=False)
    try:
        raw.bind(("lo", 0))
        raw.settimeout(5)
        engine.send_probe({"prober_rnic": "A1", "dst_ip": "127.0.0.1", "dst_port": dst, "qpn": 9})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            ip = raw.recv(2048)  # SOCK_DGRAM: from the IPv4 header on
            ihl = (ip[0] & 0x0F) * 4
            if ip[9] == socket.IPPROTO_UDP and int.from_bytes(ip[ihl + 2:ihl + 4], "big") == dst:
                break
        else:
            pytest.fail("the probe was not seen on lo")
        assert ip[6] & 0x40, "DF not set"
        assert ip[4:6] == b"\0\0"  # IP ID 0: no per-datagram hash
    finally:
        engine.close()
        raw.close()
