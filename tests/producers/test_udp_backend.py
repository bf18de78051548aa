"""The udp backend and the lab plan without root: wire format, addressing, nft rule text,
and a whole agent (prober + responder) over loopback with kernel timestamps."""

from __future__ import annotations

import socket
import struct
import time

import pyarrow.ipc as ipc
import pytest

from infra.lab import nft
from infra.lab.layout import LabSpec, plan
from infra.lab.netns import LabError
from producers import kernel_ts, udp_prober
from producers.probe_protocol import InFlight, PendingProbe, ReplyBudget, TokenBucket
from producers.udp_agent import Agent
from producers.udp_prober import MAX_HOPS, REVERSE_FLOWS_PER_PEER, LocalRnic, UdpEngine
from producers.udp_wire import ACK1, ACK2, PAYLOAD_BYTES, PROBE, TRACE, TRACE_REPLY, Packet, decode
from schemas.inventory_yaml import from_dict

from conftest import free_port, wait_for

pytestmark = pytest.mark.usefixtures("socket_calls")


def test_packets_are_50_bytes_and_round_trip() -> None:
    p = Packet(ACK2, seq=2**63 + 5, qpn=0xABCDEF, prober_qpn=7, t3=1_700_000_000_000_000_123, t4=-1, hardware=True)
    raw = p.encode()
    assert len(raw) == PAYLOAD_BYTES == 50
    assert decode(raw) == p
    assert decode(b"XX" + raw[2:]) is None  # not ours
    assert decode(raw[:10]) is None
    assert decode(Packet(PROBE, 1, 2).encode()[:3] + b"\x09" + bytes(46)) is None  # unknown kind


def test_panel1_plan_names_addresses_and_routes() -> None:
    fab = plan()
    assert fab.spines == ["S1", "S2", "S3", "S4"] and fab.tors == ["A", "B", "C"]
    assert fab.hosts == [f"H{i}" for i in range(1, 7)]
    assert [r.name for r in fab.host_rnics("H1")] == ["A1", "A2"]
    assert [r.name for r in fab.host_rnics("H3")] == ["B1", "B2"]
    assert fab.rnic("B2").ip == "10.2.2.2" and fab.rnic("B2").gateway == "10.2.2.1"
    ln = fab.link("S3", "A")
    assert (ln.a, ln.a_if, ln.a_ip, ln.b, ln.b_if, ln.b_ip) == ("S3", "A", "10.103.1.1", "A", "S3", "10.103.1.2")
    names = fab.address_names()
    assert names["10.103.1.1"] == "S3" and names["10.103.1.2"] == "A" and names["10.1.4.2"] == "A4"
    ecmp = [r for r in fab.routes if r.node == "A" and r.dst == "10.2.0.0/16"]
    assert len(ecmp) == 1 and len(ecmp[0].gateways) == 4
    assert fab.netns("S1") == "fs-S1"
    inv = from_dict(fab.inventory_dict())
    assert inv.rnics["C4"].host == "H6" and inv.rnics["C4"].ip == "10.3.4.2"
    assert len(inv.links) == 12
    with pytest.raises(ValueError, match="1..26"):
        LabSpec(tors=27)


def test_nft_rule_text_and_validation() -> None:
    assert nft.loss_rule("S3", 50) == 'oifname "S3" numgen random mod 1000 < 50 counter drop'
    fwd, rev = nft.tuple_loss_rules("S3", 250, seed=5)
    assert "udp dport 4791 jhash ip saddr . ip daddr . udp sport . udp dport mod 1000 seed 0x5 < 250" in fwd
    assert "udp sport 4791 jhash ip daddr . ip saddr . udp dport . udp sport mod 1000 seed 0x5 < 250" in rev
    with pytest.raises(LabError):
        nft.loss_rule('S3"; flush ruleset', 50)
    with pytest.raises(LabError):
        nft.loss_rule("S3", 0)
    # all of it: nft takes ``mod 1000 < 1000`` as out of range, so no random or hash test at all
    assert nft.loss_rule("S3", 1000) == 'oifname "S3" counter drop'
    assert nft.tuple_loss_rules("S3", 1000, seed=5) == ['oifname "S3" udp dport 4791 counter drop',
                                                        'oifname "S3" udp sport 4791 counter drop']


