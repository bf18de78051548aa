"""An agent's pinglist from the controller's compacted ``pinglists`` topic.

R-Pingmesh's controller hands every agent its pinglist (§3, §4.1). Here the controller's lists and the
closed loop's changes to them (``fabricscope pinglist loop``, :mod:`fabricscope.loop_service`) are one
``pinglist.v1`` batch per agent on the compacted ``pinglists`` topic, keyed by host
(:mod:`producers.controller_publish`). :class:`PinglistFeed` reads that topic from its first offset, so
a restarted agent gets its newest list back from compaction, and then follows it: the newest batch keyed
by this host is the list in force. It reads only the partition its host's key hashes to (CRC-32 modulo the
topic's partitions, librdkafka's default partitioner for keyed messages, which the controller's producer
uses), so an agent reads a sixteenth of the agents' lists, not all of them: at 10,000 hosts about 2.5 MB
once at start. The partition count comes from the broker's metadata, asked for at most ``METADATA_WAIT_S``
at a time until it answers, the waits between asks doubling from 1 s to ``METADATA_RETRY_S``: a broker
that is down holds the agent's loop 50 ms every 10 s.

Whoever can write to the topic chooses what the host sends, so a list is taken only within bounds
(every refusal logged with partition and offset, and counted in :class:`FeedStats`):

- a message that is not a ``pinglist.v1`` batch (schema header, Arrow IPC, columns) is unread;
- a list over ``max_entries`` entries or ``max_pps`` probes/s in all, with a rate that is not a positive
  number, with an entry of another agent, or with a destination outside ``known_ips`` (the fabric's RNIC
  addresses the agent's config lists) is refused whole, and the list in force stays;
- a fetch over ``MAX_MESSAGE_BYTES`` is not read into the agent (librdkafka's receive bound).

Kafka ACLs that let only the controller write the topic are the first line ([docs/security.md]); these
bounds are what an agent still holds to if that fails. Built on librdkafka's compiled client and
nanoarrow, as the agent's producer is (no pyarrow in the agent).
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from dataclasses import dataclass
from typing import Any

import nanoarrow as na
import nanoarrow.ipc as na_ipc

from producers.controller_publish import PINGLIST
from producers.kafka_producer import kafka_client
from schemas.arrow_nano import nano_schema
from schemas.headers import schema_key_from_headers
from schemas.topics import PINGLISTS, topic_name

log = logging.getLogger("fabricscope.agent.pinglist")

MAX_ENTRIES = 4096
"""Entries of one agent's list at most (the controller's lists at 10,000 RNICs hold a few hundred)."""
MAX_PPS = 5000.0
"""Probes/s of one agent's list in all at most (8 RNICs x 150 probes/s is 1,200, plus the loop's)."""
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""The consumer's fetch and receive bound (bytes): a larger response is not read into the agent."""
MESSAGES_PER_POLL = 256
"""Messages read per :meth:`PinglistFeed.poll` (the agent polls once a second)."""
METADATA_WAIT_S = 0.05
"""How long one ask for the topic's partition count may hold the agent's loop (s)."""
METADATA_RETRY_S = 10.0
"""Longest wait between asks while the broker has not answered (s)."""
_TYPES = {f.name: f.type for f in nano_schema(PINGLIST).fields}
_REQUIRED = frozenset(f.name for f in nano_schema(PINGLIST).fields if not f.nullable)


@dataclass
class FeedStats:
    """What the feed read: ``lists`` taken, ``unread`` messages, ``refused`` lists, ``others`` (other agents')."""

    lists: int = 0
    unread: int = 0
    refused: int = 0
    others: int = 0


def check_list(entries: list[dict[str, Any]], host: str, *, max_entries: int = MAX_ENTRIES,
               max_pps: float = MAX_PPS, known_ips: frozenset[str] = frozenset()) -> str | None:
    """Why the list ``entries`` (``pinglist.v1`` rows as dicts) is refused for agent ``host``, or None.

    ``known_ips`` empty: destinations are not checked.
    """
    if len(entries) > max_entries:
        return f"{len(entries)} entries, more than {max_entries}"
    total = 0.0
    for e in entries:
        if e.get("agent_id") != host or e.get("prober_host") != host:
            return f"an entry of agent {e.get('agent_id')!r} (prober {e.get('prober_host')!r}), not {host!r}"
        rate = e.get("rate_pps")
        if not isinstance(rate, float | int) or not math.isfinite(rate) or rate <= 0:
            return f"entry {e.get('prober_rnic')}->{e.get('dst_ip')}: rate_pps {rate!r} is not a positive number"
        if known_ips and e.get("dst_ip") not in known_ips:
            return f"destination {e.get('dst_ip')!r} is not an RNIC address of this agent's fabric"
        total += float(rate)
    if total > max_pps:
        return f"{total:,.0f} probes/s in all, more than {max_pps:,.0f}"
    return None


