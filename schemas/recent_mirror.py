"""A side reader of only the recent part of a busy topic (the bus monitor's readings on hostmetrics.raw).

:class:`schemas.topic_mirror.TopicMirror` reads its topic from the beginning: right for small
compacted topics (paths, registry, host topologies), wasteful for ``hostmetrics.raw``, which
keeps 7 days of 1 s samples from every host while the host-link worker needs only the newest
bus utilisation per link. :class:`RecentTopicMirror` starts each partition at the first
message at or after ``lookback_s`` ago (broker timestamps), or at its end when there is none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pyarrow as pa
from confluent_kafka import TopicPartition

from schemas.topic_mirror import TopicMirror

log = logging.getLogger("fabricscope.mirror")


class RecentTopicMirror(TopicMirror):
    """A :class:`TopicMirror` whose first :meth:`catch_up` applies only messages of the last ``lookback_s``.

    Args:
        bootstrap: Kafka bootstrap servers.
        topic: full topic name (with prefix).
        apply: called with each decoded table, in offset order per partition.
        kafka_config: extra client settings (SASL/TLS).
        lookback_s: how far back (s, by message timestamp) to start; later catch-ups read on.
        apply_with_headers: as in :class:`TopicMirror`.
    """

    def __init__(self, bootstrap: str, topic: str, apply: Callable[[pa.Table], None] | None,
                 kafka_config: dict[str, str] | None = None, lookback_s: float = 600.0,
                 apply_with_headers: Callable[[pa.Table, list | None], None] | None = None) -> None:
        super().__init__(bootstrap, topic, apply, kafka_config, apply_with_headers=apply_with_headers)
        since_ms = int((time.time() - lookback_s) * 1000)
        found = self._c.offsets_for_times([TopicPartition(topic, tp.partition, since_ms) for tp in self._parts],
                                          timeout=10)
        starts = []
        for tp in found:
            offset = tp.offset
            if offset < 0:  # nothing that recent: start at the end (the high watermark, a real offset)
                offset = self._c.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10,
                                                       cached=False)[1]
            starts.append(TopicPartition(topic, tp.partition, offset))
        self._parts = starts
        self._next = {tp.partition: tp.offset for tp in starts}
        self._c.assign(self._parts)

    def _catch_up(self, timeout: float) -> int:
        """Apply every message published before this call since the start point; returns the number applied
        (:meth:`TopicMirror.catch_up` resumes the partitions around it and survives a broker away).

        Positions are tracked here (the consumer reports none before its first message), so a
        partition with nothing new costs one watermark request, never a poll timeout.
        """
        ends = {p: self._c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout, cached=False)[1]
                for p in self._next}
        todo = {p for p, nxt in self._next.items() if nxt < ends[p]}
        applied = 0
        while todo:
            m = self._c.poll(timeout)
            if m is None:
                log.warning("%s: caught up only partly within %.1f s", self.topic, timeout)
                break
            if m.error():
                continue
            self._next[m.partition()] = m.offset() + 1
            applied += self._apply_message(m)
            if m.offset() + 1 >= ends[m.partition()]:
                todo.discard(m.partition())
        return applied
