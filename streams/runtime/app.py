"""The Faust app: the whole stream topology at a glance.

    probes.raw ──rtt (N workers)──▶ probes.enriched ──▶ (sink) ClickHouse `probes`
        │                        └─▶ deadletter      ──▶ (sink) ClickHouse `deadletters`
        └─ per window: summarize(rows, paths) ──▶ window.partials (1 partition)
    paths.traced ──(mirror in every worker)──▶ PathIndex
    window.partials ──reducer (one owner)──▶ verdicts ──▶ (sink) `verdicts`, chatops
        registry, jobs.metrics ──(mirror)──▶      └───▶ coverage ──▶ (sink) `coverage`

    loopback.raw ──hostlink──▶ host_links, verdicts     (Hostping: :mod:`streams.runtime.hostping_agents`)

Analytics live in plain modules (:mod:`streams.runtime.probe_batch`, :mod:`streams.pingmesh.reducer`,
:mod:`streams.pingmesh.analyzer`); this file is plumbing only. Its configuration is the
:class:`~streams.runtime.config.RuntimeConfig` the worker was started with
(:func:`streams.runtime.worker.run_worker`): Kafka servers and security, the topic prefix,
job thresholds and the partition idle time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

import faust
import pyarrow as pa

from schemas import topics as T
from schemas.codec import encode, headers_for, schema_key_from_headers
from streams.pingmesh.links import PathIndex
from streams.pingmesh.reducer import UploadMark, WindowReducer, batch_partials, message_args
from streams.pingmesh.windows import WINDOW_NS
from streams.runtime import hostping_agents
from streams.runtime import metrics as M
from streams.runtime.config import current
from streams.runtime.deadletter import whole_message
from streams.runtime.kafka_env import App, faust_credentials, faust_delivery
from streams.runtime.probe_batch import process_probe_message
from streams.runtime.reducer_recovery import rebuild
from streams.runtime.topic_mirror import TopicMirror

log = logging.getLogger("fabricscope.app")

CONFIG = current()
# Faust creates its own datadir but not the parents: a first run on a fresh FABRICSCOPE_VAR died here.
os.makedirs(CONFIG.var_dir, mode=0o700, exist_ok=True)
BOOTSTRAP = CONFIG.bootstrap
PREFIX = CONFIG.topic_prefix
SECURITY = dict(CONFIG.kafka_client)  # librdkafka settings of the side readers (holds the SASL password)

app = App(
    f"{PREFIX}fabricscope",
    broker=[f"kafka://{b}" for b in BOOTSTRAP.split(",")],
    broker_credentials=faust_credentials(SECURITY),  # SASL/TLS: the same variables as every other client
    value_serializer="raw",
    key_serializer="raw",
    web_enabled=False,
    topic_allow_declare=False,
    topic_disable_leader=True,
    broker_session_timeout=6.0,
    broker_heartbeat_interval=1.0,
    broker_commit_every=100,
    consumer_auto_offset_reset="earliest",
    producer_max_request_size=T.MAX_MESSAGE_BYTES,
    consumer_max_fetch_size=T.MAX_MESSAGE_BYTES,
    store="memory://",
    datadir=os.path.join(CONFIG.var_dir, "faust"),
    **faust_delivery(CONFIG.acks, CONFIG.replication),  # acks=all and Faust's own topics' replicas
)
app.idempotent_producer = CONFIG.idempotence


def _topic(t: T.Topic) -> faust.TopicT:
    return app.topic(T.topic_name(t, PREFIX), value_serializer="raw", key_serializer="raw")


probes_raw = _topic(T.PROBES_RAW)
probes_enriched = _topic(T.PROBES_ENRICHED)
deadletter = _topic(T.DEADLETTER)
window_partials = _topic(T.WINDOW_PARTIALS)
verdicts = _topic(T.VERDICTS)
coverage = _topic(T.COVERAGE)
windows_closed = _topic(T.WINDOWS_CLOSED)

# Per-process state, built on first use (the worker's own side readers).
_paths: PathIndex | None = None
_paths_mirror: TopicMirror | None = None
_reducer: WindowReducer | None = None
_reducer_mirrors: list[TopicMirror] = []
_reducer_next = -1  # offset of window.partials the reducer applies next; -1: not built yet

_emitted_before: set[int] = set()  # windows.closed as read at the last rebuild: never emitted again


def _path_index() -> tuple[PathIndex, TopicMirror]:
    global _paths, _paths_mirror
    if _paths is None:
        _paths = PathIndex()
        _paths_mirror = TopicMirror(BOOTSTRAP, T.topic_name(T.PATHS_TRACED, PREFIX), _paths.update, SECURITY)
    return _paths, _paths_mirror


_rnics: set[str] = set()
_rnics_mirror: TopicMirror | None = None


def _registry_rnics() -> TopicMirror:
    """Every RNIC the registry has listed (the unknown-RNIC rule; off while the registry is empty)."""
    global _rnics_mirror
    if _rnics_mirror is None:
        def add(t: pa.Table) -> None:
            if "rnic" in t.column_names:
                _rnics.update(r for r in t["rnic"].to_pylist() if r)

        _rnics_mirror = TopicMirror(BOOTSTRAP, T.topic_name(T.REGISTRY, PREFIX), add, SECURITY)
    return _rnics_mirror


def _window_reducer() -> tuple[WindowReducer, list[TopicMirror]]:
    global _reducer
    if _reducer is None:
        raw = T.topic_name(T.PROBES_RAW, PREFIX)
        n_parts = len(_partitions_of(raw))
        _reducer = WindowReducer(partitions=n_parts, idle_s=CONFIG.partition_idle_s)
        _reducer.thresholds.update(CONFIG.job_thresholds)
        sec = SECURITY
        _reducer_mirrors.extend([
            TopicMirror(BOOTSTRAP, T.topic_name(T.REGISTRY, PREFIX), _reducer.on_registry, sec),
            TopicMirror(BOOTSTRAP, T.topic_name(T.JOB_METRICS, PREFIX), _reducer.on_job_metrics, sec),
        ])
    return _reducer, _reducer_mirrors


def _partitions_of(topic: str) -> dict:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": BOOTSTRAP, **SECURITY}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions


def _marks(enriched: pa.Table | None, headers: dict[str, bytes]) -> list[UploadMark]:
    """Upload marks of a batch: from its rows, or from the agent's headers for an idle heartbeat."""
    if enriched is not None and enriched.num_rows:
        g = enriched.group_by(["agent_id", "prober_host"]).aggregate([("upload_ns", "max")])
        return [UploadMark(a, int(u), h) for a, h, u in
                zip(g["agent_id"].to_pylist(), g["prober_host"].to_pylist(), g["upload_ns_max"].to_pylist(),
                    strict=True)]
    if "agent_id" in headers and "upload_ns" in headers:
        host = headers.get("host", b"").decode() or None
        return [UploadMark(headers["agent_id"].decode(), int(headers["upload_ns"]), host)]
    return []


