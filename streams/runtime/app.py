"""The Faust app: the whole stream topology at a glance.

    probes.raw ──rtt (N workers, a step of many messages)──▶ probes.enriched ──▶ (sink) `probes_1m`, `probes`
        │   per raw message: minute tier + rows kept,   │                       (hourly tiers by view)
        │   to the partition of its raw partition       └─▶ deadletter ──▶ (sink) `deadletters`
        └─ per step: one message (partials per window, marks, raw offset ranges) ──▶ window.partials (1 partition)
    paths.traced ──(mirror in every worker)──▶ PathIndex (bounded)
    window.partials ──reducer (one owner)──▶ verdicts ──▶ (sink) `verdicts`, chatops
        registry, jobs.metrics ──(mirror)──▶      └───▶ coverage ──▶ (sink) `coverage`
                                                  └───▶ latency.baselines ──(mirror)──▶ raw retention

    loopback.raw ──hostlink──▶ host_links, verdicts     (Hostping: :mod:`streams.runtime.hostping_agents`)

Processes (``fabricscope worker --role``): ``all`` runs everything above in one consumer group;
``stream`` the probe path and Hostping; ``reducer`` the window reducer alone, in a consumer group of
its own (``<prefix>fabricscope-reducer``), so a worker step never holds the reducer's GIL or core
and a rebalance of the workers never pauses it. ``fabricscope up`` runs N ``stream`` workers and one
``reducer``. Inside the reducer process the merge and the close run on one thread of their own
(:data:`_REDUCER_THREAD`), not on the event loop, so a long close does not stall heartbeats.

Analytics live in plain modules (:mod:`streams.runtime.probe_step`, :mod:`streams.pingmesh.reducer`,
:mod:`streams.pingmesh.analyzer`); this file is plumbing only. Its configuration is the
:class:`~streams.runtime.config.RuntimeConfig` the worker was started with
(:func:`streams.runtime.worker.run_worker`): Kafka servers and security, the topic prefix,
job thresholds and the partition idle time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import resource
import time

import faust
import pyarrow as pa

from schemas import topics as T
from schemas.codec import encode, encode_buffer, headers_for, schema_key_from_headers
from schemas.minute_tier import MINUTE
from streams.pingmesh.path_index import PathIndex
from streams.pingmesh.reducer import StepFormatError, WindowReducer
from streams.pingmesh.retention import RetentionPolicy
from streams.pingmesh.step_message import encode_step
from streams.pingmesh.windows import WINDOW_NS
from streams.runtime import hostping_agents
from streams.runtime import metrics as M
from streams.runtime.baseline_snapshots import BaselineSnapshots, snapshot_messages
from streams.runtime.config import current
from streams.runtime.deadletter import whole_message
from streams.runtime.emitted_input import CLOCK_SKEW_MS, EmittedOffsets, read_emitted
from streams.runtime.kafka_env import App, faust_credentials, faust_delivery
from streams.runtime.output_producer import OutputProducer
from streams.runtime.probe_step import RawMessage, StepOutput, process_step, reducer_step
from streams.runtime.recent_mirror import RecentTopicMirror
from streams.runtime.reducer_recovery import rebuild
from streams.runtime.topic_mirror import PATHS_COALESCE_ROWS, TopicMirror

log = logging.getLogger("fabricscope.app")

CONFIG = current()
# Faust creates its own datadir but not the parents: a first run on a fresh FABRICSCOPE_VAR died here.
os.makedirs(CONFIG.var_dir, mode=0o700, exist_ok=True)
BOOTSTRAP = CONFIG.bootstrap
PREFIX = CONFIG.topic_prefix
SECURITY = dict(CONFIG.kafka_client)  # librdkafka settings of the side readers (holds the SASL password)
RUNS_STREAM = CONFIG.role in ("all", "stream")  # the probe path (rtt) and Hostping
RUNS_REDUCER = CONFIG.role in ("all", "reducer")
# A reducer of its own has a consumer group of its own: only window.partials, never paused by a rebalance
# of the workers' group (a worker restart), and never splitting partitions with workers of other roles.
APP_ID = f"{PREFIX}fabricscope-reducer" if CONFIG.role == "reducer" else f"{PREFIX}fabricscope"

app = App(
    APP_ID,
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
    # No CRC32C of every fetched record batch in Python (~0.1 µs per probe row of the raw uploads,
    # BENCHMARKS.md §4): the broker checks it when the batch is produced, TCP checksums the transfer, and
    # decode validates every Arrow payload in full. librdkafka's default, which every other client here keeps.
    broker_check_crcs=False,
    stream_buffer_maxsize=CONFIG.stream_buffer_messages,  # bounds the backlog a catching-up worker holds
    store="memory://",
    datadir=os.path.join(CONFIG.var_dir, "faust"),
    **faust_delivery(CONFIG.acks, CONFIG.replication),  # acks=all and Faust's own topics' replicas
)
app.idempotent_producer = CONFIG.idempotence


def _topic(t: T.Topic) -> faust.TopicT:
    return app.topic(T.topic_name(t, PREFIX), value_serializer="raw", key_serializer="raw")


probes_raw = _topic(T.PROBES_RAW)
deadletter = _topic(T.DEADLETTER)
window_partials = _topic(T.WINDOW_PARTIALS)
verdicts = _topic(T.VERDICTS)
coverage = _topic(T.COVERAGE)
windows_closed = _topic(T.WINDOWS_CLOSED)
latency_baselines = _topic(T.LATENCY_BASELINES)
# The probe path sends to these through its own producer (streams.runtime.output_producer), not Faust's.
_ENRICHED = T.topic_name(T.PROBES_ENRICHED, PREFIX)
_WINDOW_PARTIALS = T.topic_name(T.WINDOW_PARTIALS, PREFIX)
_DEADLETTER = T.topic_name(T.DEADLETTER, PREFIX)

# Per-process state, built on first use (the worker's own side readers).
_paths: PathIndex | None = None
_paths_mirror: TopicMirror | None = None
_reducer: WindowReducer | None = None
_reducer_mirrors: list[TopicMirror] = []
_reducer_next = -1  # offset of window.partials the reducer applies next; -1: not built yet

_emitted_before: set[int] = set()  # windows.closed as read at the last rebuild: never emitted again
_consumed_ns = 0  # wall time the reducer took its last message (or idleness tick): when a watermark passed
_spent: dict[str, int] = {}  # the reducer thread on that message (merge, close, analysis): see _timed
# Every use of the reducer's state (mirror catch-up, rebuild, receive, the idle close) runs on this one
# thread, in order: off the event loop (a close of seconds would stall heartbeats and sends), never two at once.
_REDUCER_THREAD = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="reducer")


async def _on_reducer_thread(fn, *args):  # noqa: ANN001, ANN002, ANN202 - any callable and its result
    """Run ``fn(*args)`` on the reducer's thread; returns its result."""
    return await asyncio.get_running_loop().run_in_executor(_REDUCER_THREAD, fn, *args)


