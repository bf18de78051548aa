"""The closed loop as a controller service: verdicts in, short-lived split probes out on the pinglists topic.

``fabricscope pinglist loop`` runs :class:`LoopService`. It reads the ``verdicts`` topic in a consumer group
of its own; at start it publishes every agent's list (the one agents that follow the topic, ``pinglist_topic``
in :mod:`producers.udp_agent`, start from); it turns every ``undetermined`` verdict over a group of switch
links into a probe request (:func:`streams.pingmesh.probe_requests.requests_from_verdicts`), answers it with
:class:`producers.controller_loop.SplitLoop`, and republishes the pinglist (``pinglist.v1``, compacted, keyed
by agent) of every agent whose entries changed: the controller's Eq. 1 lists plus the loop's entries in force
(Eq. 1's plus :func:`producers.controller_ident.make_identifiable`'s tuples).
Once per window it publishes an ``identifiability.v1`` row of that plan (the ``identifiability``
topic, stored in the table of that name). When a group's entries expire (two windows after the
last verdict that asked for it or named one of its links) the agents' lists are republished
without them: that is the withdrawal.

Time is the wall clock (:func:`time.time_ns`): a live pipeline's windows are wall-clock windows, so a
request's ``window_start_ns`` earlier than when its group's entries went out means the window began
without them. Verdicts of another origin (a lab, a simulator, a demo copying them) are read, counted
and left alone. Paths of candidate 5-tuples come from the ECMP model of the inventory's fabric
(:func:`producers.sim.plan.entry_links`), as in ``fabricscope pinglist explain``.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable

import pyarrow as pa
from prometheus_client import Counter

from producers import controller as ctl
from producers.controller_ident import identifiability, make_identifiable
from producers.controller_loop import WINDOW_NS, SplitLoop
from producers.controller_publish import publish_pinglists
from producers.kafka_producer import AgentProducer
from producers.sim.plan import entry_links
from producers.sim.routing import Topology
from schemas import topics as T
from schemas.arrow_nano import encode_columns
from schemas.codec import CodecError, decode, schema_key_from_headers
from schemas.inventory import Inventory
from sinks.origin import check as check_origin
from sinks.origin import from_headers as origin_from_headers
from streams.pingmesh.probe_requests import down_endpoints, named_links, requests_from_verdicts

log = logging.getLogger("fabricscope.loop")
IDENT = "identifiability.v1"

LOOP_REQUESTS = Counter("fabricscope_loop_requests_total", "probe requests the loop took, by outcome",
                        ["outcome"])
LOOP_PUBLISHED = Counter("fabricscope_loop_pinglists_published_total",
                         "agent pinglists the loop republished (added or withdrawn entries)")
LOOP_UNREAD = Counter("fabricscope_loop_unread_messages_total", "verdict messages the loop could not decode")


class LoopService:
    """Runs :class:`SplitLoop` on the ``verdicts`` topic and publishes the agents' pinglists it changes.

    Args:
        inv: the fabric.
        bootstrap: Kafka bootstrap servers.
        prefix: topic name prefix.
        seed: seeds the registry's QPNs, Eq. 1's source ports and the loop's candidate 5-tuples
            (use the controller's seed, so the base lists are the ones in force).
        group: consumer group (prefixed).
        kafka_config: extra client settings (SASL/TLS), never logged.
        origin: the origin whose verdicts the loop answers (a message without a header is this origin).
        clock: wall clock in ns (tests pass their own).
        loop: a :class:`SplitLoop` to use (default: one over ``inv`` with the documented rate limits).
        bounce: keep standing bounced probes in the plan for the groups no 5-tuple splits
            (:func:`producers.controller_ident.standing_bounces`), and answer such a group with more (default
            off: only agents that send IP-in-IP through switches that decapsulate it can, and the udp agent
            does not; it refuses them).

    Attributes:
        published: agent pinglists published so far.
        unread: verdict messages that could not be decoded (logged with topic, partition and offset).
        other_origin: verdict rows of another origin, read and left alone.
    """

    def __init__(self, inv: Inventory, bootstrap: str, prefix: str = "", *, seed: int = 0,
                 group: str = "fabricscope-loop", kafka_config: dict[str, str] | None = None,
                 origin: str = "production", clock: Callable[[], int] = time.time_ns,
                 loop: SplitLoop | None = None, bounce: bool = False) -> None:
        from confluent_kafka import Consumer

        self.origin = check_origin(origin)
        self.prefix = prefix
        self.clock = clock
        reg = ctl.Registry.from_inventory(inv, seed=seed)
        self.inv = inv
        self.base = ctl.build_pinglists(inv, reg, seed=seed, now_ns=clock())
        self.paths_of = entry_links(Topology(inv, seed))
        base_entries = [e for k in ("tor_mesh", "inter_tor", "service") for e in self.base[k]]
        # the plan in force is Eq. 1's plus the builder's tuples (every splittable link identifiable), and with
        # ``bounce`` standing bounced probes for the groups no 5-tuple splits (then every link identifiable)
        aug = make_identifiable(inv, reg, base_entries, self.paths_of, seed=seed, bounce=bounce)
        self.base["inter_tor"] = [*self.base["inter_tor"], *aug.extra, *aug.bounced]
        self._base_links = self.paths_of([e for k in ("tor_mesh", "inter_tor", "service") for e in self.base[k]])
        self.hosts = sorted(inv.hosts)
        self._base_of = {h: ctl.pinglist_for_host(self.base, h) for h in self.hosts}  # the plan never changes
        self.loop = loop or SplitLoop(inv, reg, self.paths_of, seed=seed, bounce=bounce)
        self._window = -1  # the window whose identifiability row went out last
        self.published = 0
        self.unread = 0
        self.other_origin = 0
        self._in_force: dict[str, list[dict]] = {}  # host -> loop entries last published for it
        self._undelivered: dict[str, list[dict]] | None = None  # lists published, not yet taken by the broker
        self._undelivered_all = False  # whether those are publish_all's
        conf = {"bootstrap.servers": bootstrap, "group.id": f"{prefix}{group}", "enable.auto.commit": False,
                "auto.offset.reset": "latest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
        conf.update(kafka_config or {})
        self._consumer = Consumer(conf)
        self._assigned = False
        self._consumer.subscribe([T.topic_name(T.VERDICTS, prefix)], on_assign=self._on_assign)
        self._producer = AgentProducer(bootstrap, kafka_config=kafka_config)

    def on_verdicts(self, verdicts: pa.Table, now_ns: int) -> None:
        """Feed one batch of ``verdict.v1`` rows to the loop (the RNICs and hosts judged down, then requests, then
        the links named)."""
        before = self.loop.answered, self.loop.refused
        self.loop.on_down(down_endpoints(verdicts), now_ns)
        self.loop.on_requests(requests_from_verdicts(verdicts), now_ns)
        LOOP_REQUESTS.labels("answered").inc(self.loop.answered - before[0])
        LOOP_REQUESTS.labels("refused").inc(self.loop.refused - before[1])
        self.loop.on_named(named_links(verdicts), now_ns)

    def _loop_by_host(self, now_ns: int) -> dict[str, list[dict]]:
        """The loop's entries in force at ``now_ns``, by prober host."""
        by_host: dict[str, list[dict]] = defaultdict(list)
        for e in self.loop.entries(now_ns):
            by_host[e["prober_host"]].append(e)
        return by_host

    def changed_lists(self, now_ns: int) -> dict[str, list[dict]]:
        """Every agent whose loop entries differ from the ones last published: its whole list to publish.

        A pure view of the loop's state at ``now_ns``; :meth:`publish` records what it sent."""
        by_host = self._loop_by_host(now_ns)
        out = {}
        for h in set(by_host) | set(self._in_force):
            if by_host.get(h, []) != self._in_force.get(h, []):
                out[h] = [*self._base_of.get(h, []), *by_host.get(h, [])]
        return out

    def publish(self, now_ns: int) -> int:
        """Publish the lists :meth:`changed_lists` returns and flush; returns the agents published.

        Lists the broker has not taken yet stay in the producer, which sends them until it does: they are
        waited for (:meth:`_delivered`), never published a second time."""
        if self._undelivered is not None and not self._delivered():
            return 0
        lists = self.changed_lists(now_ns)
        if not lists:
            return 0
        publish_pinglists(self._producer, self.prefix, lists, now_ns)
        self._undelivered, self._undelivered_all = lists, False
        if not self._delivered():
            return 0
        log.info("republished %d agents' pinglists: %d loop entries in force over %d groups", len(lists),
                 sum(len(v) for v in self._in_force.values()), len(self.loop.active))
        return len(lists)

    def publish_all(self, now_ns: int) -> bool:
        """Publish every agent's list in force (Eq. 1's entries, the builder's and the loop's) and flush: the
        lists that agents following the topic (``pinglist_topic``) start from. True once delivered; False when
        the broker did not take them in 2 s (call again: it waits for those, it does not publish them twice)."""
        if self._undelivered is not None:
            was_all = self._undelivered_all
            if not self._delivered():
                return False
            if was_all:
                return True
        loop_of = self._loop_by_host(now_ns)
        lists = {h: [*self._base_of.get(h, []), *loop_of.get(h, [])] for h in self.hosts}
        publish_pinglists(self._producer, self.prefix, lists, now_ns)
        self._undelivered, self._undelivered_all = lists, True
        if not self._delivered():
            return False
        log.info("published the pinglists of %d agents", len(lists))
        return True

    def _delivered(self) -> bool:
        """Wait up to 2 s (a stop request is checked between polls) for the lists last published; once the broker
        has them, they are the ones in force. False while some are still in the producer."""
        lists = self._undelivered
        if lists is None:
            return True
        if self._producer.flush(2.0):
            log.warning("pinglists of %d agents not delivered in 2 s: still queued, waited for at the next poll",
                        len(lists))
            return False
        self._undelivered = None
        for h, entries in lists.items():
            loop = entries[len(self._base_of.get(h, [])):]
            if loop:
                self._in_force[h] = loop
            else:
                self._in_force.pop(h, None)
        self.published += len(lists)
        LOOP_PUBLISHED.inc(len(lists))
        return True

    def identifiability_row(self, window_start_ns: int, now_ns: int) -> dict:
        """The ``identifiability.v1`` row of the plan in force at ``now_ns`` (Eq. 1, builder, loop)."""
        extra = self.loop.entries(now_ns)
        rep = identifiability(self.inv, [*self._base_links, *self.paths_of(extra)])
        return {"window_start_ns": window_start_ns, "links": len(rep.links), "probed_tuples": rep.entries,
                "identifiable": len(rep.identifiable), "uncovered": ",".join(rep.uncovered),
                "ambiguous_groups": ";".join("|".join(g) for g in rep.groups),
                "structural_groups": ";".join("|".join(g) for g in rep.structural),
                "loop_entries": len(extra), "emitted_ns": now_ns}

    def publish_identifiability(self, now_ns: int) -> bool:
        """Publish the row of the window ``now_ns`` falls in, once per window; True when one went out."""
        ws = now_ns // WINDOW_NS * WINDOW_NS
        if ws == self._window:
            return False
        row = self.identifiability_row(ws, now_ns)
        self._producer.publish(T.topic_name(T.IDENTIFIABILITY, self.prefix),
                               encode_columns(IDENT, {k: [v] for k, v in row.items()}), IDENT, key="fabric")
        self._window = ws
        return True

    @property
    def assigned(self) -> bool:
        """True once the consumer holds its partitions of the verdicts topic and knows where it reads from
        (a new group starts at the latest offset: verdicts published after this are read)."""
        return self._assigned

    def _on_assign(self, consumer: object, parts: list) -> None:
        # A partition this group never committed starts at its high watermark, fixed here rather than
        # resolved lazily on the first fetch, so "assigned" means verdicts from now on are read.
        from confluent_kafka import OFFSET_END, KafkaException

        try:
            committed = self._consumer.committed(parts, timeout=10)
            for tp, c in zip(parts, committed, strict=True):
                tp.offset = c.offset if c.offset >= 0 else self._consumer.get_watermark_offsets(
                    tp, timeout=10, cached=False)[1]
        except KafkaException as err:  # a topic just created has no leader yet: retried at the next poll
            log.warning("start offsets of %s unknown (%s): reading from the latest", parts, err)
            for tp in parts:
                tp.offset = OFFSET_END
            self._consumer.assign(parts)
            return
        self._consumer.assign(parts)
        self._assigned = True

    def poll_once(self, timeout: float = 0.5) -> int:
        """Consume up to 100 verdict messages, feed the loop, publish what changed; returns verdict rows read.

        Offsets are committed after the lists they changed are flushed, so a restart re-reads, never skips."""
        if not self._assigned and self._consumer.assignment():
            self._on_assign(self._consumer, self._consumer.assignment())  # start offsets unknown at assignment
        msgs = self._consumer.consume(num_messages=100, timeout=timeout)
        rows = 0
        for msg in msgs:
            if msg.error():
                continue
            try:
                _, table = decode(msg.value(), schema_key_from_headers(msg.headers()))
            except CodecError as err:
                self.unread += 1
                LOOP_UNREAD.inc()
                log.error("unread verdict message %s/%d/%d: %s", msg.topic(), msg.partition(), msg.offset(), err)
                continue
            rows += table.num_rows
            if origin_from_headers(msg.headers(), self.origin) != self.origin:
                self.other_origin += table.num_rows
                continue
            self.on_verdicts(table, self.clock())
        self.publish(self.clock())  # expiry too: a quiet topic still withdraws
        self.publish_identifiability(self.clock())
        if msgs:
            self._consumer.commit(asynchronous=False)
        return rows

    def run(self, stop: Callable[[], bool]) -> None:
        """Publish every agent's list (:meth:`publish_all`), then loop until ``stop()`` is true (checked at least
        every half second, and between tries while the broker does not take the lists)."""
        listed = False
        while not stop():
            if not listed:
                listed = self.publish_all(self.clock())
            self.poll_once()

    def close(self) -> None:
        """Leave the consumer group and flush the producer (bounded: a dead broker does not hold the stop)."""
        self._consumer.close()
        self._producer.close(timeout=1.0)