def _mark_headers(m: UploadMark, ws: int | None, partition: int, offset: int) -> list[tuple[str, bytes]]:
    # src_offset: the probes.raw message the partial came from, so a batch processed again after a
    # crash (its offset not yet committed) is merged once (WindowReducer.add drops the repeat)
    return [("agent_id", m.agent_id.encode()), ("upload_ns", str(m.upload_ns).encode()),
            ("host", (m.host or "").encode()), ("window_start_ns", b"" if ws is None else str(ws).encode()),
            ("src_partition", str(partition).encode()), ("src_offset", str(offset).encode())]


@app.agent(probes_raw)
async def rtt(stream: faust.StreamT) -> None:
    """Decompose every probe batch (R-Pingmesh §4.2.1), forward it, and send its window partials.

    An unexpected error on one batch dead-letters that batch with the reason and the stream goes on
    (a crashed Faust agent stops consuming while the process stays up)."""
    async for event in stream.events():
        msg = event.message
        try:
            await _rtt_one(event)
        except Exception as err:  # noqa: BLE001 - a bug on one batch must not stop the stream
            log.exception("worker error on %s/%d/%d; batch dead-lettered", msg.topic, msg.partition, msg.offset)
            M.DEAD_LETTERS.inc()
            dead = whole_message(msg.topic, msg.partition, msg.offset,
                                 schema_key_from_headers(dict(event.headers or {})) or "",
                                 f"worker error: {type(err).__name__}: {err}", event.value or b"")
            await deadletter.send(key=msg.topic.encode(), value=encode(dead), headers=headers_for("deadletter.v1"))


async def _rtt_one(event: faust.types.EventT) -> None:
    """One probe batch: validate and decompose, forward, catch up on paths, send the window partials."""
    loop = asyncio.get_running_loop()
    msg = event.message
    headers = dict(event.headers or {})
    M.PROBE_BATCHES.inc()
    await loop.run_in_executor(None, _registry_rnics().catch_up)  # every RNIC registered before this batch
    result = process_probe_message(event.value, schema_key_from_headers(headers), msg.topic, msg.partition,
                                   msg.offset, known_rnics=_rnics or None)
    if result.enriched is not None:
        M.PROBE_ROWS.labels("ok").inc(result.enriched.num_rows)
        await probes_enriched.send(key=event.key, value=encode(result.enriched),
                                   headers=headers_for("probe_enriched.v1"))
    if result.dead is not None:
        M.PROBE_ROWS.labels("dead_letter").inc(result.dead.num_rows)
        M.DEAD_LETTERS.inc(result.dead.num_rows)
        await deadletter.send(key=msg.topic.encode(), value=encode(result.dead),
                              headers=headers_for("deadletter.v1"))
    paths, mirror = _path_index()
    await loop.run_in_executor(None, mirror.catch_up)  # every path published before this batch
    marks = _marks(result.enriched, headers)
    parts = batch_partials(result.enriched, paths, WINDOW_NS) if result.enriched is not None else {}
    for m in marks[:-1]:
        await window_partials.send(key=b"mark", value=b"", headers=_mark_headers(m, None, msg.partition, msg.offset))
    last = marks[-1] if marks else None
    for ws, blob in sorted(parts.items()):
        await window_partials.send(key=str(ws).encode(), value=blob,
                                   headers=_mark_headers(last, ws, msg.partition, msg.offset))
    if last is not None and not parts:
        await window_partials.send(key=b"mark", value=b"", headers=_mark_headers(last, None, msg.partition, msg.offset))