def test_timestamp_cmsg_parsing() -> None:
    data = struct.pack("=qqqqqq", 12, 345, 0, 0, 67, 890)
    anc = [(socket.SOL_SOCKET, kernel_ts.SCM_TIMESTAMPING, data)]
    assert kernel_ts.timestamp_from_cmsgs(anc, hardware=False) == 12_000_000_345
    assert kernel_ts.timestamp_from_cmsgs(anc, hardware=True) == 67_000_000_890
    assert kernel_ts.timestamp_from_cmsgs([], hardware=False) is None


def test_token_bucket_limits_per_source_rate() -> None:
    b = TokenBucket(rate=10, burst=3)
    assert [b.take(100.0) for _ in range(4)] == [True, True, True, False]
    assert [b.take(100.25) for _ in range(3)] == [True, True, False]  # 0.25 s at 10/s: 2.5 tokens


def _free_udp_port() -> int:
    return free_port(kind=socket.SOCK_DGRAM)


def _enough(sent: list[tuple[str, bytes, str]], qpn: int) -> bool:
    """3 probe uploads with >= 50 answered probes and a stale-QPN timeout among them, and a forward path."""
    probes = [ipc.open_stream(p).read_all() for s, p, _ in sent if s == "probe.v1"]
    rows = [r for t in probes for r in t.select(["status", "qpn"]).to_pylist()]
    paths = [ipc.open_stream(p).read_all() for s, p, _ in sent if s == "path.v1"]
    return (len(probes) >= 3 and sum(r["status"] == "ok" for r in rows) >= 50
            and any(r["qpn"] != qpn and r["status"] == "timeout" for r in rows)
            and any(r["direction"] == "forward" for t in paths for r in t.to_pylist()))


def _loopback_agent(port: int, **timing: float) -> dict:
    """The config of agent H1 with one RNIC A1 on 127.0.0.1 answering on ``port``, plus ``timing``."""
    return {"host": "H1", "rnics": [{"name": "A1", "ip": "127.0.0.1", "tor": "A"}], "dst_port": port,
            "allowed_sources": ["127.0.0.1"], **timing}


def test_agent_over_loopback_uploads_probe_and_path_batches() -> None:
    port = _free_udp_port()
    sent: list[tuple[str, bytes, str]] = []
    heads: list[dict[str, bytes]] = []
    cfg = _loopback_agent(port, upload_interval_s=0.4, trace_interval_s=60)

    def sink(schema: str, payload: bytes, key: str, headers: list[tuple[str, bytes]]) -> None:
        sent.append((schema, payload, key))
        heads.append(dict(headers))
        if _enough(sent, qpn):
            agent.stop()  # the run ends once the evidence below is in, however slow the machine

    agent = Agent(cfg, sink=sink)
    qpn = agent.engine.qpns["A1"]
    agent.set_entries(
        [
            {
                "pinglist": "tor_mesh",
                "prober_rnic": "A1",
                "responder_rnic": "A1",
                "responder_host": "H1",
                "dst_ip": "127.0.0.1",
                "dst_port": port,
                "src_port": _free_udp_port(),
                "qpn": qpn,
                "rate_pps": 50,
            },
            {
                "pinglist": "tor_mesh",
                "prober_rnic": "A1",
                "responder_rnic": "A1",
                "responder_host": "H1",
                "dst_ip": "127.0.0.1",
                "dst_port": port,
                "src_port": _free_udp_port(),
                "qpn": qpn ^ 1,
                "rate_pps": 5,
            },
        ]
    )
    agent.run(duration_s=120)  # only bounds a failure: stopped by the sink
    probes = [ipc.open_stream(p).read_all() for s, p, _ in sent if s == "probe.v1"]
    paths = [ipc.open_stream(p).read_all() for s, p, _ in sent if s == "path.v1"]
    assert len(probes) >= 3  # one batch per upload, empty or not (the heartbeat)
    probe_heads = [h for (s, _, _), h in zip(sent, heads, strict=True) if s == "probe.v1"]
    assert all(h["agent_id"] == b"H1" and h["host"] == b"H1" and int(h["upload_ns"]) > 0 for h in probe_heads)
    rows = [r for t in probes for r in t.to_pylist()]
    ok = [r for r in rows if r["status"] == "ok"]
    stale = [r for r in rows if r["qpn"] != qpn]
    assert len(ok) >= 50 and all(r["agent_id"] == "H1" and r["ts_source"] == "software" for r in ok)
    for r in ok:
        assert r["t1"] <= r["t2"] <= r["t3"] <= r["t4"] <= r["t5"] <= r["t6"]
        assert 0 < (r["t5"] - r["t2"]) - (r["t4"] - r["t3"]) < 5_000_000  # network RTT, loopback
    assert stale and all(r["status"] == "timeout" and r["t5"] is None for r in stale)
    assert agent.engine.counters["dropped_stale_qpn"] == len(stale)
    hops = [r["hops"] for t in paths for r in t.to_pylist() if r["direction"] == "forward"]
    assert "A1,A1" in hops  # loopback: the destination answers at TTL 1


