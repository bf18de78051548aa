"""A udp agent follows the controller's pinglists topic on the real broker: the loop service publishes every
agent's list at start and the agent probes it; lists past the agent's bounds, messages that are not
``pinglist.v1`` and bounced entries (the udp backend sends no IP-in-IP) are refused and counted, and the list
in force stays. The loop service bounces nothing unless told to."""

from __future__ import annotations

import zlib

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from fabricscope.loop_service import LoopService
from producers import controller as ctl
from producers.controller_publish import PINGLIST, pinglist_columns
from producers.pinglist_feed import check_list, decode_list
from producers.sim.fabrics import panel1
from producers.udp_agent import Agent
from schemas.arrow_nano import encode_columns
from schemas.arrow_pa import arrow_schema
from schemas.headers import headers_for

from conftest import read_topic, wait_for

T = 1_800_000_000 * 10**9


def _entries(host: str = "H1") -> list[dict]:
    inv = panel1()
    return ctl.pinglist_for_host(ctl.build_pinglists(inv, ctl.Registry.from_inventory(inv, seed=1), seed=1,
                                                     now_ns=0), host)


def _rows(entries: list[dict], host: str = "H1") -> list[dict]:
    return decode_list(encode_columns(PINGLIST, pinglist_columns(host, entries, 5)))


def test_a_list_is_refused_past_its_bounds_with_the_reason():
    rows = _rows(_entries())
    assert len(rows) == 17 and {r["prober_host"] for r in rows} == {"H1"} and rows[0]["bounce_path"] is None
    known = frozenset(r.ip for r in panel1().rnics.values())
    assert check_list(rows, "H1", known_ips=known) is None
    assert check_list(rows, "H2") == "an entry of agent 'H1' (prober 'H1'), not 'H2'"
    assert check_list(rows, "H1", max_entries=16) == "17 entries, more than 16"
    total = sum(r["rate_pps"] for r in rows)
    assert check_list(rows, "H1", max_pps=total - 1) == f"{total:,.0f} probes/s in all, more than {total - 1:,.0f}"
    far = [*rows[:-1], {**rows[-1], "dst_ip": "192.0.2.7"}]
    assert check_list(far, "H1", known_ips=known) == \
        "destination '192.0.2.7' is not an RNIC address of this agent's fabric"
    assert check_list(far, "H1") is None  # no fabric addresses given: destinations not checked
    for bad in (0.0, -1.0, float("nan"), float("inf"), None):
        assert "is not a positive number" in check_list([{**rows[0], "rate_pps": bad}], "H1")


