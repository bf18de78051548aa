"""The store writer's blocks over several partitions, on the real broker and chdb.

A writer block holds the messages of every partition the writer reads (one insert per table). A writer
that dies after the block's state rows and its first insert leaves a block that a restarted writer must
re-form exactly (the same ranges of both partitions, the same token), even though messages arrived
after it: each probe is then counted once in ``probes`` and in every tier.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from producers.sim.fabrics import panel1
from schemas.arrow_pa import table_from_columns
from schemas.codec import encode
from schemas.headers import headers_for
from sinks.blocks import BlockBudget
from sinks.clickhouse import ChdbStore, migrate
from sinks.kafka_sink import StoreWriter

sim = pytest.importorskip("producers.sim")
pytestmark = pytest.mark.kafka

S = 1_000_000_000
T0 = (time.time_ns() // (3600 * S) - 1) * 3600 * S  # recent: the tables' TTLs drop old rows at insert
TIERS = ("probes_1m", "probes_1h_rnic", "probes_1h_tor")


class Killed(Exception):
    """Stands for ``kill -9`` in the middle of a block."""


def _raw_messages(rounds: int) -> tuple[list[tuple[int, str, bytes]], list[int]]:
    """``(raw partition, schema, payload)`` of ``rounds`` uploads of Panel 1's agents over two raw partitions,
    in send order, and the probes each carries."""
    s = sim.Simulator(panel1(), seed=5)
    out, probes, part_of = [], [], {}
    for k in range(rounds):
        for agent, probe_cols, _paths in s.upload_batches(T0 + k * 5 * S):
            part = part_of.setdefault(agent, len(part_of) % 2)
            out.append((part, "probe.v1", encode(table_from_columns("probe.v1", probe_cols))))
            probes.append(len(probe_cols["seq"]))
    return out, probes


def _send(bootstrap: str, topic: str, msgs: list[tuple[int, str, bytes]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for part, schema, payload in msgs:
        p.produce(topic, payload, partition=part, headers=headers_for(schema))
    assert p.flush(30) == 0


def _close_quietly(w: StoreWriter | None) -> None:
    """Close ``w`` if a test left it open (a failed assertion, whose error is the one to see): closed
    twice, its consumer raises; a gated insert that timed out raises again here."""
    if w is not None:
        with contextlib.suppress(Exception):
            w.close()


def _rows_only_writer(store: ChdbStore, bootstrap: str, prefix: str, block_rows: int) -> StoreWriter:
    """A writer whose blocks are due on their rows alone: the default budget also cuts one after a 1 s pause
    in the input, and on a loaded machine such a pause would make a block wait for one a test holds."""
    w = StoreWriter(store, bootstrap, prefix, block_rows=block_rows, block_s=3600.0)
    w.budget = BlockBudget(block_rows, 3600.0)
    return w


def _store_all(store: ChdbStore, w: StoreWriter, probes: int, timeout_s: float = 60.0) -> None:
    """Forced polls of ``w`` until ``probes`` probe rows are stored, then close it: each row is in ``probes``
    once and counted once in every tier."""
    deadline = time.time() + timeout_s
    while _counts(store)["n"] < probes and time.time() < deadline:
        w.poll_once(timeout=1.0, force=True)
    w.close()
    assert _counts(store) == {**dict.fromkeys(TIERS, probes), "n": probes, "u": probes}


def _counts(store: ChdbStore) -> dict[str, int]:
    sql = ", ".join([f"(SELECT sum(probes) FROM {t}) AS {t}" for t in TIERS]
                    + ["(SELECT count() FROM probes) AS n", "(SELECT uniqExact(agent_id, seq) FROM probes) AS u"])
    return {k: int(v or 0) for k, v in store.query_arrow(f"SELECT {sql}").to_pylist()[0].items()}


def test_a_block_over_two_partitions_killed_mid_insert_is_re_formed_whole(kafka_bootstrap, topic_prefix, tmp_path):
    msgs, rows = _raw_messages(4)
    cut = len(msgs) * 2 // 3
    first, later, probes = msgs[:cut], msgs[cut:], sum(rows)
    assert {p for p, _, _ in first} == {0, 1} and {p for p, _, _ in later} == {0, 1}
    topic = f"{topic_prefix}probes.raw"
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    try:
        _send(kafka_bootstrap, topic, first)
        w = StoreWriter(store, kafka_bootstrap, topic_prefix, block_rows=10**9, block_s=3600.0)
        inserts: list[str] = []
        real_insert = w.block_store.insert_arrow

        def dies_after_the_first_table(table, data, dedup_token=None, settings=None):  # noqa: ANN001, ANN202
            if len(inserts) == 2:  # the state rows and the first tier went in
                raise Killed
            inserts.append(table)
            return real_insert(table, data, dedup_token=dedup_token, settings=settings)

        w.block_store.insert_arrow = dies_after_the_first_table  # type: ignore[method-assign]
        deadline = time.time() + 60
        while w.held_rows() < sum(rows[:cut]) and time.time() < deadline:
            w.poll_once(timeout=1.0)  # reads everything; the block waits for its (hour-long) budget
        assert w.held_rows() == sum(rows[:cut])
        with pytest.raises(Killed):
            w.poll_once(timeout=0, force=True)
        w.close()  # no offsets were committed
        assert inserts[0] == "sink_blocks"
        state = store.query_arrow("SELECT partition, first_offset, last_offset FROM sink_blocks ORDER BY partition")
        assert state["partition"].to_pylist() == [0, 1], "one block over both partitions, a state row for each"
        assert _counts(store)["probes_1m"] > 0 and _counts(store)["n"] == 0

        _send(kafka_bootstrap, topic, later)  # the restarted writer's own cut would span these too
        w2 = StoreWriter(store, kafka_bootstrap, topic_prefix, block_rows=10**9, block_s=3600.0)
        _store_all(store, w2, probes)
        assert w2.stats.replayed_rows_dropped == 0
    finally:
        store.close()


def test_a_writer_stopped_midway_writes_nothing_more(kafka_bootstrap, topic_prefix, tmp_path):
    """Stopped while a block waits for the store, the writer has read past what it holds: a later block would
    skip those messages, so it writes nothing more; a new writer stores every probe once."""
    msgs, rows = _raw_messages(2)
    topic = f"{topic_prefix}probes.raw"
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    try:
        _send(kafka_bootstrap, topic, msgs[:4])
        w = StoreWriter(store, kafka_bootstrap, topic_prefix, block_rows=10**9, block_s=3600.0)
        deadline = time.time() + 60
        while w.held_rows() < sum(rows[:4]) and time.time() < deadline:
            w.poll_once(timeout=1.0)
        assert w.poll_once(timeout=0, force=True, stop=lambda: True) == 0  # stopping: the block never went in
        _send(kafka_bootstrap, topic, msgs[4:])
        for _ in range(3):
            assert w.poll_once(timeout=1.0, force=True) == 0
        w.close()
        assert _counts(store)["n"] == 0
        w2 = StoreWriter(store, kafka_bootstrap, topic_prefix, block_rows=10**9, block_s=3600.0)
        _store_all(store, w2, sum(rows))
    finally:
        store.close()


def test_the_next_blocks_messages_are_read_while_a_block_is_inserted(kafka_bootstrap, topic_prefix, tmp_path):
    """A block's inserts run in a thread of their own, on a connection of their own: while the engine holds
    them up, the writer goes on reading (the next block's rows are held), another topic's message goes in,
    nothing of the block is recorded, and the block is recorded and committed only once its inserts are
    done; every probe is stored once."""
    msgs, rows = _raw_messages(4)
    # The first messages that hold more rows than the rest: the first block is due on its rows, the next
    # never is (the probes per upload vary from run to run).
    cut = next(k for k in range(1, len(msgs)) if sum(rows[:k]) > sum(rows[k:]))
    topic = f"{topic_prefix}probes.raw"
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    gate, held_up = threading.Event(), threading.Event()
    w: StoreWriter | None = None
    try:
        _send(kafka_bootstrap, topic, msgs[:cut])
        w = _rows_only_writer(store, kafka_bootstrap, topic_prefix, sum(rows[:cut]))
        lane = w.block_store
        real_insert = lane.insert_arrow

        def held_in_the_engine(table, data, dedup_token=None, settings=None):  # noqa: ANN001, ANN202
            if table == "probes":
                with lane.lock:  # the lane's connection is busy, as in a long insert
                    held_up.set()
                    assert gate.wait(60)
            return real_insert(table, data, dedup_token=dedup_token, settings=settings)

        lane.insert_arrow = held_in_the_engine  # type: ignore[method-assign]
        deadline = time.time() + 60
        while not held_up.is_set() and time.time() < deadline:
            w.poll_once(timeout=1.0)  # the first half fills the block's rows: it is due, its inserts start
        assert held_up.is_set() and w.held_rows() == 0 and w.stats.blocks == 0
        _send(kafka_bootstrap, topic, msgs[cut:])
        p = Producer({"bootstrap.servers": kafka_bootstrap})
        p.produce(f"{topic_prefix}verdicts", b"not arrow", headers=headers_for("verdict.v1"))
        assert p.flush(30) == 0
        deadline = time.time() + 60
        while (w.held_rows() < sum(rows[cut:]) or w.stats.undecodable == 0) and time.time() < deadline:
            assert w.poll_once(timeout=1.0) == 1  # the dead letter's row, or nothing
        assert w.held_rows() == sum(rows[cut:]), "the next block's messages were read during the insert"
        dead = store.query_arrow("SELECT source_topic FROM deadletters")["source_topic"].to_pylist()
        assert dead == [f"{topic_prefix}verdicts"], "another topic's message went in during the block's insert"
        assert w.stats.blocks == 0 and _counts(store)["n"] == 0
        gate.set()
        deadline = time.time() + 60
        while w.stats.blocks == 0 and time.time() < deadline:
            w.poll_once(timeout=0.2)
        assert w.stats.blocks == 1 and _counts(store)["n"] == sum(rows[:cut])
        w.poll_once(timeout=0, force=True)  # a forced poll returns once its block is in
        assert w.stats.blocks == 2
        w.close()
        assert _counts(store) == {**dict.fromkeys(TIERS, sum(rows)), "n": sum(rows), "u": sum(rows)}
    finally:
        gate.set()
        _close_quietly(w)  # its insert thread ends before the store closes
        store.close()


def test_a_writer_holding_a_block_while_one_goes_in_pauses_the_raw_partitions(kafka_bootstrap, topic_prefix,
                                                                              tmp_path):
    """While a block's inserts run and the next block's rows are all held, the writer pauses the raw
    partitions: uploads sent then are not read (memory stays at two blocks) while a verdict still goes in;
    once the inserts are done it reads on from where it paused, and every probe is stored once."""
    msgs, rows = _raw_messages(8)
    early, late = msgs[:36], msgs[36:]
    per_block = sum(rows[:12])
    topic = f"{topic_prefix}probes.raw"
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    gate, held_up = threading.Event(), threading.Event()
    w: StoreWriter | None = None
    try:
        _send(kafka_bootstrap, topic, early)
        w = _rows_only_writer(store, kafka_bootstrap, topic_prefix, per_block)
        real_insert = w.block_store.insert_arrow

        def waits_for_the_gate(table, data, dedup_token=None, settings=None):  # noqa: ANN001, ANN202
            if table == "probes":
                held_up.set()
                assert gate.wait(60)
            return real_insert(table, data, dedup_token=dedup_token, settings=settings)

        w.block_store.insert_arrow = waits_for_the_gate  # type: ignore[method-assign]
        deadline = time.time() + 60
        while not (held_up.is_set() and w.stats.pauses) and time.time() < deadline:
            w.poll_once(timeout=1.0)
        assert held_up.is_set() and w.stats.pauses == 1 and w.stats.blocks == 0
        held = w.held_rows()
        assert held >= per_block
        _send(kafka_bootstrap, topic, late)
        p = Producer({"bootstrap.servers": kafka_bootstrap})
        p.produce(f"{topic_prefix}verdicts", b"not arrow", headers=headers_for("verdict.v1"))
        assert p.flush(30) == 0
        deadline = time.time() + 60
        while w.stats.undecodable == 0 and time.time() < deadline:
            w.poll_once(timeout=1.0)
        assert w.stats.undecodable == 1, "the verdict went in while the raw partitions were paused"
        assert w.held_rows() == held, "no upload was read while paused"
        gate.set()
        _store_all(store, w, sum(rows), 120.0)
    finally:
        gate.set()
        _close_quietly(w)  # its insert thread ends before the store closes
        store.close()


def _old_writer_state(store: ChdbStore, prefix: str, last: int, before: int, after: int) -> None:
    """The state row a writer of the two-crossing layout left: its last block over ``probes.enriched``
    offsets ``[0, last]``, with the raw marks of raw partition 0 before and after it."""
    raw = f"{prefix}probes.raw/0"
    marks = {"before": {f"probes|{raw}": before, f"probes_1m|{raw}": before},
             "after": {f"probes|{raw}": after, f"probes_1m|{raw}": after}, "ranges": {"0": [0, last]}}
    store.insert_arrow("sink_blocks", pa.table({
        "topic": [f"{prefix}probes.enriched"], "partition": pa.array([0], pa.uint32()), "first_offset": [0],
        "last_offset": [last], "source_hwm": [json.dumps(marks)], "written_ns": [time.time_ns()]}))


def _commit_old(bootstrap: str, prefix: str, offset: int) -> None:
    """The old writer's group committed ``offset`` on ``probes.enriched`` partition 0 (a topic of its own)."""
    topic = f"{prefix}probes.enriched"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap})
    for _ in range(offset):
        p.produce(topic, b"x", partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}fabricscope-store"})
    c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    c.close()