def _schedstat() -> tuple[int, int]:
    """(ns on a CPU, ns waiting for one on a run queue) of the calling thread so far (Linux schedstat; 0s elsewhere)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            on_cpu, waiting, _ = f.read().split()
        return int(on_cpu), int(waiting)
    except (OSError, ValueError):
        return 0, 0


def _timed(fn, *args):  # noqa: ANN001, ANN002, ANN202
    """``(fn(*args), spent)``: ``spent`` holds the wall ns it started (``start_wall_ns``), the calling thread's
    CPU ns (``cpu_ns``) and its ns runnable but waiting for a core (``runqueue_ns``) meanwhile; the rest of its
    wall time it was blocked (the GIL, I/O, pyarrow's thread pool). For `bench scale`'s latency breakdown."""
    start, c0, (_, q0) = time.time_ns(), time.thread_time_ns(), _schedstat()
    out = fn(*args)
    return out, {"start_wall_ns": start, "cpu_ns": time.thread_time_ns() - c0, "runqueue_ns": _schedstat()[1] - q0}


def _path_index() -> tuple[PathIndex, TopicMirror]:
    global _paths, _paths_mirror
    if _paths is None or _paths_mirror is None:
        index = PathIndex()
        # many path messages per update call: a worker starting on a 10,000-RNIC fabric catches up on
        # thousands of them, and the index's cost per call (its id tables) would dominate (BENCHMARKS.md §4)
        _paths_mirror = TopicMirror(BOOTSTRAP, T.topic_name(T.PATHS_TRACED, PREFIX), index.update, SECURITY,
                                    coalesce_rows=PATHS_COALESCE_ROWS)
        _paths = index  # set once its mirror exists: a failed start is retried whole on the next call
    return _paths, _paths_mirror


def warm_side_inputs() -> None:
    """Catch a stream worker's side inputs (registry RNICs, the path index and its links) up before it joins
    the consumer group. Done in the first step instead, a worker holds its partitions while it reads every
    path of the fabric, and a worker joining meanwhile (a restart, ``up`` starting N) waits in the
    rebalance for that whole step. A broker that is not there yet only defers it to the first step."""
    if not RUNS_STREAM:
        return
    try:
        _registry_rnics().catch_up()
        paths, mirror = _path_index()
        n = mirror.catch_up()
        paths.hop_links()  # the links of every hop string: computed once here, not in the first step
        log.info("side inputs caught up before joining: %d path messages, %d paths", n, len(paths))
    except Exception:  # noqa: BLE001 - the first step catches up anyway
        log.exception("side inputs not caught up before joining; the first step will")


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


_baseline: pa.Table | None = None
_baseline_mirror: TopicMirror | None = None
BASELINE_LOOKBACK_S = 300.0
_baseline_snapshots = BaselineSnapshots()


def _retention() -> RetentionPolicy:
    """The raw retention policy (FABRICSCOPE_RAW_RETENTION, _SAMPLE, _SAMPLE_SEED)."""
    return CONFIG.retention


def _baselines_mirror() -> TopicMirror:
    """The reducer's per-flow latency baselines, its newest complete snapshot (``anomalies`` retention keeps
    rows over them; a flow the reducer evicted leaves with the next snapshot)."""
    global _baseline_mirror

    def take(t: pa.Table, headers: list | None) -> None:
        global _baseline
        _baseline_snapshots.apply(t, headers)
        _baseline = _baseline_snapshots.current

    if _baseline_mirror is None:
        # the reducer publishes a whole snapshot every window: the last few minutes hold a complete one
        _baseline_mirror = RecentTopicMirror(BOOTSTRAP, T.topic_name(T.LATENCY_BASELINES, PREFIX), None, SECURITY,
                                             lookback_s=BASELINE_LOOKBACK_S, apply_with_headers=take)
    return _baseline_mirror


_emitted = EmittedOffsets()  # per raw partition: next offset expected, highest offset sent to the reducer
STEP_MESSAGES = CONFIG.step_messages
STEP_S = CONFIG.step_s


async def rtt(stream: faust.StreamT) -> None:
    """Decompose probe batches (R-Pingmesh §4.2.1) a step of many messages at a time; forward the rows and
    their minute tier to the store writer, and the step's window partials to the reducer.

    A step is up to ``FABRICSCOPE_STEP_MESSAGES`` messages or what arrived within ``FABRICSCOPE_STEP_S``
    seconds; Faust acks (and later commits) them after the broker acknowledged the step's sends (the step waits
    for them, :func:`_send_outputs`). An unexpected error in a step
    retries its messages one at a time, so only the message that fails is dead-lettered (a crashed Faust
    agent stops consuming while the process stays up)."""
    async for events in stream.take_events(STEP_MESSAGES, within=STEP_S):
        try:
            await _rtt_step(events)
        except Exception:  # noqa: BLE001 - a bug on one batch must not stop the stream
            log.exception("worker error in a step of %d messages; retrying them one at a time", len(events))
            for event in events:
                await _rtt_alone(event)


async def _rtt_alone(event: faust.types.EventT) -> None:
    msg = event.message
    try:
        await _rtt_step([event])
    except Exception as err:  # noqa: BLE001
        log.exception("worker error on %s/%d/%d; batch dead-lettered", msg.topic, msg.partition, msg.offset)
        M.DEAD_LETTERS.inc()
        dead = whole_message(msg.topic, msg.partition, msg.offset,
                             schema_key_from_headers(dict(event.headers or {})) or "",
                             f"worker error: {type(err).__name__}: {err}", event.value or b"")
        producer = _output_producer()
        producer.produce(_DEADLETTER, encode(dead), msg.topic.encode(), headers=headers_for("deadletter.v1"))
        await asyncio.get_running_loop().run_in_executor(None, producer.flush)
        _emitted.processed([RawMessage(b"", None, msg.topic, msg.partition, msg.offset)], {})


@app.on_partitions_revoked.connect
async def _forget_revoked(sender: faust.App, revoked: set, **_: object) -> None:
    """A revoked raw partition may be advanced by another worker: look at the topic when it comes back."""
    raw = T.topic_name(T.PROBES_RAW, PREFIX)
    _emitted.forget(tp.partition for tp in revoked if tp.topic == raw)


async def _learn_emitted(events: list[faust.types.EventT], raw: list[RawMessage]) -> None:
    """Where the step resumes a raw partition (start, rebalance), learn from ``window.partials`` which of its
    offsets a step already carried (:mod:`streams.runtime.emitted_input`). Retries while the broker is away:
    a step sent without knowing could overlap one already merged."""
    resume = _emitted.resumed(raw)
    if not resume:
        return
    stamps = [e.message.timestamp for e in events if e.message.partition in resume and e.message.timestamp]
    not_before = int(min(stamps) * 1000) - CLOCK_SKEW_MS if stamps else None
    topic = T.topic_name(T.WINDOW_PARTIALS, PREFIX)
    loop, delay = asyncio.get_running_loop(), 0.5
    while True:
        try:
            found = await loop.run_in_executor(None, read_emitted, BOOTSTRAP, topic, SECURITY, resume, not_before)
            break
        except Exception:  # noqa: BLE001 - the broker is needed for the step's sends anyway: wait for it
            log.exception("reading the tail of %s failed; retrying in %.1f s", topic, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
    _emitted.learn(found)
    for p, r in sorted(resume.items()):
        if found.get(p, -1) >= r:
            log.warning("probes.raw partition %d resumes at offset %d; steps up to offset %d already reached the "
                        "reducer: their rows go to the store again (deduplicated), their partials do not", p, r,
                        found[p])


async def _rtt_step(events: list[faust.types.EventT]) -> None:
    """One step: catch up on the registry and paths, analyse off the event loop, then send in input order and
    wait for the broker's acknowledgements."""
    loop = asyncio.get_running_loop()
    M.PROBE_BATCHES.inc(len(events))
    await loop.run_in_executor(None, _registry_rnics().catch_up)  # every RNIC registered before this step
    paths, mirror = _path_index()
    await loop.run_in_executor(None, mirror.catch_up)  # every path published before this step
    raw = [RawMessage(e.value or b"", schema_key_from_headers(dict(e.headers or {})), e.message.topic,
                      e.message.partition, e.message.offset, dict(e.headers or {})) for e in events]
    # CPU work in a thread: pyarrow and numpy release the GIL, so heartbeats and commits keep running
    policy = _retention()
    baseline = None
    if policy.mode == "anomalies":
        await loop.run_in_executor(None, _baselines_mirror().catch_up)
        baseline = _baseline
    await _learn_emitted(events, raw)
    out = await loop.run_in_executor(None, process_step, raw, paths, WINDOW_NS, _rnics or None, policy, baseline,
                                     dict(_emitted.emitted))
    keys = [(e.key, e.message.topic, e.message.partition) for e in events]
    # off the event loop: encoding ~1 MB per message and waiting for the broker's acknowledgements
    await loop.run_in_executor(None, _send_outputs, _output_producer(), keys, out)
    _emitted.processed(raw, out.ranges)


