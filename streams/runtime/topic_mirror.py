"""A side reader that keeps a worker's copy of a small topic up to date (paths, registry, job metrics).

Faust spreads an agent's partitions over the workers, but every worker needs
all traced paths (a probe's ACK path is traced by the responder's agent, in
another partition) and the reducer needs the whole registry. A
:class:`TopicMirror` reads every partition of its topic from the beginning
with its own consumer (no group, no commits) and, on :meth:`catch_up`, applies
everything published up to that moment, in order. Catching up before a probe
batch means every path published before the batch is known.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from schemas.codec import CodecError, decode, schema_key_from_headers

log = logging.getLogger("fabricscope.mirror")


class TopicMirror:
    """Reads ``topic`` from the beginning; :meth:`catch_up` applies decoded tables to ``apply``.

    Args:
        bootstrap: Kafka bootstrap servers.
        topic: full topic name (with prefix).
        apply: called with each decoded table, in offset order per partition.
        kafka_config: extra client settings (SASL/TLS).
    """

    def __init__(self, bootstrap: str, topic: str, apply: Callable[[pa.Table], None],
                 kafka_config: dict[str, str] | None = None) -> None:
        self.topic = topic
        self.apply = apply
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
        while todo:
            m = self._c.poll(timeout)  # poll, not consume(n): consume waits for n messages or the timeout
            if m is None:
                log.warning("%s: caught up only partly within %.1f s", self.topic, timeout)
                break
            if m.error():
                continue
            try:
                _, table = decode(m.value(), schema_key_from_headers(m.headers()))
                self.apply(table)
                applied += 1
            except CodecError as err:  # the rtt worker dead-letters bad input; here we only skip it
                self.undecodable += 1
                log.error("%s/%d/%d skipped: %s", m.topic(), m.partition(), m.offset(), err)
            if m.offset() + 1 >= ends[m.partition()]:
                todo.discard(m.partition())
        return applied

    def close(self) -> None:
        self._c.close()