def test_loopback_offers_software_timestamps_only() -> None:
    caps = kernel_ts.ts_capabilities("lo")
    assert caps & (kernel_ts.SOF_TX_SOFTWARE | kernel_ts.SOF_RX_SOFTWARE) == (
        kernel_ts.SOF_TX_SOFTWARE | kernel_ts.SOF_RX_SOFTWARE
    )
    assert kernel_ts.hardware_timestamping("lo") is False  # so rows say "software"
    assert kernel_ts.ts_capabilities("no-such-if0") == 0


COMPILED = udp_prober._udpbatch  # as built (the socket_calls fixture hides it from the engine in its python runs)


def _budgets() -> list:
    """The reply budget's two implementations: Python's, and the compiled responder's gate where it is built."""
    return [ReplyBudget] + ([COMPILED.Gate] if COMPILED is not None else [])


@pytest.mark.parametrize("make", _budgets(), ids=lambda m: m.__name__)
def test_reply_budget_allows_twice_the_bytes_in_over_the_trailing_window(make) -> None:  # noqa: ANN001
    b = make(500.0, factor=2.0, window_s=10.0) if make is not ReplyBudget else make(factor=2.0, window_s=10.0)
    assert not b.allow("10.0.0.9", 1, 100.0)  # nothing received: nothing may go out
    b.received("10.0.0.9", 50, 100.0)
    assert b.allow("10.0.0.9", 50, 100.2) and b.allow("10.0.0.9", 50, 100.4)  # ACK1 + ACK2
    assert not b.allow("10.0.0.9", 1, 100.5)
    b.received("10.0.0.9", 50, 105.0)
    assert b.allow("10.0.0.9", 100, 105.1) and not b.allow("10.0.0.9", 1, 105.2)
    # At 110.5 the bytes of second 100 (50 in, 100 out) left the window: 50 in, 100 out remain.
    assert not b.allow("10.0.0.9", 1, 110.5)
    b.received("10.0.0.9", 50, 111.0)
    assert b.allow("10.0.0.9", 100, 111.0) and not b.allow("10.0.0.9", 1, 111.0)
    small = make(500.0, max_sources=2) if make is not ReplyBudget else make(max_sources=2)
    for i in range(5):
        small.received(f"10.0.0.{i}", 50, 1.0)
    assert len(small._per if make is ReplyBudget else small) == 2  # bounded state
    assert not small.allow("10.0.0.0", 1, 1.0) and small.allow("10.0.0.4", 100, 1.0)  # the oldest forgotten


@pytest.mark.skipif(COMPILED is None, reason="producers._udpbatch is not built (no C compiler)")
def test_the_compiled_gate_takes_tokens_as_the_token_bucket_does() -> None:
    g, b = COMPILED.Gate(10.0), TokenBucket(rate=10, burst=10)
    for now in (100.0, 100.0, 100.25, 100.25, 100.25, 101.0):
        assert [g.take("10.0.0.9", now) for _ in range(11)] == [b.take(now) for _ in range(11)]
    assert not g.take("10.0.0.9", 101.0) and g.take("10.0.0.8", 101.0)  # each source has a bucket of its own
    with pytest.raises(ValueError, match="not an IPv4 address"):
        g.take("no-such-host", 1.0)