_output: OutputProducer | None = None
_enriched_partitions: int | None = None


def _output_producer() -> OutputProducer:
    """The probe path's producer (:mod:`streams.runtime.output_producer`), built on first use."""
    global _output
    if _output is None:
        _output = OutputProducer(BOOTSTRAP, SECURITY, CONFIG.acks, CONFIG.idempotence, T.MAX_MESSAGE_BYTES)
    return _output


def _send_outputs(producer: OutputProducer, keys: list[tuple[bytes | None, str, int]], out: StepOutput) -> None:
    """A step's outputs, acknowledged by the broker when this returns: per raw message (``keys``: its key,
    topic and partition, in input order) its dead-letter rows, minute tier and stored rows; then the step's
    message to the reducer, only once all of those are acknowledged, so whatever a step in ``window.partials``
    covers is fully emitted (docs/storage.md "Exactly-once rows").

    Raises:
        DeliveryError: the broker refused a message for good (the agent retries the step's messages alone).
    """
    for (key, topic, partition), mo in zip(keys, out.messages, strict=True):
        if mo.dead is not None:
            M.PROBE_ROWS.labels("dead_letter").inc(mo.dead.num_rows)
            M.DEAD_LETTERS.inc(mo.dead.num_rows)
            producer.produce(_DEADLETTER, encode(mo.dead), topic.encode(), headers=headers_for("deadletter.v1"))
        if mo.enriched is not None:
            M.PROBE_ROWS.labels("ok").inc(mo.enriched.num_rows)
            _send_to_store(producer, key, partition, mo.stored, mo.minute)
    producer.flush()
    step = reducer_step(out)
    if step is not None:
        for headers, value in encode_step(step):  # one message, or its parts in order
            producer.produce(_WINDOW_PARTIALS, value, b"step", headers=headers)
        producer.flush()


