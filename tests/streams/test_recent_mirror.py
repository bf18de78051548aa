"""RecentTopicMirror on the real broker: only the last lookback's messages, no poll timeout when idle."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from producers.hostping.sim_source import bus_util_upload, sim_host
from schemas.codec import headers_for
from schemas.recent_mirror import RecentTopicMirror

pytestmark = pytest.mark.kafka


@pytest.fixture
def topic(new_topic) -> str:  # noqa: ANN001
    return new_topic("hostmetrics.raw", partitions=2)


def test_recent_mirror_skips_old_messages_and_never_waits_on_an_idle_partition(kafka_bootstrap, topic):
    up = bus_util_upload(sim_host("upi_overload", "h1"), "a1", 1)
    prod = Producer({"bootstrap.servers": kafka_bootstrap})
    now_ms = int(time.time() * 1000)
    prod.produce(topic, up.payload, partition=0, headers=headers_for(up.schema), timestamp=now_ms - 3_600_000)
    prod.produce(topic, up.payload, partition=0, headers=headers_for(up.schema), timestamp=now_ms - 60_000)
    assert prod.flush(10) == 0

    got: list[pa.Table] = []
    m = RecentTopicMirror(kafka_bootstrap, topic, got.append, lookback_s=600)
    # A poll timeout on the empty partition would cost the whole 60 s; the bound leaves a loaded machine room.
    t0 = time.monotonic()
    assert m.catch_up(timeout=60) == 1  # the 1-minute-old reading, not the 1-hour-old one; partition 1 is empty
    assert m.catch_up(timeout=60) == 0
    assert time.monotonic() - t0 < 20
    assert got[0].num_rows == 19 and "cpu0->cpu1" in got[0]["device"].to_pylist()

    prod.produce(topic, up.payload, partition=1, headers=headers_for(up.schema), timestamp=now_ms - 30_000)
    assert prod.flush(10) == 0
    assert m.catch_up() == 1 and len(got) == 2
    # a fresh mirror with nothing recent (every message is 30 s old or older) starts at the end of every partition
    assert RecentTopicMirror(kafka_bootstrap, topic, got.append, lookback_s=10).catch_up() == 0
    assert RecentTopicMirror(kafka_bootstrap, topic, got.append, lookback_s=7200).catch_up() == 3
    m.close()