def _attack(engine: UdpEngine, port: int, sockets: list[socket.socket], kind: int, qpn: int) -> tuple[int, int]:
    """Each socket sends one ``kind`` packet to the responder; returns (bytes sent, bytes received back)
    once every reply the protocol allows (two ACKs per probe, one reply per trace) has arrived."""
    per = 2 if kind == PROBE else 1
    got: dict[int, list[bytes]] = {i: [] for i in range(len(sockets))}
    for i, s in enumerate(sockets):
        s.sendto(Packet(kind, 1000 + i, qpn).encode(), ("127.0.0.1", port))

    def replies() -> bool:
        engine.poll(0.02)
        for i, s in enumerate(sockets):
            while True:
                try:
                    got[i].append(s.recv(256))
                except BlockingIOError:
                    break
        return all(len(v) >= per for v in got.values())

    wait_for(replies, timeout=60, every=0.0, what="the protocol's replies to every packet")
    return PAYLOAD_BYTES * len(sockets), sum(len(p) for v in got.values() for p in v)


def _drain(sockets: list[socket.socket]) -> list[bytes]:
    out = []
    for s in sockets:
        while True:
            try:
                out.append(s.recv(256))
            except BlockingIOError:
                break
    return out


def test_the_responder_never_sends_a_source_more_than_twice_what_it_sent() -> None:
    """Issue 28, 8: from 300 source ports of one registered address, one probe each. Before: 15,000 B in,
    30,000 B of ACKs out, then 120,000 B of TRACE packets on the next reverse-trace round (10x).
    Now the factor is 2 (the protocol's own ACK1 + ACK2) and the round sends nothing to an address this
    host does not probe; toward one it probes, at most 8 traces per round, however many ports sent."""
    port = _free_udp_port()
    engine = UdpEngine("R", "R", [LocalRnic("A1", "127.0.0.1")], allowed_sources=["127.0.0.1"], dst_port=port,
                       rate_limit=10_000)
    qpn = engine.qpns["A1"]
    sockets = []
    try:
        for _ in range(300):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
            sockets.append(s)
        sent, back = _attack(engine, port, sockets, PROBE, qpn)
        assert (sent, back) == (15_000, 30_000)
        assert engine.reverse_seen == {}  # 127.0.0.1 is not a peer this responder probes
        assert engine.trace_reverse_paths(0) == 0
        engine.poll(0.05)
        assert _drain(sockets) == []
        # The attacker spoofs a peer this host probes itself: the round traces a fixed 8 of its flows (8 hops
        # each, 3,200 B), whether it used 8 source ports or 300, and then forgets them all.
        engine.reverse_peers = {"127.0.0.1"}
        sent2, back2 = _attack(engine, port, sockets, PROBE, qpn)
        assert (sent2, back2) == (15_000, 30_000)
        assert len(engine.reverse_seen) == 300
        t0 = time.monotonic_ns()
        assert engine.trace_reverse_paths(0, now_mono=t0) == REVERSE_FLOWS_PER_PEER == 8
        assert engine.reverse_seen == {}
        traces = wait_for(lambda: (engine.poll(0.02), len(_drain(sockets)))[1] or None, timeout=30, every=0.0,
                          what="the reverse traces")
        assert traces <= REVERSE_FLOWS_PER_PEER * MAX_HOPS
        # A trace gets one reply of the same size, and learns no QPN.
        sent3, back3 = _attack(engine, port, sockets[:10], TRACE, 0)
        assert (sent3, back3) == (500, 500)
        # The responder looks every 2 s: the cap holds over the trace interval, however often it looks.
        _attack(engine, port, sockets, PROBE, qpn)
        assert engine.trace_reverse_paths(0, interval_ns=60 * 10**9, now_mono=t0 + 2 * 10**9) == 0
        _attack(engine, port, sockets, PROBE, qpn)
        assert engine.trace_reverse_paths(0, interval_ns=60 * 10**9, now_mono=t0 + 60 * 10**9) == 8
    finally:
        engine.close()
        for s in sockets:
            s.close()


