"""The Faust app: the whole stream topology at a glance.

    probes.raw ──rtt (N workers, a step of many messages)──▶ deadletter ──▶ (sink) `deadletters`
        │   └─ per step: one message (partials per window, marks, raw offset ranges) ──▶ window.partials (1 partition)
        └──(sink, a consumer group of its own: each probe crosses Kafka once)──▶ `probes`, `probes_1m`, hourly tiers
    paths.traced ──(mirror in every worker)──▶ PathIndex (bounded)
    window.partials ──reducer (one owner)──▶ verdicts ──▶ (sink) `verdicts`, chatops
        registry, jobs.metrics ──(mirror)──▶      └───▶ coverage ──▶ (sink) `coverage`
                                                  └───▶ latency.baselines ──(sink)──▶ raw retention

    loopback.raw ──hostlink──▶ host_links, verdicts     (Hostping: :mod:`streams.runtime.hostping_agents`)

Processes (``fabricscope worker --role``): ``all`` runs everything above in one consumer group;
``stream`` the probe path and Hostping; ``reducer`` the window reducer alone, in a consumer group of
its own (``<prefix>fabricscope-reducer``), so a worker step never holds the reducer's GIL or core
and a rebalance of the workers never pauses it. ``fabricscope up`` runs N ``stream`` workers and one
``reducer``. Inside the reducer process the merge and the close run on one thread of their own
(:attr:`StreamApp.reducer_thread`), not on the event loop, so a long close does not stall heartbeats.

Analytics live in plain modules (:mod:`streams.runtime.probe_step`, :mod:`streams.pingmesh.reducer`,
:mod:`streams.pingmesh.analyzer`); this file is plumbing only. Importing it reads nothing and builds
nothing: :func:`build_app` makes the app of one worker process from the
:class:`~streams.runtime.config.RuntimeConfig` it was started with (:func:`streams.runtime.worker.run_worker`):
Kafka servers and security, the topic prefix, the role, job thresholds and the partition idle time.
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
from schemas.codec import encode, headers_for, schema_key_from_headers
from schemas.deadletter import whole_message
from schemas.probe_rows.baselines import snapshot_messages
from schemas.probe_rows.retention import RetentionPolicy
from schemas.topic_mirror import PATHS_COALESCE_ROWS, TopicMirror, registry_rnics_mirror
from streams.pingmesh.path_index import PathIndex
from streams.pingmesh.reducer import StepFormatError, WindowReducer
from streams.pingmesh.step_message import encode_step
from streams.pingmesh.windows import WINDOW_NS
from streams.runtime import hostping_agents
from streams.runtime import metrics as M
from streams.runtime.bounded_stop import BoundedStopWorker
from streams.runtime.config import RuntimeConfig
from streams.runtime.emitted_input import CLOCK_SKEW_MS, EmittedOffsets, read_emitted
from streams.runtime.kafka_env import App, faust_credentials, faust_delivery
from streams.runtime.output_producer import OutputProducer
from streams.runtime.probe_step import RawMessage, StepOutput, process_step, reducer_step
from streams.runtime.reducer_recovery import rebuild

log = logging.getLogger("fabricscope.app")

LAG_TICK_S = 0.1
"""The sleep whose late wake-up measures the event loop's lag (s)."""


def build_app(config: RuntimeConfig) -> StreamApp:
    """The Faust app of one worker process, built from ``config``: its topics, the agents and timers of
    ``config.role``, and the (empty) state its side readers fill on first use.

    Creates ``config.var_dir`` (mode 0700) if missing: Faust creates its datadir, ``<var_dir>/faust``, but
    not the parents. Connects to nothing; the worker connects when it starts
    (:func:`streams.runtime.worker.run_worker`).
    """
    return StreamApp(config)


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