def decode_list(payload: bytes) -> list[dict[str, Any]]:
    """The rows of one ``pinglist.v1`` Arrow IPC batch as dicts.

    Raises:
        ValueError: not an Arrow IPC stream of one struct per row, a column of the schema of another type, or
            one that may not be null missing (extra columns are left alone: a newer controller may add some).
    """
    try:
        arr = na.Array(na_ipc.InputStream.from_readable(payload))
        rows = arr.to_pylist()
    except Exception as err:  # nanoarrow raises several types for a damaged stream
        raise ValueError(f"not an Arrow IPC batch: {err}") from err
    got = {f.name: f.type for f in arr.schema.fields} if arr.schema.n_fields else {}
    missing = sorted(n for n in _REQUIRED if n not in got)
    if missing:
        raise ValueError(f"columns missing: {', '.join(missing)}")
    wrong = sorted(n for n, t in _TYPES.items() if n in got and got[n] != t)
    if wrong:
        raise ValueError("columns of another type: " + ", ".join(f"{n} ({got[n].name}, not {_TYPES[n].name})"
                                                                  for n in wrong))
    return rows


class PinglistFeed:
    """Follows the ``pinglists`` topic for one agent; :meth:`poll` returns its newest list when one came.

    Args:
        bootstrap: Kafka bootstrap servers.
        prefix: topic name prefix.
        host: this agent's host (the topic's key).
        kafka_config: extra librdkafka settings (SASL/TLS); never logged.
        max_entries, max_pps, known_ips: the bounds of :func:`check_list`.

    Attributes:
        stats: :class:`FeedStats`.
    """

    def __init__(self, bootstrap: str, prefix: str, host: str, *, kafka_config: dict[str, str] | None = None,
                 max_entries: int = MAX_ENTRIES, max_pps: float = MAX_PPS,
                 known_ips: frozenset[str] = frozenset()) -> None:
        k = kafka_client()
        self.host = host
        self._key = host.encode()
        self.topic = topic_name(PINGLISTS, prefix)
        self.bounds = {"max_entries": max_entries, "max_pps": max_pps, "known_ips": known_ips}
        self.stats = FeedStats()
        conf = {"bootstrap.servers": bootstrap, "group.id": f"{prefix}fabricscope-agent-{host}",
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "max.partition.fetch.bytes": MAX_MESSAGE_BYTES, "fetch.max.bytes": MAX_MESSAGE_BYTES,
                "receive.message.max.bytes": MAX_MESSAGE_BYTES + 64 * 1024,
                # librdkafka prefetches up to 64 MiB and 100,000 messages a partition by default
                "queued.max.messages.kbytes": MAX_MESSAGE_BYTES // 1024 * 2, "queued.min.messages": MESSAGES_PER_POLL,
                "topic.metadata.refresh.interval.ms": 10_000}
        conf.update(kafka_config or {})
        self._consumer = k.Consumer(conf)
        self._k = k
        self.partition: int | None = None  # this host's partition, once the topic's metadata came
        self._next_ask = 0.0
        self._backoff = 1.0
        self._errors_logged = 0

    def _assign(self) -> bool:
        """Assign this host's partition from its first offset, once the broker says how many the topic has.

        Assigned, not subscribed: no consumer group to coordinate for thousands of agents, and every start
        reads the compacted partition from its first offset (the newest list of each agent is there)."""
        now = time.monotonic()
        if now < self._next_ask:
            return False
        self._next_ask = now + self._backoff
        self._backoff = min(2 * self._backoff, METADATA_RETRY_S)
        try:
            md = self._consumer.list_topics(self.topic, timeout=METADATA_WAIT_S)
        except self._k.KafkaException as err:
            self._log_error(err)
            return False
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            self._log_error(t.error if t is not None else "no such topic")
            return False
        self.partition = zlib.crc32(self._key) % len(t.partitions)
        self._consumer.assign([self._k.TopicPartition(self.topic, self.partition, self._k.OFFSET_BEGINNING)])
        log.info("following %s partition %d of %d for %s", self.topic, self.partition, len(t.partitions),
                 self.host)
        return True

    def _log_error(self, err: object) -> None:
        if self._errors_logged < 5:  # the topic not there yet, a broker gone: asked again, librdkafka retries
            self._errors_logged += 1
            log.warning("pinglists topic %s: %s", self.topic, err)

    def poll(self) -> list[dict[str, Any]] | None:
        """Read what came (without waiting); this agent's newest acceptable list, or None when none came."""
        if self.partition is None and not self._assign():
            return None
        newest = None
        for m in self._consumer.consume(MESSAGES_PER_POLL, timeout=0):
            if m.error():
                self._log_error(m.error())
                continue
            if m.key() != self._key:
                self.stats.others += 1
                continue
            where = f"{m.topic()}[{m.partition()}]@{m.offset()}"
            if schema_key_from_headers(m.headers()) != PINGLIST:
                self.stats.unread += 1
                log.warning("unread: %s is not a %s batch (schema header %r)", where, PINGLIST,
                            schema_key_from_headers(m.headers()))
                continue
            try:
                entries = decode_list(m.value() or b"")
            except ValueError as err:
                self.stats.unread += 1
                log.warning("unread: %s: %s", where, err)
                continue
            why = check_list(entries, self.host, **self.bounds)
            if why is not None:
                self.stats.refused += 1
                log.warning("refused the pinglist at %s: %s; the list in force stays", where, why)
                continue
            newest = entries
        if newest is not None:
            self.stats.lists += 1
        return newest

    def close(self) -> None:
        """Close the consumer (no offsets to commit: the next start reads from the first offset again)."""
        self._consumer.close()