def test_a_trace_reply_carries_no_qpn() -> None:
    """Issue 28, 8: a TRACE from a registered address returned the responder's QPN without knowing it."""
    port = _free_udp_port()
    engine = UdpEngine("R", "R", [LocalRnic("A1", "127.0.0.1")], allowed_sources=["127.0.0.1"], dst_port=port)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    try:
        s.sendto(Packet(TRACE, 77, 0).encode(), ("127.0.0.1", port))
        reply = wait_for(lambda: (engine.poll(0.02), _drain([s]))[1], timeout=30, every=0.0, what="the trace reply")
    finally:
        engine.close()
        s.close()
    assert len(reply) == 1
    pkt = decode(reply[0])
    assert (pkt.kind, pkt.seq, pkt.qpn) == (TRACE_REPLY, 77, 0) and engine.qpns["A1"] != 0


def test_an_answer_whose_ack2_never_came_is_a_timeout_not_a_row_without_t3() -> None:
    """ACK1 in time, ACK2 lost: the deadline finishes it as a timeout (t3-t6 null), so it reaches the vote
    over its reverse path instead of the dead-letter topic ("status ok but t3 is null")."""
    rows: list[dict] = []
    inflight = InFlight("H1", "H1", rows.append)
    entry = {"prober_rnic": "A1", "src_ip": "10.0.0.1", "dst_ip": "10.0.1.1", "src_port": 49152, "dst_port": 4791}
    lost = PendingProbe(dict(entry), seq=1, t1=1_000, deadline=501_000, hardware=False, t2=1_100, t5=9_000,
                        t6=9_500)
    answered = PendingProbe(dict(entry), seq=2, t1=2_000, deadline=502_000, hardware=False, t2=2_100, t3=4_000,
                            t4=4_500, t5=8_000, t6=8_400)
    inflight.add(lost)
    inflight.add(answered)
    inflight.finish(answered)  # both ACKs came: finished at once
    assert inflight.expire(501_000) == 1  # the deadline finishes the one still waiting for ACK2
    by_seq = {r["seq"]: r for r in rows}
    assert by_seq[2]["status"] == "ok" and (by_seq[2]["t3"], by_seq[2]["t4"], by_seq[2]["t5"]) == (4_000, 4_500, 8_000)
    assert by_seq[1]["status"] == "timeout"
    assert [by_seq[1][t] for t in ("t3", "t4", "t5", "t6")] == [None, None, None, None]



def test_every_round_of_traces_is_uploaded_not_only_the_first() -> None:
    """A 5-tuple is traced again each ``trace_interval_s``; each round's trace reaches the sink, so a
    rerouted path is seen (the first upload swaps the row list: a trace kept after it must not be lost)."""
    port = _free_udp_port()
    traces: list[dict] = []
    cfg = _loopback_agent(port, upload_interval_s=0.3, trace_interval_s=0.5)

    def sink(schema: str, payload: bytes, key: str, headers: list[tuple[str, bytes]]) -> None:
        if schema == "path.v1":
            traces.extend(r for r in ipc.open_stream(payload).read_all().to_pylist() if r["direction"] == "forward")
        if len(traces) >= 3:
            agent.stop()

    agent = Agent(cfg, sink=sink)
    src_port = _free_udp_port()
    agent.set_entries([{"pinglist": "tor_mesh", "prober_rnic": "A1", "responder_rnic": "A1", "responder_host": "H1",
                        "dst_ip": "127.0.0.1", "dst_port": port, "src_port": src_port,
                        "qpn": agent.engine.qpns["A1"], "rate_pps": 20}])
    agent.run(duration_s=60)  # only bounds a failure: stopped by the sink
    assert len(traces) >= 3, traces
    assert {r["src_port"] for r in traces} == {src_port}
    assert len({r["trace_ns"] for r in traces}) == len(traces)  # three rounds, not one trace sent thrice


