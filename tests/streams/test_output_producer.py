"""The probe path's producer on the real broker: what flush promises, and a refusal as a clear error."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from schemas.codec import encode_buffer, headers_for
from streams.runtime.output_producer import DeliveryError, OutputProducer
from tests.conftest import read_topic

pytestmark = pytest.mark.kafka


@pytest.fixture
def topics(kafka_bootstrap: str):  # noqa: ANN201
    """Two topics of their own: ``open`` (2 partitions) and ``small`` (refuses messages over 1,000 bytes)."""
    base = f"t{uuid.uuid4().hex[:8]}."
    names = {"open": f"{base}open", "small": f"{base}small"}
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    new = [NewTopic(names["open"], 2, 1), NewTopic(names["small"], 1, 1, config={"max.message.bytes": "1000"})]
    for f in admin.create_topics(new).values():
        f.result()
    yield names
    for f in admin.delete_topics(list(names.values())).values():
        f.result()


def test_flush_returns_with_every_message_acknowledged_in_order_per_partition(kafka_bootstrap, topics):
    p = OutputProducer(kafka_bootstrap, {})
    tables = [pa.table({"seq": pa.array(range(i * 10, i * 10 + 10), pa.uint64())}) for i in range(6)]
    for i, t in enumerate(tables):  # an Arrow buffer as the value, as the worker sends its rows
        p.produce(topics["open"], encode_buffer(t), b"k", i % 2, headers_for("probe.v1"))
    p.flush()
    # flush returned: the broker holds all six, without another flush or poll
    got = read_topic(kafka_bootstrap, topics["open"], timeout=30)
    by_part = {0: [], 1: []}
    for m in got:
        by_part[m.partition()].append(pa.ipc.open_stream(m.value()).read_all()["seq"][0].as_py())
        assert dict(m.headers()) == {"schema": b"probe.v1"}
        assert m.key() == b"k"
    assert by_part == {0: [0, 20, 40], 1: [10, 30, 50]}
    p.close()


def test_a_message_the_broker_refuses_is_a_delivery_error_naming_the_topic(kafka_bootstrap, topics):
    p = OutputProducer(kafka_bootstrap, {})
    p.produce(topics["small"], b"x" * 5000, b"k")  # under the client's limit, over the topic's
    with pytest.raises(DeliveryError, match=rf"{topics['small']}\[0\]"):
        p.flush()
    p.produce(topics["small"], b"y" * 10, b"k")  # the refusal is reported once; the producer goes on
    p.flush()
    assert [m.value() for m in read_topic(kafka_bootstrap, topics["small"], timeout=30)] == [b"y" * 10]
    p.close()