def _send_to_store(producer: OutputProducer, key: bytes | None, raw_partition: int, enriched: pa.Table | None,
                   minute: pa.Table | None) -> None:
    """The rows of one raw message and their minute tier, to the store writer.

    Everything from one raw partition goes to one partition of ``probes.enriched``, in raw-offset order
    (the producer is idempotent, so retries keep that order): the writer drops a worker's replay by raw
    offset per raw partition (docs/storage.md "Exactly-once rows")."""
    global _enriched_partitions
    if _enriched_partitions is None:
        _enriched_partitions = len(_partitions_of(_ENRICHED))
    part = raw_partition % _enriched_partitions
    if minute is not None:
        producer.produce(_ENRICHED, encode_buffer(minute), key, part, headers_for(MINUTE))
    if enriched is not None and enriched.num_rows:
        producer.produce(_ENRICHED, encode_buffer(enriched), key, part, headers_for("probe_enriched.v1"))


async def reducer(stream: faust.StreamT) -> None:
    """Merge the partials of each window once the watermark passes it; emit verdicts and coverage.

    A message that does not follow the last one applied (a (re)start, a rebalance) first rebuilds
    the reducer from the topic (:mod:`streams.runtime.reducer_recovery`)."""
    global _reducer_next, _consumed_ns, _spent
    async for event in stream.events():
        _consumed_ns, _spent = time.time_ns(), {}
        offset = event.message.offset
        red, mirrors = await _on_reducer_thread(_window_reducer)
        for mirror in mirrors:
            await _on_reducer_thread(mirror.catch_up)
        if offset != _reducer_next:
            red = await _on_reducer_thread(_fresh_reducer)
            missed, done = await _on_reducer_thread(lambda r=red, o=offset: rebuild(
                r, BOOTSTRAP, T.topic_name(T.WINDOW_PARTIALS, PREFIX), T.topic_name(T.WINDOWS_CLOSED, PREFIX),
                SECURITY, o))
            _emitted_before.clear()
            _emitted_before.update(done)
            await _emit(missed)
        _reducer_next = offset + 1
        before = red.last_step
        try:
            results, spent = await _on_reducer_thread(_timed, red.receive, dict(event.headers or {}),
                                                      event.value or b"")
        except StepFormatError as err:
            log.error("window.partials offset %d: %s; dead-lettered", offset, err)
            M.DEAD_LETTERS.inc()
            dead = whole_message(event.message.topic, event.message.partition, offset, "window_step.v1",
                                 str(err), event.value or b"")
            await deadletter.send(key=event.message.topic.encode(), value=encode(dead),
                                  headers=headers_for("deadletter.v1"))
            continue
        if red.last_step is not before and red.last_step is not None:
            for _, mark in red.last_step.marks:
                M.AGENT_LAST_UPLOAD.labels(mark.agent_id).set(mark.upload_ns / 1e9)
        for reason, n in red.dropped_steps.items():
            M.DROPPED_STEPS.labels(reason).set(n)
        _spent = spent
        await _emit(results)


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


