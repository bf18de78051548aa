"""The store writer: consumes result topics and inserts each batch into ClickHouse.

Runs in its own process so an insert never blocks the Faust event loop
(a blocked loop misses consumer-group heartbeats). Offsets are committed only
after the insert returned; each insert carries the batch identity as its
deduplication token, so a replay after a crash adds no row twice
(at-least-once delivery, exactly-once rows).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from schemas import topics as T
from schemas.codec import CodecError, decode, schema_key_from_headers
from sinks import metrics as M
from sinks.clickhouse import Store, StoreError

log = logging.getLogger("fabricscope.sink")

# topic -> ClickHouse table
TABLE_OF: dict[str, str] = {
    T.PROBES_ENRICHED.name: "probes",
    T.VERDICTS.name: "verdicts",
    T.DEADLETTER.name: "deadletters",
    T.HOST_LINKS.name: "host_links",
    T.COVERAGE.name: "coverage",
    T.HOSTS_INVENTORY.name: "pci_functions",
    T.HOSTMETRICS_RAW.name: "host_metrics",
    T.LOOPBACK_RAW.name: "loopback",
}


@dataclass
class SinkStats:
    """Counters of one sink process."""

    batches: int = 0
    rows: int = 0
    undecodable: int = 0
    store_retries: int = 0
    commit_failures: int = 0
    rows_by_table: dict[str, int] = field(default_factory=dict)


def dedup_token(msg: Message, table: pa.Table) -> str:
    """The batch identity, stable across a worker's replay.

    Probes carry their source batch id (raw topic/partition/offset); dead letters
    carry the source message's coordinates, so a dead-letter record the worker
    emits again after a crash (at a new dead-letter offset) is still one insert. So a
    worker sends at most one dead-letter message per source message (all its bad rows
    in it): a second one for the same source would be taken for a replay.
    Anything else: this message's topic/partition/offset.
    """
    if "batch_id" in table.column_names and table.num_rows:
        return f"{msg.topic()}:{table['batch_id'][0].as_py()}"
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
    """

    def __init__(
        self,
        store: Store,
        bootstrap: str,
        prefix: str = "",
        group: str = "fabricscope-store",
        kafka_config: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.prefix = prefix
        self.stats = SinkStats()
        self._lag: dict[tuple[str, int], int] = {}
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
        self._consumer = Consumer(conf)
        self._consumer.subscribe([f"{prefix}{t}" for t in TABLE_OF])

    def _table_for(self, topic: str) -> str:
        return TABLE_OF[topic[len(self.prefix):]]

    def _insert_with_retry(self, table: str, data: pa.Table, token: str, stop: Callable[[], bool]) -> bool:
        delay = 0.5
        while not stop():
            try:
                self.store.insert_arrow(table, data, dedup_token=token)
                return True
            except StoreError as err:
                self.stats.store_retries += 1
                M.STORE_RETRIES.inc()
                log.error("insert into %s failed, retrying in %.1f s: %s", table, delay, err)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
        return False

    def poll_once(self, timeout: float = 0.5, stop: Callable[[], bool] = lambda: False) -> int:
        """Consume up to 100 messages, insert them, commit; returns rows written."""
        msgs = self._consumer.consume(num_messages=100, timeout=timeout)
        written = 0
        for msg in msgs:
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("consumer error: %s", msg.error())
                continue
            table_name = self._table_for(msg.topic())
            try:
                _, data = decode(msg.value(), schema_key_from_headers(msg.headers()))
                token = dedup_token(msg, data)
            except CodecError as err:
                self.stats.undecodable += 1
                M.UNDECODABLE.inc()
                log.error("undecodable message %s/%d/%d: %s", msg.topic(), msg.partition(), msg.offset(), err)
                data, table_name = _undecodable_row(msg, str(err)), "deadletters"
                token = f"dlq:{msg.topic()}/{msg.partition()}/{msg.offset()}"
            if not self._insert_with_retry(table_name, data, token, stop):
                return written  # stopping: uncommitted messages are re-read next start
            written += data.num_rows
            self.stats.batches += 1
            M.BATCHES_WRITTEN.inc()
            M.ROWS_WRITTEN.labels(table_name).inc(data.num_rows)
            self.stats.rows += data.num_rows
            self.stats.rows_by_table[table_name] = self.stats.rows_by_table.get(table_name, 0) + data.num_rows
            self._commit(msg)
        self._observe_lag(msgs)
        return written

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
        """Loop until ``stop()`` is true."""
        while not stop():
            self.poll_once(stop=stop)

    def close(self) -> None:
        self._consumer.close()