@pytest.mark.parametrize("finished", [True, False])
def test_the_writer_takes_over_after_what_a_writer_of_the_enriched_topic_stored(
        kafka_bootstrap, topic_prefix, tmp_path, finished):
    """An upgrade: the old writer stored raw offsets up to its mark (after its last block when its group
    committed past it, before it otherwise); the new writer reads probes.raw from the start and stores only
    what comes after, so no probe is stored twice or lost."""
    msgs, rows = _raw_messages(2)
    p0 = [(p, sch, pl) for p, sch, pl in msgs if p == 0]
    n = [r for (p, _, _), r in zip(msgs, rows, strict=True) if p == 0]
    assert len(p0) >= 4
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    try:
        _old_writer_state(store, topic_prefix, last=2, before=0, after=2)
        _commit_old(kafka_bootstrap, topic_prefix, 3 if finished else 1)
        _send(kafka_bootstrap, f"{topic_prefix}probes.raw", p0)
        w = StoreWriter(store, kafka_bootstrap, topic_prefix, block_rows=10**9, block_s=3600.0)
        expect = sum(n[3:]) if finished else sum(n[1:])
        _store_all(store, w, expect)
        assert w.stats.replayed_rows_dropped == (sum(n[:3]) if finished else sum(n[:1]))
    finally:
        store.close()


