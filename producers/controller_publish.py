"""Publishes the controller's pinglists on their compacted topic, one ``pinglist.v1`` batch per agent.

Keyed by agent (host), so compaction keeps each agent's newest list and a restarted
agent reads its list back from the topic. Built with nanoarrow (no pyarrow here).
"""

from __future__ import annotations

from producers.kafka_producer import AgentProducer
from schemas.arrow_nano import encode_columns
from schemas.records import PINGLIST_V1
from schemas.topics import PINGLISTS, topic_name

PINGLIST = "pinglist.v1"


def pinglist_columns(host: str, entries: list[dict], now_ns: int) -> dict[str, list]:
    """``pinglist.v1`` columns of one agent's entries (dicts of :func:`producers.controller.pinglist_entry`).

    Raises:
        KeyError: an entry lacks a field of the schema (the message names it).
    """
    cols: dict[str, list] = {f.name: [] for f in PINGLIST_V1.fields}
    for e in entries:
        for name in cols:
            if name == "agent_id":
                cols[name].append(host)
            elif name == "upload_ns":
                cols[name].append(now_ns)
            elif name == "bounce_path":
                cols[name].append(e.get(name))
            else:
                cols[name].append(e[name])
    return cols


def publish_pinglists(producer: AgentProducer, prefix: str, lists_by_host: dict[str, list[dict]],
                      now_ns: int) -> int:
    """Publish every agent's list (an empty list too: it clears the agent's old one); returns entries sent."""
    topic = topic_name(PINGLISTS, prefix)
    sent = 0
    for host, entries in sorted(lists_by_host.items()):
        producer.publish(topic, encode_columns(PINGLIST, pinglist_columns(host, entries, now_ns)), PINGLIST,
                         key=host)
        sent += len(entries)
    return sent
