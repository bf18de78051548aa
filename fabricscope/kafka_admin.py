"""Creates the topics of :mod:`schemas.topics` on a broker (idempotent)."""

from __future__ import annotations

import contextlib

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from schemas.topics import ALL_TOPICS, MAX_MESSAGE_BYTES, topic_name


def create_topics(bootstrap: str, prefix: str = "", client_config: dict[str, str] | None = None,
                  timeout: float = 30.0) -> dict[str, str]:
    """Create every registered topic (with its partitions and config) that does not exist yet.

    Returns:
        ``{topic: "created" | "exists"}``.

    Raises:
        RuntimeError: the broker refused a topic for another reason, or did not answer.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client_config or {})})
    existing = set(admin.list_topics(timeout=timeout).topics)
    wanted = [
        NewTopic(topic_name(t, prefix), num_partitions=t.partitions, replication_factor=1,
                 config={"max.message.bytes": str(MAX_MESSAGE_BYTES), **t.config})
        for t in ALL_TOPICS
    ]
    result = {t.topic: "exists" for t in wanted if t.topic in existing}
    todo = [t for t in wanted if t.topic not in existing]
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


def delete_topics(bootstrap: str, prefix: str, client_config: dict[str, str] | None = None) -> None:
    """Delete the registered topics under ``prefix`` (tests clean up after themselves)."""
    if not prefix:
        raise ValueError("refusing to delete the unprefixed production topics")
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client_config or {})})
    futs = admin.delete_topics([topic_name(t, prefix) for t in ALL_TOPICS], operation_timeout=30)
    for fut in futs.values():
        with contextlib.suppress(KafkaException):
            fut.result()