LAG_TICK_S = 0.1
loop_lag_max_s = 0.0  # worst lag seen; the throughput benchmark reads it from the log at exit


async def event_loop_lag() -> None:
    """Measure how late the event loop wakes a 100 ms sleep: CPU work left on the loop shows up here
    before it costs a missed heartbeat (session timeout 6 s)."""
    global loop_lag_max_s
    loop = asyncio.get_running_loop()
    while True:
        t0 = loop.time()
        await asyncio.sleep(LAG_TICK_S)
        lag = max(0.0, loop.time() - t0 - LAG_TICK_S)
        M.EVENT_LOOP_LAG.observe(lag)
        if lag > loop_lag_max_s:
            loop_lag_max_s = lag
            log.info("event loop lag: new maximum %.1f ms", lag * 1000)


async def close_idle_windows() -> None:
    """Close windows held only by idle partitions (processing-time idleness; see WindowReducer)."""
    global _consumed_ns, _spent
    if _reducer is not None and _reducer_next >= 0:
        tick = time.time_ns()
        closed, spent = await _on_reducer_thread(_timed, _reducer.close_ready)
        if closed:
            _consumed_ns, _spent = tick, spent
        await _emit(closed)


async def _emit(results: list) -> None:
    """Verdicts and coverage of each closed window, then its ``windows.closed`` summary once the broker
    acknowledged them (the summary is the reducer's record that the window was emitted)."""
    closed_ns, passed_ns = time.time_ns(), _consumed_ns
    spent = _spent
    if results and _reducer is not None and _retention().mode == "anomalies":
        await _publish_baselines(_reducer.state.flow_baseline)
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
        # wall times (ns) for `bench scale`: the watermark passed (the message that closed it was taken),
        # the window was merged and analyzed, its verdicts acknowledged; and the reducer process's memory
        summary = {"window_start_ns": ws, "verdicts": res.verdicts.num_rows, **res.stats,
                   "watermark_wall_ns": passed_ns, "closed_wall_ns": closed_ns, "sent_wall_ns": time.time_ns(),
                   "merge_start_wall_ns": spent.get("start_wall_ns", passed_ns),
                   "reducer_cpu_ms": round(spent.get("cpu_ns", 0) / 1e6, 1),
                   "reducer_runqueue_ms": round(spent.get("runqueue_ns", 0) / 1e6, 1),
                   "reducer_rss_mib": _rss_mib(), "reducer_peak_rss_mib": _peak_rss_mib()}
        # acknowledged before the next window: a reducer rebuilt elsewhere reads it and does not emit again
        await (await windows_closed.send(key=str(ws).encode(), value=json.dumps(summary).encode()))


