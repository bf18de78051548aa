"""The probe path's producer: a worker step's outputs to Kafka through librdkafka, acknowledged before the step ends.

A step of the ``rtt`` agent sends the dead-letter rows of its raw uploads, if any, then one message to
``window.partials`` (the store writer reads the raw uploads itself). Faust's
producer (aiokafka) encodes produce requests in Python: nested ``Struct.encode`` joins that copy each
message several times, then a copy into the socket buffer, all on the event loop's thread. Measured on
the same messages (``bench throughput``'s 6,000-row uploads, ``acks=all``, idempotent): aiokafka 0.54-0.58
µs of process CPU per row, librdkafka 0.16-0.21 (BENCHMARKS.md §4). Faust stays the stream runtime: it
consumes ``probes.raw``, groups the steps and commits their offsets; only these sends bypass its producer.

Faust flushes its own producer before it commits input offsets; it does not know this one. So the agent
waits on :meth:`OutputProducer.flush` at the end of every step, before Faust may ack the step's events:
an input offset is committed only after everything the step produced from it is acknowledged (docs/storage.md
"Exactly-once rows": a kill between the two only repeats dead letters the store writer keeps once, and
steps the reducer drops by raw offset).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from confluent_kafka import KafkaError, Message, Producer

log = logging.getLogger("fabricscope.output")

# librdkafka's framing on top of the largest message a topic accepts (schemas.topics.MAX_MESSAGE_BYTES)
_FRAMING_BYTES = 64 * 1024


class DeliveryError(RuntimeError):
    """A message the broker refused for good (too large, unknown topic, not authorised); ``str`` names it."""


class OutputProducer:
    """Idempotent ``acks=all`` librdkafka producer whose :meth:`flush` waits for every message produced so far.

    Args:
        bootstrap: Kafka bootstrap servers.
        security: librdkafka security settings (``security.protocol``, ``sasl.*``, ``ssl.ca.location``).
        acks: ``"all"``, ``"1"`` or ``"0"`` (``KAFKA_ACKS``).
        idempotence: idempotent produce (``KAFKA_IDEMPOTENCE``; only with ``acks="all"``): a retry after a
            leader change does not write a message twice, and order per partition holds.
        max_message_bytes: the largest message (value, key and headers) it must pass.

    A message is retried until the broker takes it (``message.timeout.ms`` 0: no expiry), so a broker restart
    stalls :meth:`flush` (and so the step) until the broker is back, as Faust's producer would; it never
    drops a step's rows. Not thread-safe beyond librdkafka's own guarantees: one caller produces at a time.
    """

    def __init__(self, bootstrap: str, security: Mapping[str, str], acks: str = "all", idempotence: bool = True,
                 max_message_bytes: int = 16 * 1024 * 1024) -> None:
        idempotent = idempotence and acks == "all"
        self._p = Producer({
            "bootstrap.servers": bootstrap,
            **security,
            "acks": acks,
            "enable.idempotence": idempotent,
            # without idempotence a retried request could overtake the next one: one at a time keeps the
            # per-partition order the store writer's replay check relies on (as aiokafka's producer did)
            **({} if idempotent else {"max.in.flight.requests.per.connection": 1}),
            "message.timeout.ms": 0,
            "message.max.bytes": max_message_bytes + _FRAMING_BYTES,
            "linger.ms": 2,  # a step produces its messages at once; flush sends what is queued anyway
            "compression.type": "none",  # Arrow IPC of the step's rows: lz4 would cost the worker more than it saves
        })
        self._lock = threading.Lock()
        self._failed: list[str] = []

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            with self._lock:
                self._failed.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def produce(self, topic: str, value: bytes | object, key: bytes | None = None, partition: int | None = None,
                headers: list[tuple[str, bytes]] | Mapping[str, bytes] | None = None) -> None:
        """Queue one message (``value``: bytes or any read-only buffer, e.g. a ``pyarrow.Buffer``, not copied
        again in Python). Waits for room while librdkafka's local queue is full.

        Raises:
            KafkaException: librdkafka rejected the message at once (e.g. over ``max_message_bytes``).
        """
        kw = {} if partition is None else {"partition": partition}
        headers = list(headers.items()) if isinstance(headers, Mapping) else headers
        while True:
            try:
                self._p.produce(topic, value, key, headers=headers, on_delivery=self._on_delivery, **kw)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self._p.poll(0.1)

    def flush(self, log_every_s: float = 30.0) -> None:
        """Block until the broker acknowledged every message produced so far (for ever while it is away).

        Raises:
            DeliveryError: the broker refused a message for good; the message names each (topic[partition]: why).
        """
        while (left := self._p.flush(log_every_s)) > 0:
            log.warning("%d messages not yet acknowledged by the broker after %.0f s; still waiting", left, log_every_s)
        with self._lock:
            failed, self._failed = self._failed, []
        if failed:
            raise DeliveryError(f"{len(failed)} messages refused by the broker: " + "; ".join(failed[:5]))

    def close(self) -> None:
        """Send what is queued (up to 10 s) and let the client go."""
        self._p.flush(10)
