"""The store writer: consumes result topics and inserts them into ClickHouse.

Runs in its own process so an insert never blocks the Faust event loop
(a blocked loop misses consumer-group heartbeats). Offsets are committed only
after the insert returned (at-least-once delivery, exactly-once rows).

Probe rows (the agents' uploads on ``probes.raw``, the bulk of the data, read in this writer's own
consumer group: each probe crosses Kafka once) go in blocks of many messages: up to ``block_rows`` rows
or ``block_s`` seconds over all the partitions the writer holds (one insert per table for all of them),
aligned to offsets, with their state in the store (:mod:`sinks.blocks`), one block's inserts in a thread of
their own while the next block's messages are read and decoded, on a connection of their own
(:meth:`sinks.clickhouse.Store.insert_lane`) so that no other message's insert waits for them. A block's
uploads are judged
and decomposed with the stream worker's rules, the raw retention policy picks the rows ``probes`` keeps,
and every good row is counted in the minute tier (:mod:`sinks.raw_rows`); the writer rolls the minute
rows up into the hourly tiers (:mod:`sinks.probe_tiers`) under the ToRs of ``rnic_inventory``. The other topics
(verdicts, dead letters, host links, coverage: a few messages per window; the registry, whose entries name
each RNIC's ToR and fill ``rnic_inventory``) keep one insert per message, with the
message's source identity as its deduplication token.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from schemas import topics as T
from schemas.codec import CodecError, decode, schema_key_from_headers
from schemas.probe_rows.retention import RetentionPolicy
from schemas.topic_mirror import TopicMirror, registry_rnics_mirror
from sinks import metrics as M
from sinks.baseline_reader import BaselineReader
from sinks.blocks import (
    BLOCK_ROWS,
    STATE_TABLE,
    BlockBudget,
    Entry,
    PartitionState,
    WriterBlock,
    load_states,
    take_writer_block,
    writer_block_inserts,
)
from sinks.clickhouse import Store, StoreError, StoreLane
from sinks.history import registry_inventory
from sinks.origin import check as origin_check
from sinks.origin import from_headers as origin_from_headers
from sinks.origin import stamp as stamp_origin
from sinks.probe_tiers import TIER_INSERT_SETTINGS, TIER_TABLES, tor_of_rnic
from sinks.raw_rows import RawJudge, form_raw_block, mark_key, raw_entry

log = logging.getLogger("fabricscope.sink")

# topic -> ClickHouse table
TABLE_OF: dict[str, str] = {
    T.PROBES_RAW.name: "probes",
    T.VERDICTS.name: "verdicts",
    T.DEADLETTER.name: "deadletters",
    T.HOST_LINKS.name: "host_links",
    T.COVERAGE.name: "coverage",
    T.IDENTIFIABILITY.name: "identifiability",
    T.HOSTS_INVENTORY.name: "pci_functions",
    T.HOSTMETRICS_RAW.name: "host_metrics",
    T.LOOPBACK_RAW.name: "loopback",
    T.REGISTRY.name: "rnic_inventory",  # RNIC -> host, ToR as the agents register them (the tiers' ToR names)
}
# Topics written in offset-aligned blocks (sinks.raw_rows).
BLOCK_TOPICS = {T.PROBES_RAW.name}
ENRICHED_BEFORE = "probes.enriched"
"""The topic an earlier store writer read the worker's decomposed rows from: where its marks are kept
(:meth:`StoreWriter._marks_before`)."""


@dataclass
class SinkStats:
    """Counters of one sink process."""

    batches: int = 0
    rows: int = 0
    undecodable: int = 0
    store_retries: int = 0
    commit_failures: int = 0
    rows_by_table: dict[str, int] = field(default_factory=dict)
    blocks: int = 0
    replayed_rows_dropped: int = 0
    pauses: int = 0  # times the block topics were paused while a block went in (a full one held)


def dedup_token(msg: Message, table: pa.Table) -> str:
    """The batch identity, stable across a worker's replay.

    Dead letters carry the source message's coordinates, so a dead-letter record the worker
    emits again after a crash (at a new dead-letter offset) is still one insert. So a
    worker sends at most one dead-letter message per source message (all its bad rows
    in it): a second one for the same source would be taken for a replay.
    Anything else: this message's topic/partition/offset.
    """
    if {"source_topic", "source_partition", "source_offset"} <= set(table.column_names) and table.num_rows:
        r = table.slice(0, 1).select(["source_topic", "source_partition", "source_offset"]).to_pylist()[0]
        return f"{msg.topic()}:{r['source_topic']}/{r['source_partition']}/{r['source_offset']}"
    return f"{msg.topic()}/{msg.partition()}/{msg.offset()}"


def _undecodable_row(msg: Message, reason: str) -> pa.Table:
    return pa.table(
        {
            "source_topic": [msg.topic()],
            "source_partition": pa.array([msg.partition()], pa.int32()),
            "source_offset": [msg.offset()],
            "schema": [schema_key_from_headers(msg.headers()) or ""],
            "reason": [f"sink could not decode: {reason}"],
            "row": pa.array([None], pa.int64()),
            "payload": pa.array([msg.value()], pa.binary()),
            "received_ns": [time.time_ns()],
        }
    )


class StoreWriter:
    """Consumes ``prefix``+result topics with confluent-kafka and writes them to ``store``.

    Args:
        store: an open :class:`sinks.clickhouse.Store` (migrated).
        bootstrap: Kafka bootstrap servers.
        prefix: topic name prefix (tests and demos share one broker).
        group: consumer group id.
        kafka_config: extra client settings (SASL/TLS), never logged.
        block_rows: a block of ``probes.raw`` is inserted at this many rows (over all partitions held) ...
        block_s: ... or this many seconds after its first message was read, whichever comes first.
            Only raw history and the tiers wait for a block (verdicts are inserted per message), so the
            default is long: a block spans several uploads of every agent (one every 5 s), its minute
            rows merge per pair, and fewer, larger parts cost the engine fewer merges (BENCHMARKS.md 4).
        block_min_rows: ... but a block under this many rows at ``block_s`` waits on while the input is still
            arriving (a slow input), ...
        block_slow_max_s: ... up to this many seconds (:class:`sinks.blocks.BlockBudget`; None: the defaults
            there, a fifth of ``block_rows`` and 3 x ``block_s``). A block whose input went quiet for 6 s (or
            ``block_s`` if shorter), or for 1 s once it holds ``block_min_rows``, is due at once.
        origin: stamped on every ``verdicts``/``coverage`` row whose message has no ``origin`` header
            (:mod:`sinks.origin`): ``production``, ``lab``, ``sim`` or ``demo``.
        retention: the raw retention policy (which probe rows ``probes`` keeps; the tiers count every row).
            ``anomalies`` reads the reducer's flow baselines from ``latency.baselines``.
    """

    def __init__(
        self,
        store: Store,
        bootstrap: str,
        prefix: str = "",
        group: str = "fabricscope-store",
        kafka_config: dict[str, str] | None = None,
        block_rows: int = BLOCK_ROWS,
        block_s: float = 10.0,
        block_min_rows: int | None = None,
        block_slow_max_s: float | None = None,
        origin: str = "production",
        retention: RetentionPolicy = RetentionPolicy(),
    ) -> None:
        self.store = store
        self.retention = retention
        self.origin = origin_check(origin)  # stamped on verdicts and coverage without an origin header
        self.prefix = prefix
        self.stats = SinkStats()
        self.block_rows, self.block_s = block_rows, block_s
        self.budget = BlockBudget.for_input(block_rows, block_s, block_min_rows, block_slow_max_s)
        self._lag: dict[tuple[str, int], int] = {}
        # per (topic, partition) of the block topics; reloaded from the store after every (re)assignment
        self._parts: dict[tuple[str, int], PartitionState] = {}
        self._assigned: set[tuple[str, int]] = set()
        self._conf = {"bootstrap.servers": bootstrap, **(kafka_config or {})}  # for the re-forming reader
        self._wrote_block = False  # the last poll wrote a block: more may be due, so the next one does not wait
        # One block's inserts run in a thread while this one reads and decodes the next block's messages (chdb
        # releases the GIL while it inserts); the next block forms only once they are done and committed, so
        # blocks go in one at a time and in order, as if inserted here (_finish_insert).
        self._inserts = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="block-insert")
        # ... on a connection of their own: a verdict inserted meanwhile waits for no block's inserts
        self.block_store = store.insert_lane()
        self._in_flight: tuple[concurrent.futures.Future[int | None], Callable[[int], None]] | None = None
        self._paused: list[TopicPartition] = []  # block partitions paused while a block's inserts run
        self._abandoned = False  # a poll stopped midway: see poll_once
        self._baselines = BaselineReader(bootstrap, f"{prefix}{T.LATENCY_BASELINES.name}", kafka_config) \
            if retention.mode == "anomalies" else None
        self._before: dict[str, int] | None = None  # the marks of a writer of probes.enriched, read once
        self._registry: TopicMirror | None = None  # the registry's RNICs, as the workers read them
        self._old_gone, self._old_checked_s, self._old_logged_s = False, float("-inf"), float("-inf")
        self._admin: AdminClient | None = None
        self._rnics: set[str] = set()
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": f"{prefix}{group}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 600000,
        }
        conf.update(kafka_config or {})
        self._group = conf["group.id"]
        self._consumer = Consumer(conf)
        self._raw_subscribed = self._old_writers_gone()
        self._subscribe()

    def _subscribe(self) -> None:
        """Subscribe to every topic of :data:`TABLE_OF`; ``probes.raw`` only once no store writer of
        ``probes.enriched`` is left in the group (:meth:`_old_writers_gone`)."""
        raw = f"{self.prefix}{T.PROBES_RAW.name}"
        topics = [f"{self.prefix}{t}" for t in TABLE_OF]
        self._consumer.subscribe([t for t in topics if self._raw_subscribed or t != raw], on_assign=self._assign,
                                 on_revoke=self._revoke, on_lost=self._revoke)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        """Drop what is held for these partitions: the consumer restarts them at the committed offset, and
        their state is read back from the store (another writer may have stored blocks meanwhile)."""
        for tp in partitions:
            self._parts.pop((tp.topic, tp.partition), None)

    def _assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._finish_insert()
        self._forget(partitions)
        self._assigned |= {(tp.topic, tp.partition) for tp in partitions}

    def _revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._finish_insert()  # its offsets are committed while the partitions are still this writer's
        self._resume_blocks()  # none stays paused into a later assignment
        self._forget(partitions)
        self._assigned -= {(tp.topic, tp.partition) for tp in partitions}

    def _state(self, topic: str, partition: int) -> PartitionState:
        key = (topic, partition)
        if key not in self._parts:
            loaded = self._retry(lambda: load_states(self.store, topic), f"read {STATE_TABLE}", lambda: False)
            for p, st in (loaded or {}).items():
                self._parts.setdefault((topic, p), st)
            if key not in self._parts:  # no block of this partition yet: start after what the old layout stored
                mark = mark_key(topic, partition)
                before = self._marks_before()
                self._parts[key] = PartitionState(hwm={mark: before[mark]} if mark in before else {})
        return self._parts[key]

    def _old_writers_gone(self) -> bool:
        """Whether no member of this writer's consumer group reads ``probes.enriched`` (a store writer of the
        layout before this one, which stores the same probes from the workers' copy). Until then this writer
        does not subscribe to ``probes.raw``, so the two never store a probe twice; it then starts after the
        old writers' marks (:meth:`_marks_before`). Asked of the group coordinator at most every 2 s, answered
        only while the group is not rebalancing; once they are gone, never again."""
        if self._old_gone:
            return True
        now = time.monotonic()
        if now - self._old_checked_s < 2.0:
            return False
        self._old_checked_s = now
        old = f"{self.prefix}{ENRICHED_BEFORE}"
        if self._admin is None:
            self._admin = AdminClient(self._conf)  # kept: a dropped client ends its requests (_DESTROY)
        try:
            # short: the first check runs as the writer starts, maybe with the broker away (SIGTERM must stop it)
            desc = self._admin.describe_consumer_groups([self._group], request_timeout=2)[self._group].result(
                timeout=3)
        except (KafkaException, concurrent.futures.TimeoutError) as err:
            log.warning("describing consumer group %s failed (%s); asking again", self._group, err)
            return False
        if desc.state not in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
            return False  # a rebalance: assignments are in flux
        alive = sorted({m.client_id for m in desc.members
                        if any(tp.topic == old for tp in (m.assignment.topic_partitions or []))})
        if alive:
            if now - self._old_logged_s >= 60.0:
                self._old_logged_s = now
                log.warning("store writer(s) %s still read %s: this writer reads %s once they stop",
                            ", ".join(alive), old, f"{self.prefix}{T.PROBES_RAW.name}")
            return False
        self._old_gone = True
        return True

    def _marks_before(self) -> dict[str, int]:
        """``probes|<raw topic>/<partition>`` -> the highest raw offset a store writer of ``probes.enriched`` (the
        two-crossing layout) stored, from its blocks in ``sink_blocks``: the newest block's marks after it when
        the group committed past it (it finished), else before it; empty when there was no such writer.
        Read once: that writer has stopped (docs/storage.md "Upgrading the store writer")."""
        if self._before is not None:
            return self._before
        topic = f"{self.prefix}{ENRICHED_BEFORE}"
        states = self._retry(lambda: load_states(self.store, topic), f"read {STATE_TABLE}", lambda: False) or {}
        out: dict[str, int] = {}
        try:
            done = {tp.partition: tp.offset for tp in
                    self._consumer.committed([TopicPartition(topic, p) for p in states], timeout=10)}
        except KafkaException:
            done = {}
        for p, st in sorted(states.items()):
            last = max(r[1] for r in (st.multi_redo or {p: st.redo or (0, -1)}).values())
            committed = done.get(p, -1)
            marks = st.redo_hwm_after if committed > last else st.hwm
            if committed <= last:
                log.warning("the last block of %s partition %d (offsets up to %d) may be unfinished: its rows are "
                            "stored again from %s", topic, p, last, T.PROBES_RAW.name)
            for k, v in marks.items():
                if k.startswith(("probes|", "probes_1m|")):
                    raw = "probes|" + k.split("|", 1)[1]
                    out[raw] = max(out.get(raw, -1), v)
        if out:
            log.info("store writer of %s before this one stored raw offsets up to %s; those are skipped", topic,
                     ", ".join(f"{k.split('|', 1)[1]}: {v}" for k, v in sorted(out.items())))
        self._before = out
        return out

    def _finish_multi_redo(self, topic: str, st: PartitionState, stop: Callable[[], bool]) -> bool:
        """Re-form the writer block ``st`` records over several partitions, if it may be unfinished; True when
        done (then every partition of it held here goes on after it), False if stopped first.

        Unfinished unless the group committed past its range on every partition (offsets are committed
        after the inserts). The ranges are read with a consumer of their own (assigned, no group), as the
        partitions may have other owners now; the same entries and the recorded marks give the same rows
        and the same token, so a table the first attempt reached takes nothing.
        """
        ranges = st.multi_redo or {}
        tps = [TopicPartition(topic, p) for p in sorted(ranges)]
        committed = self._retry(lambda: self._consumer.committed(tps, timeout=10), "read committed offsets", stop,
                                errors=(KafkaException,))
        if committed is None:
            return False
        if any(tp.offset < 0 or tp.offset <= ranges[tp.partition][1] for tp in committed):
            entries = self._read_ranges(topic, ranges, stop)
            if entries is None:
                return False
            parts = {p: (es, dict(st.hwm)) for p, es in entries.items() if es}
            if parts:
                formed = self._form(topic, parts, st.judged, stop)
                if formed is None or self._insert_block(topic, *formed, stop) is None:
                    return False
            owned = [TopicPartition(topic, tp.partition, ranges[tp.partition][1] + 1) for tp in committed
                     if (topic, tp.partition) in self._assigned and tp.offset <= ranges[tp.partition][1]]
            if owned:
                self._commit_offsets(owned)
        for p, (_, last) in ranges.items():
            other = self._parts.get((topic, p))
            if other is not None and other.multi_redo == ranges:
                other.hwm, other.skip_below, other.multi_redo = dict(st.redo_hwm_after), last + 1, None
        return True

    def _read_ranges(self, topic: str, ranges: dict[int, tuple[int, int]], stop: Callable[[], bool]
                     ) -> dict[int, list[Entry]] | None:
        """The messages of ``ranges`` (partition -> inclusive offsets) of ``topic``, read with a consumer
        assigned to them; None if ``stop()`` first. A range whose start is gone (retention) is read from
        the oldest offset left, and said so."""
        c = Consumer({**self._conf, "group.id": f"{self._group}-redo", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "enable.partition.eof": True})
        try:
            c.assign([TopicPartition(topic, p, f) for p, (f, _) in sorted(ranges.items())])
            out: dict[int, list[Entry]] = {p: [] for p in ranges}
            left = set(ranges)
            while left and not stop():
                for m in c.consume(num_messages=1000, timeout=1.0):
                    p = m.partition()
                    if m.error():
                        if m.error().code() == KafkaError._PARTITION_EOF and p in left:
                            log.error("re-forming block of %s: partition %d ends before offset %d", topic, p,
                                      ranges[p][1])
                            left.discard(p)
                        continue
                    if p not in left or m.offset() > ranges[p][1]:
                        continue
                    if not out[p] and m.offset() > ranges[p][0]:
                        log.error("re-forming block of %s: partition %d starts at %d, not %d (retention?)", topic,
                                  p, m.offset(), ranges[p][0])
                    out[p].append(self._entry(m))
                    if m.offset() >= ranges[p][1]:
                        left.discard(p)
            return None if left else out
        finally:
            c.close()

    def _table_for(self, topic: str) -> str:
        return TABLE_OF[topic[len(self.prefix):]]

    def _retry(self, action: Callable[[], object], what: str, stop: Callable[[], bool],
               errors: tuple[type[Exception], ...] = (StoreError,)) -> object | None:
        """Run ``action`` until it does not raise ``errors`` (the store's, by default), backing off to 10 s;
        None if ``stop()`` first."""
        delay = 0.5
        while not stop():
            try:
                return action()
            except errors as err:
                self.stats.store_retries += 1
                M.STORE_RETRIES.inc()
                log.error("%s failed, retrying in %.1f s: %s", what, delay, err)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
        return None

    def _insert_with_retry(self, table: str, data: pa.Table, token: str | None, stop: Callable[[], bool],
                           store: StoreLane | None = None) -> bool:
        """Insert into ``table`` on ``store`` (default: the writer's store) until it goes in; False if
        ``stop()`` first."""
        settings = TIER_INSERT_SETTINGS if table in TIER_TABLES else None
        target = store or self.store

        def insert() -> bool:
            target.insert_arrow(table, data, dedup_token=token, settings=settings)
            return True

        return self._retry(insert, f"insert into {table}", stop) is not None

    def poll_once(self, timeout: float = 0.2, stop: Callable[[], bool] = lambda: False, force: bool = False) -> int:
        """Consume up to 1,000 messages; insert the other messages, then start one due block (all when
        ``force``d: verdicts consumed meanwhile go in before the next block), commit; rows written. A block's
        inserts run in a thread while the next polls read and decode (pausing the block topics once a block's
        worth is held) and insert the other messages; its rows count in the poll that finds them done, and
        the next block starts there (a forced poll waits for them).

        A poll that stops midway (``stop()`` while the store refuses) leaves the consumer past messages it
        neither stored nor holds; a block formed after that would skip them, so this writer writes
        nothing more (0 from then on): the next start re-reads from the committed offsets."""
        if self._abandoned:
            return 0
        written = self._finish_insert(wait=False)
        if self._abandoned:
            return 0
        if not self._raw_subscribed and self._old_writers_gone():
            self._raw_subscribed = True
            self._subscribe()
        if self._wrote_block:
            timeout = 0
        elif self._in_flight is not None:  # the next block forms soon after its inserts are done
            timeout = min(timeout, 0.05)
        msgs = self._consumer.consume(num_messages=1000, timeout=timeout)
        self._wrote_block = False
        # the other topics' messages first (stable: each partition's order kept): a verdict read behind a
        # thousand raw uploads goes in before they are decoded
        msgs.sort(key=self._in_block_topic)
        now = time.monotonic()
        for msg in msgs:
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("consumer error: %s", msg.error())
                continue
            if msg.topic()[len(self.prefix):] in BLOCK_TOPICS:
                st = self._state(msg.topic(), msg.partition())
                if st.multi_redo is not None and not self._finish_multi_redo(msg.topic(), st, stop):
                    self._abandoned = True
                    return written  # stopping before the recorded block was re-formed: it is, next start
                self._state(msg.topic(), msg.partition()).accept(self._entry(msg), now)
                continue
            table_name = self._table_for(msg.topic())
            try:
                _, data = decode(msg.value(), schema_key_from_headers(msg.headers()))
                token = dedup_token(msg, data)
                data = stamp_origin(table_name, data, origin_from_headers(msg.headers(), self.origin))
                if table_name == "rnic_inventory":
                    data = registry_inventory(data)
            except CodecError as err:
                self.stats.undecodable += 1
                M.UNDECODABLE.inc()
                log.error("undecodable message %s/%d/%d: %s", msg.topic(), msg.partition(), msg.offset(), err)
                data, table_name = _undecodable_row(msg, str(err)), "deadletters"
                token = f"dlq:{msg.topic()}/{msg.partition()}/{msg.offset()}"
            if data.num_rows and not self._insert_with_retry(table_name, data, token, stop):
                self._abandoned = True
                return written  # stopping: uncommitted messages are re-read next start
            written += data.num_rows
            self.stats.batches += 1
            M.BATCHES_WRITTEN.inc()
            M.ROWS_WRITTEN.labels(table_name).inc(data.num_rows)
            self.stats.rows += data.num_rows
            self.stats.rows_by_table[table_name] = self.stats.rows_by_table.get(table_name, 0) + data.num_rows
            self._commit(msg)
        written += self._finish_insert(wait=False)
        if self._abandoned:
            return written
        if self._in_flight is not None and not force:
            # A block's inserts still run: read on, holding the next block's rows, and once a block's worth
            # is held, pause the block topics until they are in (memory stays at two blocks). A verdict
            # read meanwhile goes in at once, where waiting for the inserts here would hold it seconds.
            if self.held_rows() >= self.budget.max_rows:
                self._pause_blocks()
            self._observe_lag(msgs)
            return written
        self._resume_blocks()
        for (topic, part), st in list(self._parts.items()):  # recorded single-partition blocks, re-formed first
            judged = st.judged
            if st.redo is not None and (entries := st.take_block(self.block_rows, self.block_s, now, force)):
                written += self._finish_insert()
                if self._abandoned or not self._write_block(topic, {part: st}, {part: entries}, stop, judged):
                    self._abandoned = True
                    return written
        for topic in sorted({t for t, _ in self._parts}):
            states = {p: st for (t, p), st in self._parts.items() if t == topic}
            while (taken := take_writer_block(states, self.block_rows, self.block_s, time.monotonic(), force,
                                                 self.budget)):
                written += self._finish_insert()
                if self._abandoned or not self._write_block(topic, states, taken, stop):
                    self._abandoned = True
                    return written  # stopping: the block is recorded; the next start re-forms it
                if not force:  # one block per poll: verdicts (inserted per message) never wait behind several
                    self._wrote_block = True
                    break
            if self._wrote_block:
                break
        if force:  # everything held goes in before the poll returns
            written += self._finish_insert()
        self._observe_lag(msgs)
        return written

    def _in_block_topic(self, msg: Message) -> bool:
        topic = msg.topic()
        return topic is not None and topic[len(self.prefix):] in BLOCK_TOPICS

    def _pause_blocks(self) -> None:
        """Stop fetching the block topics' partitions (:meth:`poll_once`: a block's worth is held while the
        last one's inserts run); :meth:`_resume_blocks` fetches them again from the next message to read."""
        if not self._paused:
            self._paused = [TopicPartition(t, p) for t, p in sorted(self._assigned)
                            if t[len(self.prefix):] in BLOCK_TOPICS]
            if self._paused:
                self._consumer.pause(self._paused)
                self.stats.pauses += 1

    def _resume_blocks(self) -> None:
        """Fetch the paused partitions that are still this writer's again."""
        paused, self._paused = self._paused, []
        still = [tp for tp in paused if (tp.topic, tp.partition) in self._assigned]
        if still:
            try:
                self._consumer.resume(still)
            except KafkaException as err:  # lost meanwhile: a later assignment starts them unpaused
                log.warning("resuming %d partitions: %s", len(still), err)

    def held_rows(self) -> int:
        """Raw probe rows read and not yet inserted (in blocks still open), over every partition."""
        return sum(st.pending_rows for st in self._parts.values())

    def _entry(self, msg: Message) -> Entry:
        """Decode one raw upload (:func:`sinks.raw_rows.raw_entry`)."""
        entry = raw_entry(msg.offset(), msg.value(), schema_key_from_headers(msg.headers()),
                          f"{msg.topic()}/{msg.partition()}/{msg.offset()}")
        if entry.rows is None:
            self.stats.undecodable += 1
            M.UNDECODABLE.inc()
        return entry

    def _form(self, topic: str, parts: dict[int, tuple[list[Entry], dict[str, int]]], judged: dict[str, int],
              stop: Callable[[], bool]) -> tuple[WriterBlock, dict[str, str]] | None:
        """The writer block of ``parts`` (:func:`sinks.raw_rows.form_raw_block`), judged with the registry's
        RNICs and the retention policy; under ``anomalies`` with the baseline snapshot ``judged`` names (a
        re-formed block), else the newest. With the RNICs' ToRs (:func:`sinks.probe_tiers.tor_of_rnic`);
        None if stopped first."""
        tor_of = self._retry(lambda: tor_of_rnic(self.store), "read rnic_inventory", stop)
        if tor_of is None or self._retry(self._registry_rnics, "read the registry", stop,
                                         errors=(KafkaException,)) is None:
            return None
        baseline, generation = None, None
        if self._baselines is not None:
            reader = self._baselines
            got = self._retry(reader.newest, "read latency.baselines", stop, errors=(KafkaException,))
            if got is None:
                return None
            baseline, generation = got
            if "baseline" in judged and judged["baseline"] != generation:
                kept = self._retry(lambda: reader.of(judged["baseline"]), "read latency.baselines", stop,
                                   errors=(KafkaException,))
                if kept is not None:
                    baseline, generation = kept, judged["baseline"]
        judge = RawJudge(self._rnics or None, self.retention, baseline, generation)
        block = form_raw_block(topic, parts, judge)
        if generation is not None:
            block.judged["baseline"] = generation
        return block, tor_of

    def _registry_rnics(self) -> bool:
        """Catch up on every RNIC the registry topic has listed, read from its beginning as the stream workers
        read it (the unknown-RNIC rule; ``rnic_inventory`` also holds what an inventory file loaded).

        Raises:
            KafkaException: the topic could not be read at all (the caller retries).
        """
        if self._registry is None:
            self._registry = registry_rnics_mirror(self._conf["bootstrap.servers"], f"{self.prefix}{T.REGISTRY.name}",
                                                   self._rnics,
                                                   {k: v for k, v in self._conf.items() if k != "bootstrap.servers"})
        self._registry.catch_up()
        return True

    def _write_block(self, topic: str, states: dict[int, PartitionState], taken: dict[int, list[Entry]],
                     stop: Callable[[], bool], judged: dict[str, int] | None = None) -> bool:
        """Form one writer block over ``taken`` (partition -> entries; :mod:`sinks.blocks`) judged as ``judged``
        says (a recorded block re-formed) and start its inserts in the insert thread; its rows count and its
        offsets are committed once they are done (:meth:`_finish_insert`). False if stopped first."""
        formed = self._form(topic, {p: (entries, states[p].hwm) for p, entries in taken.items()}, judged or {},
                            stop)
        if formed is None:
            return False
        self._in_flight = (self._inserts.submit(self._insert_block, topic, *formed, stop),
                           functools.partial(self._block_stored, topic, states, taken, formed[0]))
        return True

    def _finish_insert(self, wait: bool = True) -> int:
        """Wait for the block insert in flight (if any; with ``wait`` False, only if it is done), then record
        it (hwm, stats, offsets committed): its rows, or 0. A block whose inserts were stopped midway (the
        store refused until ``stop()``) abandons this writer (see :meth:`poll_once`).

        Raises:
            Exception: what the inserts raised (as if they had run in this thread).
        """
        if self._in_flight is None or not (wait or self._in_flight[0].done()):
            return 0
        future, inserted = self._in_flight
        self._in_flight = None
        rows = future.result()
        if rows is None:
            self._abandoned = True
            return 0
        inserted(rows)
        return rows

    def _block_stored(self, topic: str, states: dict[int, PartitionState], taken: dict[int, list[Entry]],
                      block: WriterBlock, rows: int) -> None:
        """Record a writer block whose inserts are done: its partitions' marks, the stats, the offsets."""
        for p, b in block.parts.items():
            states[p].hwm, states[p].judged = b.hwm_after, {}
        self.stats.blocks += 1
        n_msgs = sum(len(entries) for entries in taken.values())
        self.stats.batches += n_msgs
        self.stats.rows += rows
        self.stats.replayed_rows_dropped += block.dropped_rows
        M.BATCHES_WRITTEN.inc(n_msgs)
        if block.dropped_rows:
            log.warning("block %s: left out %d rows stored before (by the writer this one took over from)",
                        block.token(topic), block.dropped_rows)
        self._commit_offsets([TopicPartition(topic, p, last + 1) for p, (_, last) in block.ranges.items()])

    def _insert_block(self, topic: str, block: WriterBlock, tor_of: dict[str, str], stop: Callable[[], bool]
                      ) -> int | None:
        """The state rows, then every table's insert of ``block`` (hourly tiers under ``tor_of``); rows inserted,
        None if stopped first (the block is re-formed from its recorded state at the next start)."""
        rows = 0
        for table, data, token in writer_block_inserts(topic, block, time.time_ns(), tor_of):
            if not self._insert_with_retry(table, data, token, stop, self.block_store):
                return None
            if token is None:
                continue  # the state rows
            rows += data.num_rows
            M.ROWS_WRITTEN.labels(table).inc(data.num_rows)
            self.stats.rows_by_table[table] = self.stats.rows_by_table.get(table, 0) + data.num_rows
        return rows

    def _commit_offsets(self, offsets: list[TopicPartition]) -> None:
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as err:
            self.stats.commit_failures += 1
            log.warning("offset commit %s refused (%s); the block is recorded in %s, a re-read skips it",
                        [(tp.topic, tp.partition, tp.offset) for tp in offsets],
                        err.args[0].str() if err.args else err, STATE_TABLE)

    def _observe_lag(self, msgs: list[Message]) -> None:
        """Consumer lag per topic from the last message of each partition (cached watermarks: no round trip)."""
        last = {(m.topic(), m.partition()): m.offset() for m in msgs if not m.error()}
        for (topic, part), off in last.items():
            _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, part), cached=True)
            if high >= 0:
                self._lag[(topic, part)] = max(0, high - off - 1)
        for topic in {t for t, _ in last}:
            M.CONSUMER_LAG.labels(topic).set(sum(v for (t, _), v in self._lag.items() if t == topic))

    def _commit(self, msg: Message) -> None:
        """Commit past ``msg``. A refused commit (this member was evicted from the group while frozen or
        partitioned, or a rebalance is in progress) is not fatal: the rows are stored, the message will be
        read again and its insert is a no-op (same deduplication token)."""
        try:
            self._consumer.commit(message=msg, asynchronous=False)
        except KafkaException as err:
            self.stats.commit_failures += 1
            log.warning("offset commit for %s/%d/%d refused (%s); it will be re-read and deduplicated",
                        msg.topic(), msg.partition(), msg.offset(), err.args[0].str() if err.args else err)

    def run(self, stop: Callable[[], bool]) -> None:
        """Loop until ``stop()`` is true, then insert what is held (best effort: a crash loses nothing either)."""
        while not stop():
            self.poll_once(stop=stop)
        deadline = time.monotonic() + 5.0
        self.poll_once(timeout=0, force=True, stop=lambda: time.monotonic() > deadline)

    def close(self) -> None:
        try:
            self._finish_insert()
        finally:
            self._inserts.shutdown(wait=True)
            self.block_store.close()
        if self._baselines is not None:
            self._baselines.close()
        if self._registry is not None:
            self._registry.close()
        self._consumer.close()
