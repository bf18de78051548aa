"""A side reader that keeps a process's copy of a small topic up to date (paths, registry, job metrics).

Faust spreads an agent's partitions over the workers, but every worker needs
all traced paths (a probe's ACK path is traced by the responder's agent, in
another partition) and the reducer needs the whole registry. A
:class:`TopicMirror` reads every partition of its topic from the beginning
with its own consumer (no group, no commits) and, on :meth:`catch_up`, applies
everything published up to that moment, in order. Catching up before a probe
batch means every path published before the batch is known.

A worker that starts on a large fabric catches up on thousands of messages at once
(``paths.traced`` at 10,000 RNICs: one message per agent and upload round). With
``coalesce_rows`` the tables of consecutive messages are concatenated and applied as
one call, so a fold whose cost is per call (the path index's id tables and arrays)
runs a few times instead of once per message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from schemas.codec import CodecError, decode, schema_key_from_headers

log = logging.getLogger("fabricscope.mirror")

PATHS_COALESCE_ROWS = 200_000
"""Rows per ``apply`` call of the workers' ``paths.traced`` mirror: a 10,000-RNIC fabric's ~640,000 traced
paths in four calls, not one per agent upload (BENCHMARKS.md §4, "Worker start-up at 10,000 RNICs")."""


class TopicMirror:
    """Reads ``topic`` from the beginning; :meth:`catch_up` applies decoded tables to ``apply``.

    Args:
        bootstrap: Kafka bootstrap servers.
        topic: full topic name (with prefix).
        apply: called with each decoded table, in offset order per partition.
        kafka_config: extra client settings (SASL/TLS).
        apply_with_headers: called instead of ``apply`` with each table and its message's headers
            (a list of (key, bytes) pairs, or None), for topics whose messages say how they belong
            together (never coalesced); a :class:`CodecError` it raises skips the message.
        coalesce_rows: 0 (the default): ``apply`` is called once per message. Above 0: consecutive
            messages' tables of one schema are concatenated, up to this many rows (a single larger
            message is applied alone), and applied in one call, in the same order. Only for an ``apply``
            whose outcome does not depend on how rows are split into calls (the path index: newest trace
            per 5-tuple); not for one that assumes a key appears once per call.

    Attributes:
        undecodable: messages skipped because they did not decode (logged).
        applied_calls: calls of ``apply`` so far (with ``coalesce_rows``, fewer than messages).
    """

    def __init__(self, bootstrap: str, topic: str, apply: Callable[[pa.Table], None] | None,
                 kafka_config: dict[str, str] | None = None, coalesce_rows: int = 0,
                 apply_with_headers: Callable[[pa.Table, list | None], None] | None = None) -> None:
        self.topic = topic
        self.apply = apply
        self.apply_with_headers = apply_with_headers
        if apply_with_headers is not None and coalesce_rows > 0:
            raise ValueError(f"{topic}: a mirror that applies headers applies each message alone (coalesce_rows 0)")
        self.coalesce_rows = coalesce_rows
        self.applied_calls = 0
        self.undecodable = 0
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"mirror-{topic}",
                            "enable.auto.commit": False, "fetch.wait.max.ms": 10, **(kafka_config or {})})
        meta = self._c.list_topics(topic, timeout=10).topics[topic]
        self._parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(meta.partitions)]
        self._c.assign(self._parts)

    def catch_up(self, timeout: float = 5.0) -> int:
        """Apply every message published before this call; returns the number applied.

        While the broker restarts (no leader, no answer) it applies nothing now, logs it, and
        catches up on the next call: an exception here would stall the agent that calls it.

        Between calls the partitions are paused: an assigned consumer would otherwise long-poll the broker
        every ``fetch.wait.max.ms`` (10 ms, which a catch-up needs: at 500 ms one took 1.5-2 s) while
        nothing comes, ~6 ms of CPU per s in a worker with two mirrors (and the broker's share).
        """
        try:
            self._c.resume(self._parts)
            return self._catch_up(timeout)
        except KafkaException as err:
            log.warning("%s not caught up now (%s): using what is known, retrying on the next call",
                        self.topic, err.args[0].str() if err.args else err)
            return 0
        finally:
            try:
                self._c.pause(self._parts)
            except KafkaException as err:  # the broker away: the next call resumes and pauses again
                log.warning("%s: pausing the mirror failed (%s)", self.topic, err)

    def _catch_up(self, timeout: float) -> int:
        ends = {}
        for tp in self._parts:
            _, high = self._c.get_watermark_offsets(tp, timeout=timeout, cached=False)
            ends[tp.partition] = high
        pos = {tp.partition: tp.offset for tp in self._c.position(self._parts)}
        todo = {p for p, h in ends.items() if h > 0 and (pos[p] < 0 or pos[p] < h)}
        applied = 0
        pending: list[pa.Table] = []  # decoded, not yet applied (coalesce_rows > 0): one schema, in order
        pending_rows = 0
        try:
            while todo:
                m = self._c.poll(timeout)  # poll, not consume(n): consume waits for n messages or the timeout
                if m is None:
                    log.warning("%s: caught up only partly within %.1f s", self.topic, timeout)
                    break
                if m.error():
                    continue
                if self.coalesce_rows <= 0:
                    applied += self._apply_message(m)
                else:
                    try:
                        _, table = decode(m.value(), schema_key_from_headers(m.headers()))
                    except CodecError as err:  # the rtt worker dead-letters bad input; here we only skip it
                        self._skipped(m, err)
                    else:
                        applied += 1
                        if pending and (pending_rows + table.num_rows > self.coalesce_rows
                                        or not table.schema.equals(pending[0].schema)):
                            batch, pending, pending_rows = pending, [], 0
                            self._apply(batch)
                        pending.append(table)
                        pending_rows += table.num_rows
                if m.offset() + 1 >= ends[m.partition()]:
                    todo.discard(m.partition())
        finally:  # what was read is applied, even when a later poll fails (the position moved past it)
            if pending:
                batch, pending = pending, []
                self._apply(batch)
        return applied

    def _apply(self, tables: list[pa.Table]) -> None:
        self.apply(tables[0] if len(tables) == 1 else pa.concat_tables(tables))
        self.applied_calls += 1

    def _apply_message(self, m: Message) -> int:
        """Decode one message and apply it alone; 1 if applied, 0 if skipped as undecodable."""
        try:
            _, table = decode(m.value(), schema_key_from_headers(m.headers()))
            if self.apply_with_headers is not None:
                self.apply_with_headers(table, m.headers())
                self.applied_calls += 1
            else:
                self._apply([table])
            return 1
        except CodecError as err:  # the rtt worker dead-letters bad input; here we only skip it
            self._skipped(m, err)
            return 0

    def _skipped(self, m: Message, err: CodecError) -> None:
        self.undecodable += 1
        log.error("%s/%d/%d skipped: %s", m.topic(), m.partition(), m.offset(), err)

    def close(self) -> None:
        self._c.close()


def registry_rnics_mirror(bootstrap: str, topic: str, rnics: set[str],
                          kafka_config: dict[str, str] | None = None) -> TopicMirror:
    """A mirror of the registry topic ``topic`` that adds every ``rnic`` it lists to ``rnics`` (the unknown-RNIC
    rule, read the same way by the stream workers and the store writer). Nothing is read until
    :meth:`TopicMirror.catch_up`.

    Raises:
        KafkaException: the topic's metadata could not be read (as :class:`TopicMirror`).
    """
    def add(t: pa.Table) -> None:
        if "rnic" in t.column_names:
            rnics.update(r for r in t["rnic"].to_pylist() if r)

    return TopicMirror(bootstrap, topic, add, kafka_config)