@app.agent(window_partials)
async def reducer(stream: faust.StreamT) -> None:
    """Merge the partials of each window once the watermark passes it; emit verdicts and coverage.

    A message that does not follow the last one applied (a (re)start, a rebalance) first rebuilds
    the reducer from the topic (:mod:`streams.runtime.reducer_recovery`)."""
    global _reducer_next
    loop = asyncio.get_running_loop()
    async for event in stream.events():
        offset = event.message.offset
        red, mirrors = _window_reducer()
        for mirror in mirrors:
            await loop.run_in_executor(None, mirror.catch_up)
        if offset != _reducer_next:
            red = _fresh_reducer()
            missed, done = await loop.run_in_executor(None, lambda r=red, o=offset: rebuild(
                r, BOOTSTRAP, T.topic_name(T.WINDOW_PARTIALS, PREFIX), T.topic_name(T.WINDOWS_CLOSED, PREFIX),
                SECURITY, o))
            _emitted_before.clear()
            _emitted_before.update(done)
            await _emit(missed)
        mark, ws, part, src = message_args(dict(event.headers or {}))
        M.AGENT_LAST_UPLOAD.labels(mark.agent_id).set(mark.upload_ns / 1e9)
        _reducer_next = offset + 1
        await _emit(red.add(mark, ws, event.value or None, part, source=src))


def _fresh_reducer() -> WindowReducer:
    """A new reducer (same mirrors, read again from their beginning) for a rebuild."""
    global _reducer
    for m in _reducer_mirrors:
        m.close()
    _reducer_mirrors.clear()
    _reducer = None
    red, mirrors = _window_reducer()
    for m in mirrors:
        m.catch_up()
    return red


@app.timer(interval=1.0)
async def close_idle_windows() -> None:
    """Close windows held only by idle partitions (processing-time idleness; see WindowReducer)."""
    if _reducer is not None and _reducer_next >= 0:
        await _emit(_reducer.close_ready())


async def _emit(results: list) -> None:
    """Verdicts and coverage of each closed window, then its ``windows.closed`` summary once the broker
    acknowledged them (the summary is the reducer's record that the window was emitted)."""
    for ws, res in results:
        if ws in _emitted_before:  # emitted before a restart (redelivered messages closed it again)
            continue
        M.WINDOWS_CLOSED.inc()
        M.WINDOW_DELAY.observe(max(0.0, (time.time_ns() - ws - WINDOW_NS) / 1e9))
        if _reducer is not None:
            M.LATE_PARTIALS.set(_reducer.late_partials)
        sent = []
        if res.verdicts.num_rows:
            for v in res.verdicts.to_pylist():  # one log line per verdict: few per window
                M.VERDICTS.labels(v["kind"]).inc()
                log.warning("verdict %s at %s (impact %s, confidence %.2f)", v["kind"], v["location"],
                            v["impact"], v["confidence"])
            sent.append(await verdicts.send(key=b"window", value=encode(res.verdicts),
                                            headers=headers_for("verdict.v1")))
        if res.coverage.num_rows:
            for c in res.coverage.select(["job_id", "links_total", "links_covered"]).to_pylist():
                M.JOB_LINKS_UNCOVERED.labels(c["job_id"]).set(c["links_total"] - c["links_covered"])
            sent.append(await coverage.send(key=b"window", value=encode(_as_coverage(res.coverage)),
                                            headers=headers_for("coverage.v1")))
        for fut in sent:
            await fut
        summary = {"window_start_ns": ws, "verdicts": res.verdicts.num_rows, **res.stats}
        # acknowledged before the next window: a reducer rebuilt elsewhere reads it and does not emit again
        await (await windows_closed.send(key=str(ws).encode(), value=json.dumps(summary).encode()))


def _as_coverage(t: pa.Table) -> pa.Table:
    from schemas.arrow_pa import arrow_schema

    schema = arrow_schema("coverage.v1")
    return pa.Table.from_arrays([t[name] for name in schema.names], schema=schema)


hostping_agents.register(app, _topic, deadletter=deadletter, verdicts=verdicts, config=CONFIG, security=SECURITY)