def test_a_new_flow_s_ack_path_is_traced_at_the_next_look_and_each_flow_once_per_interval() -> None:
    """The responder looks every 2 s: a flow first answered after its start gets its ACK path traced at the
    next look, not a trace interval (60 s) later; a traced flow waits the interval for its next trace."""
    port = _free_udp_port()
    engine = UdpEngine("R", "R", [LocalRnic("A1", "127.0.0.1")], allowed_sources=["127.0.0.1"], dst_port=port)
    try:
        lip, lport, _ = next(iter(engine.endpoints))
        engine.reverse_peers = {"127.0.0.2"}
        old, new = (lip, lport, "127.0.0.2", 5000), (lip, lport, "127.0.0.2", 5001)
        t0, s = time.monotonic_ns(), 10**9
        engine.reverse_seen = {old: 1}
        assert engine.trace_reverse_paths(0, interval_ns=60 * s, now_mono=t0) == 1
        engine.reverse_seen = {old: 2, new: 2}
        assert engine.trace_reverse_paths(0, interval_ns=60 * s, now_mono=t0 + 2 * s) == 1  # the new flow only
        assert engine.reverse_traced == {old: t0, new: t0 + 2 * s}
        engine.reverse_seen = {old: 3, new: 3}
        assert engine.trace_reverse_paths(0, interval_ns=60 * s, now_mono=t0 + 60 * s) == 1  # old: 60 s on
        assert engine.reverse_traced == {old: t0 + 60 * s, new: t0 + 2 * s}
    finally:
        engine.close()


def test_a_peer_with_more_flows_than_its_cap_gets_each_traced_in_turn() -> None:
    """10 flows from one peer, 8 traces per interval: the 2 held back go first when the interval is over."""
    port = _free_udp_port()
    engine = UdpEngine("R", "R", [LocalRnic("A1", "127.0.0.1")], allowed_sources=["127.0.0.1"], dst_port=port)
    try:
        lip, lport, _ = next(iter(engine.endpoints))
        engine.reverse_peers = {"127.0.0.2"}
        flows = [(lip, lport, "127.0.0.2", 5000 + i) for i in range(10)]
        t0, s = time.monotonic_ns(), 10**9
        engine.reverse_seen = dict.fromkeys(flows, 1)
        assert engine.trace_reverse_paths(0, interval_ns=60 * s, now_mono=t0) == REVERSE_FLOWS_PER_PEER
        held = [f for f in flows if f not in engine.reverse_traced]
        assert len(held) == 2
        engine.reverse_seen = dict.fromkeys(flows, 2)
        assert engine.trace_reverse_paths(0, interval_ns=60 * s, now_mono=t0 + 30 * s) == 0  # the cap holds
        engine.reverse_seen = dict.fromkeys(flows, 3)
        assert engine.trace_reverse_paths(0, interval_ns=60 * s, now_mono=t0 + 60 * s) == REVERSE_FLOWS_PER_PEER
        assert all(engine.reverse_traced[f] == t0 + 60 * s for f in held)
    finally:
        engine.close()