def test_a_message_that_is_not_a_pinglist_batch_is_said_to_be_unread():
    with pytest.raises(ValueError, match="not an Arrow IPC batch"):
        decode_list(b"not arrow")
    good = encode_columns(PINGLIST, pinglist_columns("H1", _entries(), 5))
    with pytest.raises(ValueError, match="not an Arrow IPC batch"):
        decode_list(good[: len(good) // 2])
    t = pa.Table.from_pylist([{"agent_id": "H1"}])
    with pytest.raises(ValueError, match="columns missing: dst_ip, dst_port"):
        decode_list(_ipc(t))
    rows = _rows(_entries())
    wrong = pa.Table.from_pylist([{**rows[0], "src_port": "49153"}])  # a port as text
    with pytest.raises(ValueError, match=r"columns of another type: .*src_port \(STRING, not UINT16\)"):
        decode_list(_ipc(wrong))


def _ipc(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def _send(bootstrap: str, topic: str, payload: bytes, key: str = "H1") -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, payload, key=key.encode(), headers=headers_for(PINGLIST))
    assert p.flush(10) == 0


def _probed(agent: Agent) -> set[tuple]:
    return {(e["prober_rnic"], e["dst_ip"], e["src_port"]) for e in agent.entries}


@pytest.mark.kafka
def test_the_agent_probes_the_list_the_loop_service_publishes_and_refuses_what_is_past_its_bounds(
        kafka_bootstrap, topic_prefix):
    inv = panel1()
    svc = LoopService(inv, kafka_bootstrap, topic_prefix, seed=1, clock=lambda: T)
    try:
        assert svc.publish_all(T) and svc.published == len(inv.hosts)
        base = ctl.pinglist_for_host(svc.base, "H1")
    finally:
        svc.close()
    cfg = {"host": "H1", "role": "prober", "pinglist_topic": True, "trace_interval_s": 3600,
           "rnics": [{"name": r.id, "ip": r.ip} for r in inv.rnics.values() if r.host == "H1"],
           "allowed_sources": [r.ip for r in inv.rnics.values()],
           "output": {"kind": "kafka", "bootstrap": kafka_bootstrap, "topic_prefix": topic_prefix}}
    agent = Agent(cfg)
    try:
        feed = agent.feed
        assert feed is not None
        wait_for(lambda: agent._follow_topic() or agent.entries, what="H1's list from the topic")
        assert _probed(agent) == {(e["prober_rnic"], e["dst_ip"], e["src_port"]) for e in base} and len(base) == 17
        # only H1's partition is read: CRC-32 of the key, as librdkafka's default partitioner put it there
        mates = [h for h in inv.hosts if h != "H1" and zlib.crc32(h.encode()) % 16 == zlib.crc32(b"H1") % 16]
        assert feed.partition == zlib.crc32(b"H1") % 16
        assert feed.stats.lists == 1 and feed.stats.others == len(mates)
        assert {m.partition() for m in read_topic(kafka_bootstrap, f"{topic_prefix}pinglists")
                if m.key() == b"H1"} == {feed.partition}
        topic = f"{topic_prefix}pinglists"
        rows = _rows(base)
        _send(kafka_bootstrap, topic, b"not arrow")  # unread
        fast = [{**r, "rate_pps": 2_000.0} for r in rows]  # 34,000 probes/s in all
        _send(kafka_bootstrap, topic, encode_columns(PINGLIST, pinglist_columns("H1", fast, 6)))
        far = [*base[:-1], {**base[-1], "dst_ip": "192.0.2.7"}]  # not an RNIC of the fabric
        _send(kafka_bootstrap, topic, encode_columns(PINGLIST, pinglist_columns("H1", far, 7)))
        wait_for(lambda: agent._follow_topic() or (feed.stats.unread, feed.stats.refused) == (1, 2),
                 what="the refusals")
        assert _probed(agent) == {(e["prober_rnic"], e["dst_ip"], e["src_port"]) for e in base}  # still in force
        # the loop's list: a splitting tuple and a bounced one (the udp backend cannot bounce: refused alone)
        split = {**base[0], "src_port": 50001, "pinglist": "inter_tor"}
        bounced = {**base[0], "src_port": 50002, "pinglist": "inter_tor", "responder_rnic": base[0]["prober_rnic"],
                   "dst_ip": base[0]["src_ip"], "bounce_path": "A,S1"}
        _send(kafka_bootstrap, topic, encode_columns(PINGLIST, pinglist_columns("H1", [*base, split, bounced], 8)))
        wait_for(lambda: agent._follow_topic() or feed.stats.lists == 2, what="the loop's list")
        assert _probed(agent) == {(e["prober_rnic"], e["dst_ip"], e["src_port"]) for e in [*base, split]}
        assert agent.refused_bounces == 1
    finally:
        agent.engine.close()
        agent.feed.close()


@pytest.mark.kafka
def test_the_loop_service_bounces_only_when_told(kafka_bootstrap, topic_prefix):
    from bench.accuracy import SIZES

    inv = SIZES[3][1](1)  # the benchmark's 3-tier fabric: its core pairs no 5-tuple splits
    group = "P0S1->X2|P1S1->X2"
    verdict = {"verdict_id": "v1", "window_start_ns": T, "window_end_ns": T + 20 * 10**9, "kind": "undetermined",
               "location": group, "votes": 3.0, "confidence": 0.5, "failed_probes": 17, "total_probes": 200,
               "impact": "P2", "job_id": None, "revision_of": None, "evidence": "{}", "emitted_ns": T}
    table = pa.Table.from_pylist([verdict], schema=arrow_schema("verdict.v1"))
    for bounce, how, bounced, identifiable in ((False, "none", 0, 16), (True, "bounce", 16, 24)):
        svc = LoopService(inv, kafka_bootstrap, topic_prefix, seed=1, clock=lambda: T, bounce=bounce)
        try:
            # the plan in force: with --bounce, standing bounced probes split every core pair (8 per core link)
            standing = [e for e in svc.base["inter_tor"] if e.get("bounce_path")]
            assert len(standing) == (64 if bounce else 0)
            row = svc.identifiability_row(T, T)
            assert (row["identifiable"], row["links"]) == (identifiable, 24)
            svc.on_verdicts(table, T)
            assert [a.how for a in svc.loop.active.values()] == [how]  # no 5-tuple splits the pair
            entries = svc.loop.entries(T)
            assert len(entries) == bounced and all(e["bounce_path"] for e in entries)
        finally:
            svc.close()
