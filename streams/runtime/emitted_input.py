"""The worker's skip of input already emitted to the reducer (docs/storage.md "Exactly-once rows").

A restarted worker (or the new owner of a partition after a rebalance) re-reads the
``probes.raw`` messages nobody committed and groups them into steps differently. The reducer
drops a step whose raw offsets it has all merged, but a step that overlaps one already merged
cannot be split after aggregation, so the worker must never send one. When it reads a raw
partition for the first time, or at an offset that does not follow the last one it processed,
it reads the tail of ``window.partials`` for the highest raw offset of that partition that a
complete step already carried (:func:`read_emitted`), and leaves the messages at or below it
out of its steps' partials (:func:`streams.runtime.probe_step.fresh_ranges`). A step message is
sent after the step's store sends, so whatever it covers is fully emitted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from streams.pingmesh.step_message import StepFormatError, part_of
from streams.runtime.probe_step import RawMessage

log = logging.getLogger("fabricscope.worker")

CLOCK_SKEW_MS = 10 * 60 * 1000
"""How far a worker's clock may lag an agent's: a step carrying a raw message is never timestamped more
than this before the raw message itself (the tail scan stops there)."""


@dataclass
class EmittedOffsets:
    """Per raw partition: the offset this worker expects next, and the highest offset it knows emitted.

    Attributes:
        next: raw partition → offset after the last message this worker processed (absent: never, or
            the partition was revoked since).
        emitted: raw partition → highest raw offset a step already sent covers (this worker's or, read
            from the topic, another's).
    """

    next: dict[int, int] = field(default_factory=dict)
    emitted: dict[int, int] = field(default_factory=dict)

    def resumed(self, messages: Iterable[RawMessage]) -> dict[int, int]:
        """Raw partition → the first offset of the step that does not follow what this worker processed
        last (a start, a rebalance, a re-read): where :func:`read_emitted` must look."""
        expect = dict(self.next)
        out: dict[int, int] = {}
        for m in messages:
            if expect.get(m.partition) != m.offset and m.partition not in out:
                out[m.partition] = m.offset
            expect[m.partition] = m.offset + 1
        return out

    def learn(self, emitted: Mapping[int, int]) -> None:
        """Raise the emitted marks to what the topic says (never lower: this worker's own sends count)."""
        for p, off in emitted.items():
            self.emitted[p] = max(self.emitted.get(p, -1), off)

    def processed(self, messages: Iterable[RawMessage], ranges: Mapping[int, tuple[int, int]]) -> None:
        """After a step's sends: ``messages`` were processed and the step covered ``ranges``."""
        for m in messages:
            self.next[m.partition] = m.offset + 1
        self.learn({p: b for p, (_, b) in ranges.items()})

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions revoked from this worker: another may advance them; look again when they come back."""
        for p in partitions:
            self.next.pop(p, None)


def read_emitted(bootstrap: str, topic: str, kafka_config: dict[str, str], resume: Mapping[int, int],
                 not_before_ms: int | None = None, first_chunk: int = 32, max_chunk: int = 1024) -> dict[int, int]:
    """The highest raw offset per partition of ``resume`` that a complete step in ``topic`` covers.

    Reads partition 0 of ``topic`` (``window.partials``) backwards in growing chunks, and stops for a
    partition once it has seen a step of it that starts below its resume offset (every step sent after
    that one is then seen), or at the start of the topic, or at messages stamped before
    ``not_before_ms`` (the raw messages' time less :data:`CLOCK_SKEW_MS`). Only a step's last part counts
    (the parts of a step are produced in order, so its last part means the step is whole).

    Returns:
        ``{partition: offset}`` for the partitions some step covers (absent: nothing emitted).

    Raises:
        RuntimeError: the broker delivered nothing for 10 s while the range is known to hold messages.
    """
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"emitted-{topic}", "enable.auto.commit": False,
                  "enable.partition.eof": True, **kafka_config})
    out: dict[int, int] = {}
    waiting = set(resume)
    try:
        low, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        chunk = first_chunk
        while waiting and end > low:
            start = max(low, end - chunk)
            oldest_ms = None
            for ts_ms, headers in _headers(c, topic, start, end):
                oldest_ms = ts_ms if oldest_ms is None else min(oldest_ms, ts_ms)
                try:
                    part = part_of(headers)
                except StepFormatError:
                    continue
                if part.index != part.count - 1:
                    continue
                for p, (a, b) in part.ranges.items():
                    if p in resume:
                        out[p] = max(out.get(p, -1), b)
                        if a < resume[p]:
                            waiting.discard(p)
            if not_before_ms is not None and oldest_ms is not None and oldest_ms < not_before_ms:
                break
            end, chunk = start, min(chunk * 2, max_chunk)
    finally:
        c.close()
    log.info("window.partials tail: emitted raw offsets %s for resume points %s", out, dict(resume))
    return out


def _headers(c: Consumer, topic: str, start: int, end: int) -> Iterable[tuple[int, dict[str, bytes]]]:
    """(timestamp ms, headers) of partition 0 of ``topic`` over offsets ``[start, end)``."""
    c.assign([TopicPartition(topic, 0, start)])
    while True:
        m = c.poll(10.0)
        if m is None:
            raise RuntimeError(f"{topic}: no message within 10 s while reading offsets {start}..{end - 1}")
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:  # the high watermark held a non-message offset
                return
            continue
        if m.offset() >= end:
            return
        yield m.timestamp()[1], dict(m.headers() or [])
        if m.offset() + 1 >= end:
            return
