"""The flow baselines the store writer judges ``anomalies`` retention with, by snapshot generation.

The reducer publishes its whole per-flow latency baseline after each window to ``latency.baselines``
(:mod:`schemas.probe_rows.baselines`). The store writer keeps the newest complete snapshot, records its
generation with each block, and judges a re-formed block with that same generation: from memory (the
last few), else read again from the topic at the generation's time (a restart). The topic keeps an
hour, so a block re-formed later than that is judged with the newest snapshot instead, and said so.
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa

from schemas.probe_rows.baselines import BaselineSnapshots
from schemas.recent_mirror import RecentTopicMirror

log = logging.getLogger("fabricscope.sink")

LOOKBACK_S = 300.0
"""How far back a fresh reader starts (s): the reducer publishes a snapshot every window (20 s)."""
KEEP = 8
"""Complete snapshots kept in memory by generation: a block records the one it was judged with."""


class BaselineReader:
    """The newest complete snapshot of ``topic`` (:meth:`newest`) and earlier ones by generation (:meth:`of`).

    Args:
        bootstrap: Kafka bootstrap servers.
        topic: the full name of ``latency.baselines``.
        kafka_config: extra client settings (SASL/TLS).

    Kafka errors (``confluent_kafka.KafkaException``) pass to the caller, who retries.
    """

    def __init__(self, bootstrap: str, topic: str, kafka_config: dict[str, str] | None = None) -> None:
        self._bootstrap, self._topic, self._conf = bootstrap, topic, kafka_config
        self._mirror: RecentTopicMirror | None = None
        self._snapshots = BaselineSnapshots()
        self._kept: dict[int, pa.Table] = {}

    def _take(self, snapshots: BaselineSnapshots, keep: dict[int, pa.Table], table: pa.Table,
              headers: list | None) -> None:
        before = snapshots.current
        snapshots.apply(table, headers)
        if snapshots.current is not before and snapshots.generation is not None and snapshots.current is not None:
            keep[snapshots.generation] = snapshots.current
            for g in sorted(keep)[:-KEEP]:
                del keep[g]

    def newest(self) -> tuple[pa.Table | None, int | None]:
        """Catch up on the topic; the newest complete snapshot and its generation (None, None before any)."""
        if self._mirror is None:
            self._mirror = RecentTopicMirror(
                self._bootstrap, self._topic, None, self._conf, lookback_s=LOOKBACK_S,
                apply_with_headers=lambda t, h: self._take(self._snapshots, self._kept, t, h))
        self._mirror.catch_up()
        return self._snapshots.current, self._snapshots.generation

    def of(self, generation: int) -> pa.Table | None:
        """Snapshot ``generation`` (the reducer's wall clock at publication, ns): kept, or read again from the
        topic from a little before that time; None when the topic no longer holds it."""
        if generation in self._kept:
            return self._kept[generation]
        found: dict[int, pa.Table] = {}
        snapshots = BaselineSnapshots()

        def take(table: pa.Table, headers: list | None) -> None:
            snapshots.apply(table, headers)
            if snapshots.generation == generation and snapshots.current is not None:
                found[generation] = snapshots.current

        ago = max(0.0, time.time() - generation / 1e9) + 30.0
        mirror = RecentTopicMirror(self._bootstrap, self._topic, None, self._conf, lookback_s=ago,
                                   apply_with_headers=take)
        try:
            mirror.catch_up()
        finally:
            mirror.close()
        if generation not in found:
            log.error("flow-baseline snapshot %d is no longer in %s: the block is judged with the newest one",
                      generation, self._topic)
        return found.get(generation)

    def close(self) -> None:
        if self._mirror is not None:
            self._mirror.close()
