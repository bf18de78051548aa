"""The Faust app: the whole stream topology at a glance.

    probes.raw ──rtt──▶ probes.enriched ──▶ (sink process) ClickHouse `probes`
              └──────▶ deadletter       ──▶ (sink process) ClickHouse `deadletters`

Analytics live in plain modules (:mod:`streams.rtt`, :mod:`streams.validate`,
:mod:`streams.probe_batch`); this file is plumbing only. Configuration comes
from the environment: ``KAFKA_BOOTSTRAP`` (default 127.0.0.1:9092) and
``FABRICSCOPE_TOPIC_PREFIX`` (default empty; tests use their own).
"""

from __future__ import annotations

import os
import sys

import faust

from schemas import topics as T
from schemas.codec import encode, headers_for, schema_key_from_headers
from streams.probe_batch import process_probe_message

BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
PREFIX = os.environ.get("FABRICSCOPE_TOPIC_PREFIX", "")

app = faust.App(
    f"{PREFIX}fabricscope",
    broker=[f"kafka://{b}" for b in BOOTSTRAP.split(",")],
    value_serializer="raw",
    key_serializer="raw",
    web_enabled=False,
    topic_allow_declare=False,
    topic_disable_leader=True,
    broker_session_timeout=6.0,
    broker_heartbeat_interval=1.0,
    broker_commit_every=100,
    consumer_auto_offset_reset="earliest",
    store="memory://",
    datadir=os.path.join(os.environ.get("FABRICSCOPE_VAR", "var"), "faust"),
)

probes_raw = app.topic(T.topic_name(T.PROBES_RAW, PREFIX), value_serializer="raw", key_serializer="raw")
probes_enriched = app.topic(T.topic_name(T.PROBES_ENRICHED, PREFIX), value_serializer="raw", key_serializer="raw")
deadletter = app.topic(T.topic_name(T.DEADLETTER, PREFIX), value_serializer="raw", key_serializer="raw")


@app.agent(probes_raw)
async def rtt(stream: faust.StreamT) -> None:
    """Decompose every probe batch (R-Pingmesh §4.2.1) and forward it; bad rows to the dead-letter topic."""
    async for event in stream.events():
        msg = event.message
        result = process_probe_message(
            event.value, schema_key_from_headers(event.headers), msg.topic, msg.partition, msg.offset
        )
        if result.enriched is not None:
            await probes_enriched.send(
                key=event.key, value=encode(result.enriched), headers=headers_for("probe_enriched.v1")
            )
        if result.dead is not None:
            await deadletter.send(
                key=msg.topic.encode(), value=encode(result.dead), headers=headers_for("deadletter.v1")
            )


def run_worker(loglevel: str = "warn") -> None:
    """Run one Faust worker of this app in the foreground (more workers share the partitions)."""
    sys.argv = ["fabricscope-worker", "worker", "-l", loglevel, "--without-web"]
    app.main()