def _rss_mib() -> float:
    """This process's resident set now (MiB), from ``/proc/self/statm``."""
    with open("/proc/self/statm") as f:
        return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def _peak_rss_mib() -> float:
    """This process's peak resident set (MiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


async def _publish_baselines(baseline: pa.Table | None) -> None:
    """The latency rule's flow baselines after a window, as one snapshot, for the workers' ``anomalies``
    retention (:mod:`streams.runtime.baseline_snapshots`)."""
    if baseline is None:
        return
    for headers, value in snapshot_messages(baseline, time.time_ns()):
        await latency_baselines.send(key=b"baseline", value=value, headers=headers)


def _as_coverage(t: pa.Table) -> pa.Table:
    from schemas.arrow_pa import arrow_schema

    schema = arrow_schema("coverage.v1")
    return pa.Table.from_arrays([t[name] for name in schema.names], schema=schema)


app.task(event_loop_lag)
if RUNS_STREAM:
    app.agent(probes_raw, name=f"{__name__}.rtt")(rtt)
    hostping_agents.register(app, _topic, deadletter=deadletter, verdicts=verdicts, config=CONFIG, security=SECURITY)
if RUNS_REDUCER:
    app.agent(window_partials, name=f"{__name__}.reducer")(reducer)
    app.timer(interval=1.0)(close_idle_windows)