def test_the_writer_holds_probes_back_while_a_writer_of_the_enriched_topic_runs(kafka_bootstrap, topic_prefix,
                                                                                tmp_path):
    """Side by side in one consumer group, an old writer (reading probes.enriched) and a new one: the new one
    stores nothing while the old one holds its partitions, then every probe once after it stops."""
    msgs, rows = _raw_messages(1)
    _commit_old(kafka_bootstrap, topic_prefix, 0)  # the old topic exists, nothing stored from it
    old = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{topic_prefix}fabricscope-store",
                    "client.id": "old-writer", "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    old.subscribe([f"{topic_prefix}probes.enriched"])
    polling, stop = threading.Event(), threading.Event()

    def keep_polling() -> None:
        while not stop.is_set():
            old.poll(0.2)
            if old.assignment():
                polling.set()
        old.close()

    th = threading.Thread(target=keep_polling, daemon=True)
    th.start()
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    try:
        assert polling.wait(60), "the old writer never got its partition"
        _send(kafka_bootstrap, f"{topic_prefix}probes.raw", msgs)
        w = StoreWriter(store, kafka_bootstrap, topic_prefix, block_rows=10**9, block_s=0.5)
        for _ in range(12):  # 6 s of polls and coordinator checks: nothing stored
            w.poll_once(timeout=0.5, force=True)
        assert _counts(store)["n"] == 0, "stored beside the old writer"
        stop.set()
        th.join(30)
        deadline = time.time() + 90
        while _counts(store)["n"] < sum(rows) and time.time() < deadline:
            w.poll_once(timeout=0.5, force=True)
        w.close()
        assert _counts(store) == {**dict.fromkeys(TIERS, sum(rows)), "n": sum(rows), "u": sum(rows)}
    finally:
        stop.set()
        store.close()
