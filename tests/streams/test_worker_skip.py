"""The worker's skip of raw input a step already carried to the reducer (hand-made offsets), and the
tail of ``window.partials`` that tells a restarted worker where that input ends (real broker)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from schemas.arrow_pa import table_from_columns
from schemas.codec import encode
from streams.pingmesh.partial import from_bytes, merge
from streams.pingmesh.step_message import Step, UploadMark, encode_step
from streams.runtime.emitted_input import EmittedOffsets, read_emitted
from streams.runtime.probe_step import RawMessage, fresh_ranges, process_step, reducer_step

from probe_rows import BASE_NS, columns, known_rows


def _msg(partition: int, offset: int, payload: bytes = b"") -> RawMessage:
    return RawMessage(payload, "probe.v1", "probes.raw", partition, offset)


def test_fresh_ranges_leave_out_what_was_emitted_and_what_the_step_repeats():
    msgs = [_msg(0, o) for o in (5, 6, 7)] + [_msg(1, 10), _msg(1, 11)] + [_msg(0, o) for o in (6, 7, 8)]
    flags, ranges = fresh_ranges(msgs, {0: 6})
    # p0: 5 and 6 were emitted, 7 is new, then a re-delivery of 6 and 7 (seen in this step), 8 new
    assert flags == [False, False, True, True, True, False, False, True]
    assert ranges == {0: (7, 8), 1: (10, 11)}
    assert fresh_ranges(msgs[:2], {0: 9}) == ([False, False], {})


def test_emitted_offsets_ask_the_topic_only_where_a_partition_resumes():
    e = EmittedOffsets()
    assert e.resumed([_msg(0, 5), _msg(0, 6), _msg(1, 0)]) == {0: 5, 1: 0}  # a start: every partition
    e.learn({0: 7})
    e.processed([_msg(0, 5), _msg(0, 6), _msg(1, 0)], {1: (0, 0)})  # 5 and 6 were skipped: only p1 in the step
    assert e.emitted == {0: 7, 1: 0} and e.next == {0: 7, 1: 1}
    assert e.resumed([_msg(0, 7), _msg(1, 1), _msg(1, 2)]) == {}  # follows on: no lookup
    assert e.resumed([_msg(0, 7), _msg(0, 3)]) == {0: 3}  # re-read from 3 inside a step
    e.learn({0: 4})
    assert e.emitted[0] == 7  # never lowered: this worker's own sends count
    e.forget([1])  # revoked: another worker may advance it
    assert e.resumed([_msg(1, 1)]) == {1: 1}


def _payload(agent: str, upload_ns: int, seqs: list[int]) -> bytes:
    rows, _ = known_rows()
    picked = [dict(r, agent_id=agent, prober_host=agent, upload_ns=upload_ns) for r in rows if r["seq"] in seqs]
    return encode(table_from_columns("probe.v1", columns(picked)))


def test_a_step_decomposes_skipped_messages_but_leaves_them_out_of_its_partials():
    up = BASE_NS + 5_000_000_000
    msgs = [_msg(0, 10, _payload("H1", up, [0, 1, 2])), _msg(0, 11, _payload("H1", up + 1, [0, 1])),
            _msg(0, 12, _payload("H3", up + 2, [0, 2])), _msg(1, 4, _payload("H4", up + 3, [1]))]
    out = process_step(msgs, None, 20 * 10**9, emitted={0: 11})
    assert [m.enriched.num_rows for m in out.messages] == [3, 2, 2, 1]  # dead letters would go again: one token
    assert out.ranges == {0: (12, 12), 1: (4, 4)}
    # every message's mark goes (a repeat moves no watermark; it shows the partition is alive)
    assert sorted((p, m.agent_id, m.upload_ns) for p, m in out.marks) == [(0, "H1", up + 1), (0, "H3", up + 2),
                                                                           (1, "H4", up + 3)]
    merged = merge([from_bytes(b) for b in out.partials.values()])
    assert sum(merged.pairs["n"].to_pylist()) == 3 and sum(merged.pairs["n_timeout"].to_pylist()) == 1
    assert reducer_step(process_step(msgs[:2], None, 20 * 10**9, emitted={0: 11})) is None  # nothing new


@pytest.mark.kafka
def test_the_tail_of_window_partials_tells_the_highest_offset_a_whole_step_carried(kafka_bootstrap):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"w{uuid.uuid4().hex[:8]}.window.partials"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    try:
        mark = [(0, UploadMark("H1", BASE_NS, "H1"))]
        sends = []
        for r in ({0: (0, 4)}, {1: (0, 3)}, {0: (5, 9), 2: (0, 0)}, {1: (4, 6)}, {0: (3, 7)}):  # last: a zombie
            sends += encode_step(Step(r, {}, mark))
        sends += [m for m in encode_step(Step({0: (10, 14)}, {20: b"x" * 300}, mark), max_bytes=100)[:2]]  # died
        sends += [m for r in ({1: (7, 7)},) * 40 for m in encode_step(Step(r, {}, mark))]  # p1 goes on alone
        p = Producer({"bootstrap.servers": kafka_bootstrap})
        for headers, value in sends:
            p.produce(topic, value=value, headers=headers)
        assert p.flush(30) == 0
        # p0 resumes at 8 (committed), p2 at 1; p3 never had a step; chunks of 1, 2, 4 ... messages
        found = read_emitted(kafka_bootstrap, topic, {}, {0: 8, 2: 1, 3: 0}, first_chunk=1)
        assert found == {0: 9, 2: 0}  # not 14: that step's last part never came
        assert read_emitted(kafka_bootstrap, topic, {}, {1: 7}) == {1: 7}
    finally:
        admin.delete_topics([topic])
