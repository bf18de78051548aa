"""Creates the topics of :mod:`schemas.topics` on a broker or cluster (idempotent) and compares them with
what exists.

Replication fits the cluster that answers: ``min(3, brokers)`` replicas and
``min.insync.replicas = max(1, replicas - 1)`` unless configured
(``KAFKA_REPLICATION_FACTOR``, ``KAFKA_MIN_INSYNC_REPLICAS``). With 3 replicas and
``acks=all`` producers, a write survives one broker lost, and the topic stays
writable while one broker is down (Kafka documentation, "Replication" and
``min.insync.replicas``).
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from schemas.topics import ALL_TOPICS, MAX_MESSAGE_BYTES, Topic, topic_name

DEFAULT_MAX_REPLICAS = 3


def replication_for(brokers: int, wanted: int | None = None) -> int:
    """Replicas per partition on a cluster of ``brokers``: ``wanted``, else ``min(3, brokers)``.

    Raises:
        ValueError: no broker, or ``wanted`` is more than the cluster has (Kafka would refuse the topic).
    """
    if brokers < 1:
        raise ValueError("the Kafka cluster reports no broker")
    if wanted is None:
        return min(DEFAULT_MAX_REPLICAS, brokers)
    if not 1 <= wanted <= brokers:
        raise ValueError(f"KAFKA_REPLICATION_FACTOR={wanted} but the cluster has {brokers} broker(s)")
    return wanted


def min_insync_for(replication: int, wanted: int | None = None) -> int:
    """``min.insync.replicas``: ``wanted``, else ``max(1, replication - 1)``.

    Raises:
        ValueError: ``wanted`` exceeds the replication (no produce with ``acks=all`` would ever succeed).
    """
    if wanted is None:
        return max(1, replication - 1)
    if not 1 <= wanted <= replication:
        raise ValueError(f"KAFKA_MIN_INSYNC_REPLICAS={wanted} must be from 1 to the replication ({replication})")
    return wanted


def cluster_replication(bootstrap: str, client_config: dict[str, str] | None = None,
                        wanted: int | None = None, timeout: float = 30.0) -> int:
    """:func:`replication_for` the cluster at ``bootstrap`` (one metadata request).

    Raises:
        ValueError: see :func:`replication_for`.
        KafkaException: the cluster did not answer within ``timeout`` s.
    """
    return replication_for(len(_admin(bootstrap, client_config).list_topics(timeout=timeout).brokers), wanted)


@dataclass(frozen=True)
class TopicPlan:
    """What a topic should look like on this cluster: partitions, replicas and its config."""

    name: str
    partitions: int
    replication: int
    config: dict[str, str]


def plan_topics(prefix: str, brokers: int, replication: int | None = None,
                min_insync: int | None = None) -> list[TopicPlan]:
    """The expected state of every registered topic under ``prefix`` on a cluster of ``brokers``.

    Raises:
        ValueError: ``replication`` or ``min_insync`` cannot fit the cluster (see :func:`replication_for`).
    """
    rf = replication_for(brokers, replication)
    isr = min_insync_for(rf, min_insync)
    return [TopicPlan(topic_name(t, prefix), t.partitions, rf, _config(t, isr)) for t in ALL_TOPICS]


def _config(t: Topic, min_insync: int) -> dict[str, str]:
    return {"max.message.bytes": str(MAX_MESSAGE_BYTES), "min.insync.replicas": str(min_insync), **t.config}


def _admin(bootstrap: str, client_config: dict[str, str] | None) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **(client_config or {})})


def create_topics(bootstrap: str, prefix: str = "", client_config: dict[str, str] | None = None,
                  timeout: float = 30.0, *, replication: int | None = None,
                  min_insync: int | None = None) -> dict[str, str]:
    """Create every registered topic (partitions, replicas, config) that does not exist yet.

    An existing topic is left as it is (``fabricscope topics --describe`` shows any drift).

    Returns:
        ``{topic: "created" | "exists"}``.

    Raises:
        ValueError: ``replication``/``min_insync`` do not fit the cluster.
        RuntimeError: the broker refused a topic for another reason, or did not answer.
    """
    admin = _admin(bootstrap, client_config)
    md = admin.list_topics(timeout=timeout)
    wanted = [
        NewTopic(p.name, num_partitions=p.partitions, replication_factor=p.replication, config=p.config)
        for p in plan_topics(prefix, len(md.brokers), replication, min_insync)
    ]
    result = {t.topic: "exists" for t in wanted if t.topic in md.topics}
    todo = [t for t in wanted if t.topic not in md.topics]
    if todo:
        for name, fut in admin.create_topics(todo, operation_timeout=timeout).items():
            try:
                fut.result()
                result[name] = "created"
            except KafkaException as err:
                if "TOPIC_ALREADY_EXISTS" in str(err):
                    result[name] = "exists"
                else:
                    raise RuntimeError(f"cannot create topic {name}: {err}") from None
    return result


@dataclass
class TopicState:
    """One topic, expected against existing. ``None`` where the topic (or that config) does not exist.

    ``under_replicated``: partitions whose in-sync replicas are fewer than their replicas;
    ``leaders``: partitions led per broker id (a broker leading none after a restart is normal until
    Kafka's preferred-leader election runs, by default within 5 minutes).
    """

    topic: str
    want_partitions: int
    want_replication: int
    want_min_insync: int
    want_retention_ms: str | None
    partitions: int | None = None
    replication: int | None = None
    min_insync: int | None = None
    retention_ms: str | None = None
    under_replicated: int = 0
    leaders: dict[int, int] | None = None

    @property
    def differences(self) -> list[str]:
        """What differs, in words (empty: as expected)."""
        if self.partitions is None:
            return ["missing"]
        out = []
        for what, have, want in (("partitions", self.partitions, self.want_partitions),
                                 ("replication", self.replication, self.want_replication),
                                 ("min.insync.replicas", self.min_insync, self.want_min_insync),
                                 ("retention.ms", self.retention_ms, self.want_retention_ms)):
            if want is not None and have != want:
                out.append(f"{what} {have} (want {want})")
        if self.under_replicated:
            out.append(f"{self.under_replicated} partition(s) under-replicated")
        return out

    def as_dict(self) -> dict:
        """JSON-ready: every field plus ``ok`` and ``differences``."""
        d = asdict(self)
        d["leaders"] = {str(k): v for k, v in (self.leaders or {}).items()}
        return {**d, "ok": not self.differences, "differences": self.differences}


def describe_topics(bootstrap: str, prefix: str = "", client_config: dict[str, str] | None = None,
                    timeout: float = 30.0, *, replication: int | None = None,
                    min_insync: int | None = None) -> tuple[int, list[TopicState]]:
    """Every registered topic: expected (for this cluster and settings) against what exists.

    Returns:
        ``(brokers, states)`` in registry order.

    Raises:
        ValueError: ``replication``/``min_insync`` do not fit the cluster.
        KafkaException: the cluster did not answer.
    """
    admin = _admin(bootstrap, client_config)
    md = admin.list_topics(timeout=timeout)
    plans = plan_topics(prefix, len(md.brokers), replication, min_insync)
    states = [TopicState(p.name, p.partitions, p.replication, int(p.config["min.insync.replicas"]),
                         p.config.get("retention.ms")) for p in plans]
    present = [s for s in states if s.topic in md.topics]
    for s in present:
        parts = md.topics[s.topic].partitions.values()
        s.partitions = len(parts)
        s.replication = min((len(p.replicas) for p in parts), default=0)
        s.under_replicated = sum(1 for p in parts if len(p.isrs) < len(p.replicas))
        s.leaders = {}
        for p in parts:
            s.leaders[p.leader] = s.leaders.get(p.leader, 0) + 1
    if present:
        futs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, s.topic) for s in present],
                                      request_timeout=timeout)
        by_name = {res.name: fut for res, fut in futs.items()}
        for s in present:
            conf = by_name[s.topic].result()
            s.min_insync = int(conf["min.insync.replicas"].value) if "min.insync.replicas" in conf else None
            s.retention_ms = conf["retention.ms"].value if "retention.ms" in conf else None
    return len(md.brokers), states


def delete_topics(bootstrap: str, prefix: str, client_config: dict[str, str] | None = None) -> None:
    """Delete the registered topics under ``prefix`` (tests clean up after themselves)."""
    if not prefix:
        raise ValueError("refusing to delete the unprefixed production topics")
    admin = _admin(bootstrap, client_config)
    futs = admin.delete_topics([topic_name(t, prefix) for t in ALL_TOPICS], operation_timeout=30)
    for fut in futs.values():
        with contextlib.suppress(KafkaException):
            fut.result()
