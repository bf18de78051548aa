"""The agent's Kafka producer: idempotent, acks=all, with a bounded local buffer.

When the broker is unreachable, batches wait locally and :meth:`AgentProducer.publish`
never blocks the prober. The bound is ``max_buffered`` batches in all: a few
(``in_flight_max``: a tenth, at most 10 000) are handed to librdkafka, which never expires
them (``message.timeout.ms`` = 0) and delivers them first when the broker is
back; the rest wait in a deque, and when that is full the oldest of them is
dropped first and counted (``stats.dropped_oldest``; logged). librdkafka's own
queue cannot drop its oldest, so it is kept small: otherwise the bound would be
twice ``max_buffered`` and the drops would fall in the middle.

A batch the broker refuses for a reason that passes (its topic does not exist yet, no
leader, too few in-sync replicas) goes back into the local buffer and is sent again
(``stats.requeued``): an agent that starts before its topics are created loses nothing.
Only a permanent refusal (too large, not authorised) counts as ``failed``.
"""

from __future__ import annotations

import collections
import importlib.machinery
import importlib.util
import logging
import sys
import time
from dataclasses import dataclass
from types import ModuleType

from schemas.headers import headers_for

log = logging.getLogger("fabricscope.agent.producer")


def kafka_client() -> ModuleType:
    """librdkafka's compiled client, ``confluent_kafka.cimpl`` (``Producer``, ``KafkaError``, ``KafkaException``),
    loaded without the rest of the ``confluent_kafka`` package when that is not imported yet.

    The package's ``__init__`` also imports its serializing producer, deserializing consumer and schema
    layers, which pull in asyncio, ssl, subprocess and inspect: about 10 MiB of RSS (6 MiB of it private)
    in every host agent, for classes a probe publisher never uses. The compiled module is the one the
    package re-exports, registered under its own name, so a later ``import confluent_kafka`` in the same
    process reuses it (the same classes). Falls back to the package import where the extension cannot be
    found on its own (another packaging of the library).
    """
    name = "confluent_kafka.cimpl"
    if name in sys.modules or "confluent_kafka" in sys.modules:
        return importlib.import_module(name)
    pkg = importlib.util.find_spec("confluent_kafka")  # finds the package without running its __init__
    spec = (importlib.machinery.PathFinder.find_spec(name, list(pkg.submodule_search_locations))
            if pkg is not None and pkg.submodule_search_locations else None)
    if spec is None or spec.loader is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        return importlib.import_module(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


_cimpl = kafka_client()
KafkaError, KafkaException, Producer = _cimpl.KafkaError, _cimpl.KafkaException, _cimpl.Producer


@dataclass
class ProducerStats:
    """Counters: batches published, delivered, refused for good (``failed``), put back in the buffer after a
    passing refusal (``requeued``), and dropped from the local buffer."""

    published: int = 0
    delivered: int = 0
    failed: int = 0
    requeued: int = 0
    dropped_oldest: int = 0


# (topic, payload, key, schema key, extra headers): one batch as published
_Batch = tuple[str, bytes, bytes | None, str, list[tuple[str, bytes]]]

# Refusals that pass: the topic is being created (auto-creation is off) or the cluster is electing.
_PASSING = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
                      KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                      KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                      KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT})


class AgentProducer:
    """Publishes Arrow IPC batches (bytes) to Kafka with the schema key in the headers.

    Args:
        bootstrap: ``host:port[,host:port]``.
        max_buffered: batches kept locally while the broker is unreachable (oldest dropped first).
        kafka_config: extra librdkafka settings (SASL/TLS); never logged.
    """

    def __init__(self, bootstrap: str, max_buffered: int = 1000, kafka_config: dict[str, str] | None = None):
        conf = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "message.max.bytes": 16 * 1024 * 1024,
            "queue.buffering.max.messages": max(1, min(10_000, max_buffered // 10)),
            "message.timeout.ms": 0,  # never expire a queued batch: the buffer bound drops the oldest instead
        }
        conf.update(kafka_config or {})
        self._producer = Producer(conf)
        self._backlog: collections.deque[_Batch] = collections.deque()
        self.max_buffered = max_buffered
        self.in_flight_max = int(conf["queue.buffering.max.messages"])
        self.stats = ProducerStats()

    def _on_delivery(self, err: KafkaError | None, entry: _Batch) -> None:
        if err is None:
            self.stats.delivered += 1
        elif err.code() in _PASSING or err.retriable():
            # back to the front of the local buffer (it was the oldest in flight), as it was published (the
            # delivery report does not carry the headers); sent again by the next publish or flush, under
            # the same bound
            self.stats.requeued += 1
            if self.stats.requeued % 100 == 1:
                log.warning("batch refused by the broker (%s): kept and sent again (%d so far)", err,
                            self.stats.requeued)
            self._backlog.appendleft(entry)
            self.stats.published -= 1
        else:
            self.stats.failed += 1
            log.error("batch delivery failed: %s", err)

    def publish(
        self,
        topic: str,
        payload: bytes,
        schema_key: str,
        key: str | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Queue one batch; never blocks. Serves the delivery callbacks of earlier batches.

        ``headers`` are added to the schema header (e.g. an idle upload's ``agent_id``/``upload_ns``).
        """
        self._backlog.append((topic, payload, key.encode() if key else None, schema_key, headers or []))
        while self._backlog and len(self._backlog) + len(self._producer) > self.max_buffered:
            self._backlog.popleft()
            self.stats.dropped_oldest += 1
            if self.stats.dropped_oldest % 100 == 1:
                log.warning("broker unreachable and %d batches buffered: dropped the oldest (%d dropped so far)",
                            self.max_buffered, self.stats.dropped_oldest)
        self._drain()
        self._producer.poll(0)

    def _drain(self) -> None:
        while self._backlog:
            entry = self._backlog[0]
            topic, payload, key, schema_key, extra = entry
            try:
                self._producer.produce(topic, payload, key=key, headers=headers_for(schema_key) + extra,
                                       on_delivery=lambda err, _msg, e=entry: self._on_delivery(err, e))
            except BufferError:
                return  # librdkafka's queue is full: keep the rest in our bounded backlog
            except KafkaException as err:
                log.error("produce to %s failed: %s", topic, err)
                return
            self._backlog.popleft()
            self.stats.published += 1

    def flush(self, timeout: float = 30.0) -> int:
        """Send everything queued, the local backlog too; returns the number of batches still undelivered.

        Blocks up to ``timeout`` seconds (agents call it only at exit).
        """
        deadline = time.monotonic() + timeout
        while True:
            self._drain()
            left = max(0.0, deadline - time.monotonic())
            # with a backlog, flush in short steps so it moves into librdkafka as the queue empties
            pending = self._producer.flush(min(left, 0.5) if self._backlog else left)
            if (pending == 0 and not self._backlog) or time.monotonic() >= deadline:
                return pending + len(self._backlog)

    def close(self, timeout: float = 0.0) -> int:
        """Stop: deliver what can be delivered within ``timeout`` s, discard the rest (counted, logged).

        Returns the number of batches discarded. Without it a producer whose broker is gone keeps
        reconnecting for as long as the process lives.
        """
        left = self.flush(timeout) if timeout > 0 else len(self._producer) + len(self._backlog)
        if left:
            log.warning("closing with %d batches undelivered: discarded", left)
            self._backlog.clear()
            self._producer.purge()
            self._producer.poll(0)
        return left