def _rss_mib() -> float:
    """This process's resident set now (MiB), from ``/proc/self/statm``."""
    with open("/proc/self/statm") as f:
        return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def _peak_rss_mib() -> float:
    """This process's peak resident set (MiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _as_coverage(t: pa.Table) -> pa.Table:
    from schemas.arrow_pa import arrow_schema

    schema = arrow_schema("coverage.v1")
    return pa.Table.from_arrays([t[name] for name in schema.names], schema=schema)


class StreamApp:
    """One worker process's Faust app (:attr:`app`), its topics, and the state of its side readers.

    Built by :func:`build_app`. The side readers (registry RNICs, the path index, the reducer and its
    mirrors, the latency baselines, the probe path's producer) are built on first use, in the worker.

    Attributes:
        config: what the worker was started with.
        app: the Faust app; its id is ``<prefix>fabricscope``, or ``<prefix>fabricscope-reducer`` for a
            reducer of its own (a consumer group of its own: only window.partials, never paused by a
            rebalance of the workers' group, and never splitting partitions with workers of other roles).
        runs_stream: the probe path (rtt) and Hostping run here (roles ``all`` and ``stream``).
        runs_reducer: the window reducer runs here (roles ``all`` and ``reducer``).
        reducer_thread: the one thread every use of the reducer's state runs on (mirror catch-up, rebuild,
            receive, the idle close), in order: off the event loop (a close of seconds would stall heartbeats
            and sends), never two at once.
        loop_lag_max_s: the worst event-loop lag seen so far (s).
    """

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        # Faust creates its own datadir but not the parents: a first run on a fresh FABRICSCOPE_VAR died here.
        os.makedirs(config.var_dir, mode=0o700, exist_ok=True)
        self.bootstrap = config.bootstrap
        self.prefix = config.topic_prefix
        self.security = dict(config.kafka_client)  # librdkafka settings of the side readers (holds the SASL password)
        self.runs_stream = config.role in ("all", "stream")
        self.runs_reducer = config.role in ("all", "reducer")
        app_id = f"{self.prefix}fabricscope-reducer" if config.role == "reducer" else f"{self.prefix}fabricscope"
        self.app = app = App(
            app_id,
            broker=[f"kafka://{b}" for b in self.bootstrap.split(",")],
            broker_credentials=faust_credentials(self.security),  # SASL/TLS: the same variables as every other client
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
            stream_buffer_maxsize=config.stream_buffer_messages,  # bounds the backlog a catching-up worker holds
            store="memory://",
            datadir=os.path.join(config.var_dir, "faust"),
            Worker=BoundedStopWorker,  # a stop that hangs ends the process within seconds
            **faust_delivery(config.acks, config.replication),  # acks=all and Faust's own topics' replicas
        )
        app.idempotent_producer = config.idempotence

        self.probes_raw = self._topic(T.PROBES_RAW)
        self.deadletter = self._topic(T.DEADLETTER)
        self.window_partials = self._topic(T.WINDOW_PARTIALS)
        self.verdicts = self._topic(T.VERDICTS)
        self.coverage = self._topic(T.COVERAGE)
        self.windows_closed = self._topic(T.WINDOWS_CLOSED)
        self.latency_baselines = self._topic(T.LATENCY_BASELINES)
        # The probe path sends to these through its own producer (streams.runtime.output_producer), not Faust's.
        self._window_partials = T.topic_name(T.WINDOW_PARTIALS, self.prefix)
        self._deadletter = T.topic_name(T.DEADLETTER, self.prefix)

        # Per-process state, built on first use (the worker's own side readers).
        self._paths: PathIndex | None = None
        self._paths_mirror: TopicMirror | None = None
        self._rnics: set[str] = set()
        self._rnics_mirror: TopicMirror | None = None
        self._reducer: WindowReducer | None = None
        self._reducer_mirrors: list[TopicMirror] = []
        self._reducer_next = -1  # offset of window.partials the reducer applies next; -1: not built yet
        self._emitted_before: set[int] = set()  # windows.closed as read at the last rebuild: never emitted again
        self._consumed_ns = 0  # wall time the reducer took its last message (or idleness tick): when a watermark passed
        self._spent: dict[str, int] = {}  # the reducer thread on that message (merge, close, analysis): see _timed
        self.reducer_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="reducer")
        self._emitted = EmittedOffsets()  # per raw partition: next offset expected, highest offset sent to the reducer
        self._output: OutputProducer | None = None
        self.loop_lag_max_s = 0.0

        app.on_partitions_revoked.connect(self._forget_revoked)
        app.task(self.event_loop_lag)
        if self.runs_stream:
            app.agent(self.probes_raw, name=f"{__name__}.rtt")(self.rtt)
            hostping_agents.register(app, self._topic, deadletter=self.deadletter, verdicts=self.verdicts,
                                     config=config, security=self.security)
        if self.runs_reducer:
            app.agent(self.window_partials, name=f"{__name__}.reducer")(self.reducer)
            app.timer(interval=1.0)(self.close_idle_windows)

    def _topic(self, t: T.Topic) -> faust.TopicT:
        return self.app.topic(T.topic_name(t, self.prefix), value_serializer="raw", key_serializer="raw")

    async def _on_reducer_thread(self, fn, *args):  # noqa: ANN001, ANN002, ANN202 - any callable and its result
        """Run ``fn(*args)`` on the reducer's thread; returns its result."""
        return await asyncio.get_running_loop().run_in_executor(self.reducer_thread, fn, *args)

    def _path_index(self) -> tuple[PathIndex, TopicMirror]:
        if self._paths is None or self._paths_mirror is None:
            index = PathIndex()
            # many path messages per update call: a worker starting on a 10,000-RNIC fabric catches up on
            # thousands of them, and the index's cost per call (its id tables) would dominate (BENCHMARKS.md §4)
            self._paths_mirror = TopicMirror(self.bootstrap, T.topic_name(T.PATHS_TRACED, self.prefix), index.update,
                                             self.security, coalesce_rows=PATHS_COALESCE_ROWS)
            self._paths = index  # set once its mirror exists: a failed start is retried whole on the next call
        return self._paths, self._paths_mirror

    def warm_side_inputs(self) -> None:
        """Catch a stream worker's side inputs (registry RNICs, the path index and its links) up before it joins
        the consumer group. Done in the first step instead, a worker holds its partitions while it reads every
        path of the fabric, and a worker joining meanwhile (a restart, ``up`` starting N) waits in the
        rebalance for that whole step. A broker that is not there yet only defers it to the first step."""
        if not self.runs_stream:
            return
        try:
            self._registry_rnics().catch_up()
            paths, mirror = self._path_index()
            n = mirror.catch_up()
            paths.hop_links()  # the links of every hop string: computed once here, not in the first step
            log.info("side inputs caught up before joining: %d path messages, %d paths", n, len(paths))
        except Exception:  # noqa: BLE001 - the first step catches up anyway
            log.exception("side inputs not caught up before joining; the first step will")

    def _registry_rnics(self) -> TopicMirror:
        """Every RNIC the registry has listed (the unknown-RNIC rule; off while the registry is empty)."""
        if self._rnics_mirror is None:
            self._rnics_mirror = registry_rnics_mirror(self.bootstrap, T.topic_name(T.REGISTRY, self.prefix),
                                                       self._rnics, self.security)
        return self._rnics_mirror

    def _window_reducer(self) -> tuple[WindowReducer, list[TopicMirror]]:
        if self._reducer is None:
            raw = T.topic_name(T.PROBES_RAW, self.prefix)
            n_parts = len(self._partitions_of(raw))
            self._reducer = red = WindowReducer(partitions=n_parts, idle_s=self.config.partition_idle_s)
            red.thresholds.update(self.config.job_thresholds)
            sec = self.security
            self._reducer_mirrors.extend([
                TopicMirror(self.bootstrap, T.topic_name(T.REGISTRY, self.prefix), red.on_registry, sec),
                TopicMirror(self.bootstrap, T.topic_name(T.JOB_METRICS, self.prefix), red.on_job_metrics, sec),
            ])
        return self._reducer, self._reducer_mirrors

    def _partitions_of(self, topic: str) -> dict:
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": self.bootstrap, **self.security}).list_topics(topic, timeout=10)
        return md.topics[topic].partitions

    def _retention(self) -> RetentionPolicy:
        """The raw retention policy (FABRICSCOPE_RAW_RETENTION, _SAMPLE, _SAMPLE_SEED)."""
        return self.config.retention

    async def rtt(self, stream: faust.StreamT) -> None:
        """Decompose probe batches (R-Pingmesh §4.2.1) a step of many messages at a time; send the step's window
        partials to the reducer and its bad rows to the dead-letter topic (the store writer reads the raw
        uploads itself, in its own consumer group).

        A step is up to ``FABRICSCOPE_STEP_MESSAGES`` messages or what arrived within ``FABRICSCOPE_STEP_S``
        seconds; Faust acks (and later commits) them after the broker acknowledged the step's sends (the step
        waits for them, :meth:`_send_outputs`). An unexpected error in a step
        retries its messages one at a time, so only the message that fails is dead-lettered (a crashed Faust
        agent stops consuming while the process stays up)."""
        async for events in stream.take_events(self.config.step_messages, within=self.config.step_s):
            try:
                await self._rtt_step(events)
            except Exception:  # noqa: BLE001 - a bug on one batch must not stop the stream
                log.exception("worker error in a step of %d messages; retrying them one at a time", len(events))
                for event in events:
                    await self._rtt_alone(event)

    async def _rtt_alone(self, event: faust.types.EventT) -> None:
        msg = event.message
        try:
            await self._rtt_step([event])
        except Exception as err:  # noqa: BLE001
            log.exception("worker error on %s/%d/%d; batch dead-lettered", msg.topic, msg.partition, msg.offset)
            M.DEAD_LETTERS.inc()
            dead = whole_message(msg.topic, msg.partition, msg.offset,
                                 schema_key_from_headers(dict(event.headers or {})) or "",
                                 f"worker error: {type(err).__name__}: {err}", event.value or b"")
            producer = self._output_producer()
            producer.produce(self._deadletter, encode(dead), msg.topic.encode(), headers=headers_for("deadletter.v1"))
            await asyncio.get_running_loop().run_in_executor(None, producer.flush)
            self._emitted.processed([RawMessage(b"", None, msg.topic, msg.partition, msg.offset)], {})

    async def _forget_revoked(self, sender: faust.App, revoked: set, **_: object) -> None:
        """A revoked raw partition may be advanced by another worker: look at the topic when it comes back."""
        raw = T.topic_name(T.PROBES_RAW, self.prefix)
        self._emitted.forget(tp.partition for tp in revoked if tp.topic == raw)

    async def _learn_emitted(self, events: list[faust.types.EventT], raw: list[RawMessage]) -> None:
        """Where the step resumes a raw partition (start, rebalance), learn from ``window.partials`` which of its
        offsets a step already carried (:mod:`streams.runtime.emitted_input`). Retries while the broker is away:
        a step sent without knowing could overlap one already merged."""
        resume = self._emitted.resumed(raw)
        if not resume:
            return
        stamps = [e.message.timestamp for e in events if e.message.partition in resume and e.message.timestamp]
        not_before = int(min(stamps) * 1000) - CLOCK_SKEW_MS if stamps else None
        topic = T.topic_name(T.WINDOW_PARTIALS, self.prefix)
        loop, delay = asyncio.get_running_loop(), 0.5
        while True:
            try:
                found = await loop.run_in_executor(None, read_emitted, self.bootstrap, topic, self.security, resume,
                                                   not_before)
                break
            except Exception:  # noqa: BLE001 - the broker is needed for the step's sends anyway: wait for it
                log.exception("reading the tail of %s failed; retrying in %.1f s", topic, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
        self._emitted.learn(found)
        for p, r in sorted(resume.items()):
            if found.get(p, -1) >= r:
                log.warning("probes.raw partition %d resumes at offset %d; steps up to offset %d already reached "
                            "the reducer: their rows go to the store again (deduplicated), their partials do not",
                            p, r, found[p])

    async def _rtt_step(self, events: list[faust.types.EventT]) -> None:
        """One step: catch up on the registry and paths, analyse off the event loop, then send in input order
        and wait for the broker's acknowledgements."""
        loop = asyncio.get_running_loop()
        M.PROBE_BATCHES.inc(len(events))
        await loop.run_in_executor(None, self._registry_rnics().catch_up)  # every RNIC registered before this step
        paths, mirror = self._path_index()
        await loop.run_in_executor(None, mirror.catch_up)  # every path published before this step
        raw = [RawMessage(e.value or b"", schema_key_from_headers(dict(e.headers or {})), e.message.topic,
                          e.message.partition, e.message.offset, dict(e.headers or {})) for e in events]
        await self._learn_emitted(events, raw)
        # CPU work in a thread: pyarrow and numpy release the GIL, so heartbeats and commits keep running
        out = await loop.run_in_executor(None, process_step, raw, paths, WINDOW_NS, self._rnics or None,
                                         dict(self._emitted.emitted))
        keys = [(e.key, e.message.topic, e.message.partition) for e in events]
        # off the event loop: encoding ~1 MB per message and waiting for the broker's acknowledgements
        await loop.run_in_executor(None, self._send_outputs, self._output_producer(), keys, out)
        self._emitted.processed(raw, out.ranges)

    def _output_producer(self) -> OutputProducer:
        """The probe path's producer (:mod:`streams.runtime.output_producer`), built on first use."""
        if self._output is None:
            cfg = self.config
            self._output = OutputProducer(self.bootstrap, self.security, cfg.acks, cfg.idempotence,
                                          T.MAX_MESSAGE_BYTES)
        return self._output

    def _send_outputs(self, producer: OutputProducer, keys: list[tuple[bytes | None, str, int]],
                      out: StepOutput) -> None:
        """A step's outputs, acknowledged by the broker when this returns: per raw message (``keys``: its key,
        topic and partition, in input order) its dead-letter rows; then the step's message to the reducer,
        only once those are acknowledged, so whatever a step in ``window.partials`` covers is fully emitted
        (docs/storage.md "Exactly-once rows").

        Raises:
            DeliveryError: the broker refused a message for good (the agent retries the step's messages alone).
        """
        for (_key, topic, _partition), mo in zip(keys, out.messages, strict=True):
            if mo.dead is not None:
                M.PROBE_ROWS.labels("dead_letter").inc(mo.dead.num_rows)
                M.DEAD_LETTERS.inc(mo.dead.num_rows)
                producer.produce(self._deadletter, encode(mo.dead), topic.encode(),
                                 headers=headers_for("deadletter.v1"))
            if mo.enriched is not None:
                M.PROBE_ROWS.labels("ok").inc(mo.enriched.num_rows)
        producer.flush()
        step = reducer_step(out)
        if step is not None:
            for headers, value in encode_step(step):  # one message, or its parts in order
                producer.produce(self._window_partials, value, b"step", headers=headers)
            producer.flush()

    async def reducer(self, stream: faust.StreamT) -> None:
        """Merge the partials of each window once the watermark passes it; emit verdicts and coverage.

        A message that does not follow the last one applied (a (re)start, a rebalance) first rebuilds
        the reducer from the topic (:mod:`streams.runtime.reducer_recovery`)."""
        async for event in stream.events():
            self._consumed_ns, self._spent = time.time_ns(), {}
            offset = event.message.offset
            red, mirrors = await self._on_reducer_thread(self._window_reducer)
            for mirror in mirrors:
                await self._on_reducer_thread(mirror.catch_up)
            if offset != self._reducer_next:
                red = await self._on_reducer_thread(self._fresh_reducer)
                missed, done = await self._on_reducer_thread(lambda r=red, o=offset: rebuild(
                    r, self.bootstrap, T.topic_name(T.WINDOW_PARTIALS, self.prefix),
                    T.topic_name(T.WINDOWS_CLOSED, self.prefix), self.security, o))
                self._emitted_before.clear()
                self._emitted_before.update(done)
                await self._emit(missed)
            self._reducer_next = offset + 1
            before = red.last_step
            try:
                results, spent = await self._on_reducer_thread(_timed, red.receive, dict(event.headers or {}),
                                                               event.value or b"")
            except StepFormatError as err:
                log.error("window.partials offset %d: %s; dead-lettered", offset, err)
                M.DEAD_LETTERS.inc()
                dead = whole_message(event.message.topic, event.message.partition, offset, "window_step.v1",
                                     str(err), event.value or b"")
                await self.deadletter.send(key=event.message.topic.encode(), value=encode(dead),
                                           headers=headers_for("deadletter.v1"))
                continue
            if red.last_step is not before and red.last_step is not None:
                for _, mark in red.last_step.marks:
                    M.AGENT_LAST_UPLOAD.labels(mark.agent_id).set(mark.upload_ns / 1e9)
            for reason, n in red.dropped_steps.items():
                M.DROPPED_STEPS.labels(reason).set(n)
            self._spent = spent
            await self._emit(results)

    def _fresh_reducer(self) -> WindowReducer:
        """A new reducer (same mirrors, read again from their beginning) for a rebuild."""
        for m in self._reducer_mirrors:
            m.close()
        self._reducer_mirrors.clear()
        self._reducer = None
        red, mirrors = self._window_reducer()
        for m in mirrors:
            m.catch_up()
        return red

    async def event_loop_lag(self) -> None:
        """Measure how late the event loop wakes a 100 ms sleep: CPU work left on the loop shows up here
        before it costs a missed heartbeat (session timeout 6 s)."""
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(LAG_TICK_S)
            lag = max(0.0, loop.time() - t0 - LAG_TICK_S)
            M.EVENT_LOOP_LAG.observe(lag)
            if lag > self.loop_lag_max_s:
                self.loop_lag_max_s = lag
                log.info("event loop lag: new maximum %.1f ms", lag * 1000)

    async def close_idle_windows(self) -> None:
        """Close windows held only by idle partitions (processing-time idleness; see WindowReducer)."""
        if self._reducer is not None and self._reducer_next >= 0:
            tick = time.time_ns()
            closed, spent = await self._on_reducer_thread(_timed, self._reducer.close_ready)
            if closed:
                self._consumed_ns, self._spent = tick, spent
            await self._emit(closed)

    async def _emit(self, results: list) -> None:
        """Verdicts and coverage of each closed window, then its ``windows.closed`` summary once the broker
        acknowledged them (the summary is the reducer's record that the window was emitted)."""
        closed_ns, passed_ns = time.time_ns(), self._consumed_ns
        spent = self._spent
        if results and self._reducer is not None and self._retention().mode == "anomalies":
            await self._publish_baselines(self._reducer.state.flow_baseline)
        for ws, res in results:
            if ws in self._emitted_before:  # emitted before a restart (redelivered messages closed it again)
                continue
            M.WINDOWS_CLOSED.inc()
            M.WINDOW_DELAY.observe(max(0.0, (time.time_ns() - ws - WINDOW_NS) / 1e9))
            if self._reducer is not None:
                M.LATE_PARTIALS.set(self._reducer.late_partials)
            sent = []
            if res.verdicts.num_rows:
                for v in res.verdicts.to_pylist():  # one log line per verdict: few per window
                    M.VERDICTS.labels(v["kind"]).inc()
                    log.warning("verdict %s at %s (impact %s, confidence %.2f)", v["kind"], v["location"],
                                v["impact"], v["confidence"])
                sent.append(await self.verdicts.send(key=b"window", value=encode(res.verdicts),
                                                     headers=headers_for("verdict.v1")))
            if res.coverage.num_rows:
                for c in res.coverage.select(["job_id", "links_total", "links_covered"]).to_pylist():
                    M.JOB_LINKS_UNCOVERED.labels(c["job_id"]).set(c["links_total"] - c["links_covered"])
                sent.append(await self.coverage.send(key=b"window", value=encode(_as_coverage(res.coverage)),
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
            await (await self.windows_closed.send(key=str(ws).encode(), value=json.dumps(summary).encode()))

    async def _publish_baselines(self, baseline: pa.Table | None) -> None:
        """The latency rule's flow baselines after a window, as one snapshot, for the workers' ``anomalies``
        retention (:mod:`schemas.probe_rows.baselines`)."""
        if baseline is None:
            return
        for headers, value in snapshot_messages(baseline, time.time_ns()):
            await self.latency_baselines.send(key=b"baseline", value=value, headers=headers)
