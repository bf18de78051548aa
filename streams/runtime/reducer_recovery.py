"""The window reducer survives a kill -9: its state is rebuilt from the topics on (re)start.

The reducer's state (open windows' partials, watermarks, the analyzer's carried state:
baselines, 60 s RNIC charges, verdicts awaiting revision, the highest raw offset merged per
``probes.raw`` partition that drops replayed steps, the parts of a step still incomplete) is a
deterministic function of the ordered ``window.partials`` stream (one partition). So the reducer
keeps no state of its own on disk: when its agent sees a message that does not follow the last
one it applied (the process just started, or the partition came back after a rebalance), it builds a fresh
:class:`~streams.pingmesh.reducer.WindowReducer` and replays ``window.partials`` from the
beginning up to that message. Windows the replay closes are emitted only when they are
missing from ``windows.closed``, which the reducer writes after a window's verdicts and
coverage were acknowledged by the broker: a window is emitted exactly once across a crash
(at worst, verdicts acknowledged just before a kill are sent again with the same
``verdict_id``, which the store deduplicates).

Limits: the replay reads the topic's whole retention (7 days by default), so a restart costs
reading and merging that much; the registry and job-metric mirrors are read to their end
before the replay, not interleaved with it as they were live.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from streams.pingmesh.analyzer import WindowResult
from streams.pingmesh.reducer import StepFormatError, WindowReducer

log = logging.getLogger("fabricscope.reducer")


def closed_windows(bootstrap: str, topic: str, kafka_config: dict[str, str]) -> set[int]:
    """Window starts (ns) that ``windows.closed`` lists: windows already emitted."""
    out: set[int] = set()
    for _, value in _read(bootstrap, topic, kafka_config, None):
        try:
            out.add(int(json.loads(value)["window_start_ns"]))
        except (ValueError, KeyError, TypeError):
            log.error("%s: a summary without window_start_ns skipped", topic)
    return out


def rebuild(reducer: WindowReducer, bootstrap: str, partials_topic: str, closed_topic: str,
            kafka_config: dict[str, str], upto_offset: int) -> tuple[list[tuple[int, WindowResult]], set[int]]:
    """Replay ``window.partials`` offsets ``[0, upto_offset)`` into a fresh ``reducer``.

    Returns:
        (the windows the replay closed that ``windows.closed`` does not list, oldest first, for the
        caller to emit; the windows it lists: already emitted, never to be emitted again. Messages at
        and after ``upto_offset`` may have been applied before the crash: their windows are in it.)
    """
    done = closed_windows(bootstrap, closed_topic, kafka_config)
    out: list[tuple[int, WindowResult]] = []
    n = 0
    for headers, value in _read(bootstrap, partials_topic, kafka_config, upto_offset):
        try:
            closed = reducer.receive(headers, value)
        except StepFormatError as err:  # dead-lettered when it first came; skipped the same way again
            log.error("%s: a message skipped in the replay: %s", partials_topic, err)
            closed = []
        out += [(w, r) for w, r in closed if w not in done]
        n += 1
    log.warning("reducer rebuilt from %d window.partials messages; %d closed windows not yet emitted", n, len(out))
    return out, done


def _read(bootstrap: str, topic: str, kafka_config: dict[str, str],
          upto: int | None) -> Iterable[tuple[dict[str, bytes], bytes]]:
    """(headers, value) of partition 0 of ``topic`` from the beginning to ``upto`` (exclusive; None: the end)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"recovery-{topic}", "enable.auto.commit": False,
                  **kafka_config})
    try:
        tp = TopicPartition(topic, 0, OFFSET_BEGINNING)
        _, high = c.get_watermark_offsets(tp, timeout=10, cached=False)
        end = high if upto is None else min(upto, high)
        if end <= 0:
            return
        c.assign([tp])
        while True:
            m = c.poll(10.0)
            if m is None:
                raise RuntimeError(f"{topic}: no message within 10 s while replaying to offset {end}")
            if m.error():
                continue
            if m.offset() >= end:
                return
            yield dict(m.headers() or []), m.value() or b""
            if m.offset() + 1 >= end:
                return
    finally:
        c.close()
