"""TopicMirror on the real broker: each catch-up applies what was published before it, the partitions paused
in between (the mirror resumes them for the catch-up)."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from schemas.arrow_pa import arrow_schema
from schemas.codec import encode, headers_for
from streams.runtime.topic_mirror import TopicMirror

pytestmark = pytest.mark.kafka


@pytest.fixture
def topic(kafka_bootstrap: str):  # noqa: ANN201
    name = f"t{uuid.uuid4().hex[:8]}.registry"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for f in admin.create_topics([NewTopic(name, 3, 1)]).values():
        f.result()
    yield name
    for f in admin.delete_topics([name]).values():
        f.result()


def _registry(rnics: list[str]) -> bytes:
    schema = arrow_schema("registry.v1")
    rows = {name: pa.nulls(len(rnics), schema.field(name).type) for name in schema.names}
    rows["rnic"] = pa.array(rnics, schema.field("rnic").type)
    return encode(pa.Table.from_arrays([rows[n] for n in schema.names], schema=schema))


def test_each_catch_up_applies_what_was_published_before_it(kafka_bootstrap, topic):
    seen: list[str] = []
    mirror = TopicMirror(kafka_bootstrap, topic, lambda t: seen.extend(t["rnic"].to_pylist()))
    p = Producer({"bootstrap.servers": kafka_bootstrap})

    def publish(rnics: list[str], partition: int) -> None:
        p.produce(topic, _registry(rnics), partition=partition, headers=headers_for("registry.v1"))
        p.flush(30)

    assert mirror.catch_up() == 0  # empty topic: nothing to wait for
    publish(["r1", "r2"], 0)
    publish(["r3"], 2)
    assert mirror.catch_up() == 2
    assert sorted(seen) == ["r1", "r2", "r3"]
    for round_ in range(3):  # published while the mirror is paused between calls
        publish([f"a{round_}"], 0)
        publish([f"b{round_}"], 1)
        assert mirror.catch_up() == 2
        assert sorted(seen[-2:]) == [f"a{round_}", f"b{round_}"]
    assert mirror.catch_up() == 0
    assert len(seen) == 9
    mirror.close()
