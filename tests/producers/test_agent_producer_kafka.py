"""The agent's producer on the real broker: a batch refused because its topic does not exist yet is kept and
sent again once the topic is created (topic auto-creation is off on fabricscope's brokers), never lost."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from fabricscope.kafka_admin import create_topics, delete_topics
from producers.kafka_producer import AgentProducer
from schemas import topics as T

from conftest import wait_for

pytestmark = pytest.mark.kafka


def test_batches_published_before_the_topic_exists_arrive_once_it_does(kafka_bootstrap):
    prefix = f"ap{uuid.uuid4().hex[:6]}."
    topic = T.topic_name(T.PROBES_RAW, prefix)
    # librdkafka gives up on an unknown topic after this long (30 s by default): the refusal comes quickly
    producer = AgentProducer(kafka_bootstrap, kafka_config={"topic.metadata.propagation.max.ms": "500"})
    try:
        for i in range(3):
            producer.publish(topic, f"batch {i}".encode(), "probe.v1", key="H1", headers=[("agent_id", b"H1")])
        wait_for(lambda: (producer.flush(0.2), producer.stats.requeued >= 3)[1], timeout=60,
                 what="the broker refusing the batches for an unknown topic")
        assert producer.stats.delivered == 0 and producer.stats.failed == 0
        create_topics(kafka_bootstrap, prefix)
        assert producer.flush(60) == 0
        assert producer.stats.delivered == 3 and producer.stats.failed == 0
        c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"ap-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False})
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        got: list[tuple[bytes, dict]] = []
        wait_for(lambda: (got.extend((m.value(), dict(m.headers())) for m in c.consume(10, 0.5) if not m.error()),
                          len(got) >= 3)[1], timeout=60, what="the three batches in the topic")
        c.close()
        assert sorted(v for v, _ in got) == [b"batch 0", b"batch 1", b"batch 2"]
        assert all(h["schema"] == b"probe.v1" and h["agent_id"] == b"H1" for _, h in got)  # headers kept as sent
    finally:
        producer.close()
        delete_topics(kafka_bootstrap, prefix)