def test_a_trace_whose_router_answers_were_held_back_ends_at_the_router_that_turned_the_probes_away() -> None:
    """A spine with no route to the destination answers each probe with ICMP unreachable, but Linux sends such
    answers at most once a second per source: while the tuple's probes use them up, its trace packets get none
    and the trace would stop at the ToR, where the path held from before a reroute still fits (the lab: C-S2
    back up, A-S2 down, C's flows hashed back onto S2 and blackholed there, still traced over S3). The probe's
    unreachable names the router for the trace; a stale one, one from the destination, or one that the
    trace's own answers contradict, does not."""
    port = _free_udp_port()
    names = {"10.0.0.1": "C", "10.0.0.2": "S2", "10.0.0.3": "S3"}
    paths: list[dict] = []
    engine = UdpEngine("H6", "H6", [LocalRnic("C4", "127.0.0.1")], allowed_sources=["127.0.0.1"], dst_port=port,
                       responder=False, address_names=names, on_path=paths.append)
    try:
        ep = engine.endpoint("C4", _free_udp_port())
        dst = ("127.0.0.2", port)

        def trace_with(hops: dict[int, str], unreachable_from: str | None, age_s: float = 0.0) -> str:
            seq = engine._next_seq()
            engine.pending[seq] = PendingProbe({"dst_ip": dst[0]}, seq, 0, 2**62, False)
            engine._unreachable_by_tuple.clear()
            if unreachable_from:
                engine._sent_unreachable(ep, PROBE, seq, unreachable_from, dst)
                key = (ep.ip, ep.port, *dst)
                if key in engine._unreachable_by_tuple:
                    offender, at = engine._unreachable_by_tuple[key]
                    engine._unreachable_by_tuple[key] = (offender, at - int(age_s * 1e9))
            del engine.pending[seq]
            paths.clear()
            tid = engine.trace(ep, dst, "A2")
            engine._trace_state[tid].hops.update(hops)
            engine.expire(time.monotonic_ns() + 10**9)
            assert len(paths) == 1 and not paths[0]["complete"]
            return paths[0]["hops"]

        assert trace_with({1: "10.0.0.1"}, None) == "C4,C"
        assert trace_with({1: "10.0.0.1"}, "10.0.0.2") == "C4,C,S2"
        assert trace_with({1: "10.0.0.1"}, "10.0.0.2", age_s=6) == "C4,C"  # older than PROBE_UNREACH_S
        assert trace_with({1: "10.0.0.1"}, dst[0]) == "C4,C"  # the destination's port unreachable: no router
        assert trace_with({1: "10.0.0.1", 2: "10.0.0.2"}, "10.0.0.2") == "C4,C,S2"  # S2 routed the trace: not twice
        assert trace_with({1: "10.0.0.1", 2: "10.0.0.3"}, "10.0.0.2") == "C4,C,S3,S2"  # a three-tier's core, past S3
        assert trace_with({1: "10.0.0.1", 3: "10.0.0.3"}, "10.0.0.2") == "C4,C,*,S3"  # a gap: not in a row
        assert trace_with({1: "10.0.0.1"}, "10.9.9.9") == "C4,C"  # not an address of the fabric
    finally:
        engine.close()


def test_an_ack_path_trace_ends_at_the_router_that_turned_the_acks_away() -> None:
    """The responder's side: an ACK to a prober whose ACK paths this host traces, answered with unreachable by
    a router, ends the reverse trace of that flow there; an ACK flow the responder does not trace, no."""
    port = _free_udp_port()
    names = {"10.0.0.1": "C", "10.0.0.2": "S2"}
    paths: list[dict] = []
    engine = UdpEngine("H5", "H5", [LocalRnic("C3", "127.0.0.1")], allowed_sources=["127.0.0.1"], dst_port=port,
                       address_names=names, on_path=paths.append)
    try:
        ep = next(iter(engine.endpoints.values()))
        prober = ("127.0.0.2", 51112)
        flow = (ep.ip, ep.port, *prober)

        def reverse_trace() -> str:
            paths.clear()
            tid = engine.trace(ep, prober, "A2", direction="reverse")
            engine._trace_state[tid].hops[1] = "10.0.0.1"
            engine.expire(time.monotonic_ns() + 10**9)
            return paths[0]["hops"]

        engine._sent_unreachable(ep, ACK1, 7, "10.0.0.2", prober)
        assert reverse_trace() == "C3,C"  # a flow the responder does not trace
        engine.reverse_seen[flow] = time.monotonic_ns()
        engine._sent_unreachable(ep, ACK1, 7, "10.0.0.2", prober)
        assert reverse_trace() == "C3,C,S2"
        # and the flow, traced 30 s ago (its next trace due at 60 s), is traced again at the next look
        t0, s = time.monotonic_ns(), 10**9
        engine._acks_turned.clear()  # what the calls above asked
        engine.reverse_traced = {flow: t0 - 30 * s}
        engine.reverse_seen = {flow: t0}
        assert engine.trace_reverse_paths(0, interval_ns=60 * s, now_mono=t0) == 0
        engine.reverse_seen = {flow: t0}
        engine._sent_unreachable(ep, ACK2, 7, "10.0.0.2", prober)
        assert engine.trace_reverse_paths(0, interval_ns=60 * s, now_mono=t0) == 1
        engine.reverse_seen = {flow: t0}
        engine._sent_unreachable(ep, ACK2, 7, "10.0.0.2", prober)  # traced just now: not again within 5 s
        assert engine.trace_reverse_paths(0, interval_ns=60 * s, now_mono=t0 + s) == 0
    finally:
        engine.close()
