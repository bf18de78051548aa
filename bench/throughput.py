"""`fabricscope bench throughput`: the same probe batches through three paths, in one run.

(a) a bare Kafka consumer that only deserialises (the raw limit of the bus + codec),
(b) the Faust worker + store writer into the embedded ClickHouse (the pipeline),
(c) a bare chdb insert of the same rows into ``probes`` (no views) in 500,000-row blocks.
Prints rows/s of each, CPU time per row of the worker processes, the store writer, the broker
and the bare insert (the figure to trust on a shared machine), the ratios, peak RSS per
process and the worker's event-loop lag (from its Prometheus histogram).

How each side is timed (both sides of b/c the same way):

- rows/s of (b) is the measured rows over the span from the first measured row published to the last
  block the store writer committed (:func:`pipeline_span`: the workers' output so far is read before
  anything is published); (c)'s from its first insert to its last block stored; (b')'s from the first
  message read to the last block stored. Merges the engine ran inside a span count; the merges still
  running at its end do not.
- CPU per row on every side runs on until the merges the rows set off are done (no merge in two polls
  0.5 s apart, :func:`_wait_merges`); no side runs ``OPTIMIZE``.
- (a) reads a backlog published before it starts: the bus and codec's limit, not the same conditions.
"""

from __future__ import annotations

import resource
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from confluent_kafka import Consumer

from schemas.codec import decode, encode


@dataclass
class ThroughputResult:
    """Rows/s and CPU µs per row of each path, peak RSS per process (MiB), the worker's event-loop lag.

    ``worker_cpu_us_per_row`` is the stream workers' CPU from the first row published to the last block stored
    (and merged), divided by the rows: it includes what they burn while idle over that wall time (Faust's
    timers, heartbeats, fetch requests), ``worker_idle_cpu_ms_s`` per second as measured just before the run
    (ms of CPU per s, all stream workers). ``reducer_cpu_us_per_row``: the reducer's process (``--role
    reducer``) over the same span. ``pipeline_span_s``: (b)'s span, first row published to last block
    committed; ``first_output_s``: seconds into it of the first poll after the publish (a clock started there
    would leave the publish out and overstate (b)'s rows/s)."""

    rows: int
    workers: int
    bare_consumer_rows_s: float
    pipeline_rows_s: float
    bare_insert_rows_s: float
    worker_cpu_us_per_row: float
    sink_cpu_us_per_row: float
    bare_insert_cpu_us_per_row: float
    broker_cpu_us_per_row: float
    peak_rss_mib: dict[str, float]
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    minute_rows_per_probe: float
    sink_backlog_rows_s: float
    sink_backlog_cpu_us_per_row: float
    sink_merge_cpu_us_per_row: float = float("nan")
    sink_merged_parts: int = -1
    reducer_cpu_us_per_row: float = float("nan")
    worker_idle_cpu_ms_s: float = float("nan")
    pipeline_span_s: float = float("nan")
    first_output_s: float = float("nan")

    def as_dict(self) -> dict:
        """Flat JSON-ready dict (the keys of `bench throughput --json`)."""
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _payloads(rows: int, batch_rows: int, seed: int) -> list[bytes]:
    """``rows`` simulated probes of the 1,024-RNIC profile fabric (its pinglists, so a realistic number of
    distinct pairs per minute), shifted to the last hour, in messages of ``batch_rows``."""
    from bench.profile import _sim_batch
    from bench.storage import _to_now

    payload, _, _ = _sim_batch(rows)
    whole = _to_now(decode(payload, "probe.v1")[1]).slice(0, rows)
    return [encode(whole.slice(i, batch_rows)) for i in range(0, whole.num_rows, batch_rows)]


def run(bootstrap: str, rows: int = 1_000_000, batch_rows: int = 6_000, seed: int = 7,
        workers: int = 1) -> ThroughputResult:
    """Run the three paths over ``rows`` probe rows in messages of ``batch_rows``; ``workers`` worker processes."""
    from bench.pipeline import PipelineProcs, broker_pid, worker_loop_lag_ms
    from bench.procstat import threads_cpu_s
    from fabricscope.kafka_admin import create_topics, delete_topics
    from producers.kafka_producer import AgentProducer
    from schemas.probe_rows.decompose import decompose
    from sinks.clickhouse import ChdbStore, migrate

    payloads = _payloads(rows, batch_rows, seed)
    prefix = f"bench{uuid.uuid4().hex[:6]}."
    create_topics(bootstrap, prefix)
    broker = broker_pid(bootstrap)
    try:
        prod = AgentProducer(bootstrap, max_buffered=100_000)
        for i, p in enumerate(payloads):
            prod.publish(f"{prefix}probes.raw", p, "probe.v1", key=f"h{i % 64}")
        undelivered = prod.flush()
        if undelivered:
            raise RuntimeError(f"{undelivered} batches were not accepted by the broker (message size?)")

        # (a) bare consumer
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}bare", "auto.offset.reset": "earliest",
                      "fetch.max.bytes": 64 * 1024 * 1024})
        c.subscribe([f"{prefix}probes.raw"])
        got, t0 = 0, None
        give_up = time.time() + 300
        while got < rows:
            if time.time() > give_up:
                raise RuntimeError(f"only {got} of {rows} rows came back from the broker in 300 s")
            for m in c.consume(num_messages=100, timeout=2):
                if m.error():
                    continue
                t0 = t0 or time.perf_counter()
                got += decode(m.value(), "probe.v1")[1].num_rows
        bare_consumer = rows / (time.perf_counter() - t0)
        c.close()

        # (c) bare chdb insert of the same rows (decoded and decomposed like the worker does) into a `probes`
        # table with no views (there are none since schemas/ddl/011), in 500,000-row blocks. Timed like (b):
        # rows/s from the first insert to the last block stored (the merges the engine ran inside that span
        # count, the rest do not); CPU per row through the end of the merges the inserts set off, waited for
        # by the same rule as (b)'s (no OPTIMIZE on either side).
        with tempfile.TemporaryDirectory() as d:
            store = ChdbStore(Path(d) / "ch")
            migrate(store)
            whole = pa.concat_tables([decompose(decode(p, "probe.v1")[1], f"b/{i}") for i, p in enumerate(payloads)])
            bare_insert, bare_insert_cpu = bare_insert_blocks(store, [whole.slice(i, 500_000)
                                                                      for i in range(0, whole.num_rows, 500_000)])
            store.close()

        # (b) the pipeline: worker processes + the store writer, on topics of their own. The payloads are
        # published once both are up, so their CPU is read from before the first row to after the last
        # block and the merges it set off (every block of the writer, however long its time budget).
        prefix_b = f"{prefix}b."
        create_topics(bootstrap, prefix_b)
        with tempfile.TemporaryDirectory() as d, PipelineProcs(bootstrap, prefix_b, Path(d), workers) as pipe:
            pipe.wait_ready()
            # One upload first, through to the store: the work a process does once, on its first data (lazy
            # imports, first inserts), is not charged to the measured rows.
            warm_rows = decode(payloads[0], "probe.v1")[1].num_rows
            _wait_stored(bootstrap, prefix_b, pipe.store_path, warm_rows,
                         lambda: _publish(prod, f"{prefix_b}probes.raw", payloads[:1], 0))
            _wait_merges(lambda: _busy_merges(pipe.store_path))
            idle = _wait_idle(pipe.procs)
            measured = rows - warm_rows
            cpu0 = pipe.cpu(broker)
            merge0 = threads_cpu_s(pipe.procs["sink"].pid, "MergeMutate")  # the engine's merges in the writer
            t_start, t_first, t_last = _wait_stored(bootstrap, prefix_b, pipe.store_path, rows,
                                           lambda: _publish(prod, f"{prefix_b}probes.raw", payloads[1:], 1))
            _wait_merges(lambda: _busy_merges(pipe.store_path))
            cpu1 = pipe.cpu(broker)
            merge_cpu = threads_cpu_s(pipe.procs["sink"].pid, "MergeMutate") - merge0
            # parts the engine made by merging during the run (level > 0) in the tables the writer inserts into
            merged_parts = (pipe.query("SELECT count() AS n FROM system.parts WHERE active AND level > 0 AND "
                                       "table IN ('probes', 'probes_1m', 'probes_1h_rnic', 'probes_1h_tor')")
                            or [{"n": -1}])[0]["n"]
            minute_rows = (pipe.query("SELECT count() AS c FROM probes_1m") or [{"c": 0}])[0]["c"]
            lag_p99, lag_max = worker_loop_lag_ms(pipe.metrics_ports)
            rss = pipe.peak_rss()
        # from the first measured row published to the last block committed: includes the publish, the
        # workers' first step and the last block's wait for its time budget
        pipeline = measured / max(t_last - t_start, 1e-9)
        worker_cpu = sum(cpu1[k] - cpu0[k] for k in cpu1 if k.startswith("worker"))
        reducer_cpu = cpu1.get("reducer", float("nan")) - cpu0.get("reducer", float("nan"))
        worker_idle = sum(v for k, v in idle.items() if k.startswith("worker")) * 1000
        # (b') the store writer alone on the pipeline's probes.raw, read again in a group of its own (full blocks)
        backlog_rows_s, backlog_cpu = _sink_on_backlog(bootstrap, prefix_b, rows)
    finally:
        delete_topics(bootstrap, prefix)
        delete_topics(bootstrap, f"{prefix}b.")
    rss["bench (this process)"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return ThroughputResult(
        rows, workers, bare_consumer, pipeline, bare_insert,
        worker_cpu / measured * 1e6, (cpu1["sink"] - cpu0["sink"]) / measured * 1e6, bare_insert_cpu,
        (cpu1["broker"] - cpu0["broker"]) / measured * 1e6, rss, lag_p99, lag_max,
        minute_rows / rows, backlog_rows_s, backlog_cpu, merge_cpu / measured * 1e6, int(merged_parts),
        reducer_cpu / measured * 1e6, worker_idle, t_last - t_start, t_first - t_start)


def bare_insert_blocks(store: object, blocks: list[pa.Table], clock: Callable[[], float] = time.perf_counter,
                       cpu: Callable[[], float] | None = None) -> tuple[float, float]:
    """Path (c): insert ``blocks`` into ``probes`` of ``store`` (a :class:`sinks.clickhouse.ChdbStore`),
    timed like (b): rows/s from the first insert to the last block stored, CPU µs per row through the end of
    the merges the inserts set off (:func:`_wait_merges`; no ``OPTIMIZE``, as the store writer runs none).

    ``clock`` and ``cpu`` (seconds; default ``time.perf_counter`` and this process's CPU time) are for tests.
    Returns (rows/s, CPU µs per row)."""
    cpu = cpu or _self_cpu_s
    rows = sum(t.num_rows for t in blocks)
    c0, t0 = cpu(), clock()
    for i, t in enumerate(blocks):
        store.insert_arrow("probes", t, dedup_token=f"b/{i}")  # type: ignore[attr-defined]
    rows_s = rows / max(clock() - t0, 1e-9)
    _wait_merges(lambda: store.query_arrow("SELECT count() AS n FROM system.merges")  # type: ignore[attr-defined]
                 .to_pylist()[0]["n"])
    return rows_s, (cpu() - c0) / max(rows, 1) * 1e6


def _group_done(admin: object, group: str, topic: str, parts: list[int], high: dict[int, int]) -> bool:
    """Whether consumer group ``group`` has committed ``high`` (the end) on every partition of ``topic`` that
    holds messages (an empty partition never gets a commit)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in parts])
    got = admin.list_consumer_group_offsets([req])[group].result()  # type: ignore[attr-defined]
    return all(high[tp.partition] == 0 or tp.offset >= high[tp.partition] for tp in got.topic_partitions)


def _publish(prod: object, topic: str, payloads: list[bytes], first: int) -> None:
    """Publish ``payloads`` to ``topic`` (keys ``h{i % 64}`` from index ``first``) and wait for the broker.

    Raises:
        RuntimeError: the broker did not take every batch.
    """
    for i, p in enumerate(payloads, first):
        prod.publish(topic, p, "probe.v1", key=f"h{i % 64}")  # type: ignore[attr-defined]
    if prod.flush():  # type: ignore[attr-defined]
        raise RuntimeError(f"the broker did not take the batches for {topic}")


def _wait_idle(procs: dict[str, subprocess.Popen], timeout_s: float = 60.0) -> dict[str, float]:
    """Wait until every process used under 30 ms of CPU in the last second: start-up (imports, the Faust
    worker's group join and table set-up after its metrics port is up) is not charged to the rows.

    Returns each process's CPU seconds per second over the last second waited (its idle cost; on a timeout,
    the last second's, not idle)."""
    from bench.procstat import cpu_s

    deadline = time.time() + timeout_s
    before, t0 = {k: cpu_s(p.pid) for k, p in procs.items()}, time.perf_counter()
    rate: dict[str, float] = {}
    while time.time() < deadline:
        time.sleep(1.0)
        now, t1 = {k: cpu_s(p.pid) for k, p in procs.items()}, time.perf_counter()
        rate = {k: (now[k] - before[k]) / (t1 - t0) for k in procs}
        if all(now[k] - before[k] < 0.03 for k in procs):
            break
        before, t0 = now, t1
    return rate


def pipeline_span(publish: Callable[[], None], produced: Callable[[], int], done: Callable[[], bool],
                  clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep,
                  timeout_s: float = 600.0, poll_s: float = 0.1) -> tuple[float, float, float]:
    """The measured span of one run: from the first row published to the last row stored.

    ``produced()`` (the workers' output so far, e.g. the end of ``window.partials``) is read
    *before* ``publish()`` starts, so output the workers make while the rows are still being published counts
    as growth, not as the baseline; the span starts when ``publish`` is called (the first row published), not
    when it returns, and ends at the first poll where ``done()`` (every row stored and committed) holds.

    Args:
        publish: publishes the measured rows and returns once the broker holds them all.
        produced: a counter that grows with the workers' output (any unit).
        done: True once the last row is stored.
        clock, sleep: seconds (``time.perf_counter`` and ``time.sleep``; a test gives a simulated clock).
        timeout_s: give up after this many seconds of ``clock``; poll_s: seconds between polls.

    Returns:
        (t_start, t_first_output, t_done) in ``clock`` seconds: the span is ``t_done - t_start``;
        ``t_first_output`` is the first poll (from the end of publishing) that saw ``produced()`` above its
        value before publishing (``t_done`` if no poll did before ``done()``).

    Raises:
        TimeoutError: ``done()`` did not hold within ``timeout_s``.
    """
    before = produced()
    t_start = clock()
    publish()
    t_first: float | None = None
    while clock() - t_start < timeout_s:
        if t_first is None and produced() > before:
            t_first = clock()
        if done():
            t_done = clock()
            return t_start, t_done if t_first is None else t_first, t_done
        sleep(poll_s)
    raise TimeoutError(f"the pipeline did not store every row in {timeout_s:.0f} s")


def _wait_stored(bootstrap: str, prefix: str, store_path: Path, rows: int,
                 publish: Callable[[], None]) -> tuple[float, float, float]:
    """Publish (``publish()``) and wait until the workers and the store writer (each in its own group) committed
    all of ``probes.raw`` (the writer commits a block after its inserts), then check the store holds ``rows``
    probes in ``probes`` and in ``probes_1m``. Returns :func:`pipeline_span`'s (perf_counter when publishing
    started, first output seen after the publish, the writer's last block committed). Progress is read from
    the broker, not the store: a query through the writer's endpoint costs it ~8 ms of CPU, which polling
    would charge to its CPU per row.

    Raises:
        RuntimeError: not done in 600 s, or the store holds other counts.
    """
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from sinks.query_endpoint import find_endpoint, query_remote

    raw, partials = f"{prefix}probes.raw", f"{prefix}window.partials"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watermarks-{uuid.uuid4().hex[:6]}"})

    def ends(topic: str) -> tuple[list[int], dict[int, int]]:
        parts = list(c.list_topics(topic, timeout=10).topics[topic].partitions)
        return parts, {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in parts}

    raw_parts: list[int] = []
    raw_high: dict[int, int] = {}

    def published() -> None:
        publish()
        raw_parts[:], raw_high_now = ends(raw)  # the end of probes.raw once every measured row is in it
        raw_high.update(raw_high_now)

    def done() -> bool:
        return bool(raw_high) and all(_group_done(admin, group, raw, raw_parts, raw_high)
                                      for group in (f"{prefix}fabricscope", f"{prefix}fabricscope-store"))

    try:
        t_start, t_first, t_last = pipeline_span(published, lambda: sum(ends(partials)[1].values()), done)
    except TimeoutError as err:
        raise RuntimeError(f"the pipeline did not commit {rows} rows: {err}") from None
    finally:
        c.close()
    r = query_remote(find_endpoint(store_path), "SELECT (SELECT count() FROM probes) AS n, "
                     "(SELECT sum(probes) FROM probes_1m) AS m").to_pylist()[0]
    if (int(r["n"]), int(r["m"] or 0)) != (rows, rows):
        raise RuntimeError(f"the store holds {r} after the pipeline committed everything, "
                           f"expected {rows} probes in each")
    return t_start, t_first, t_last


def _busy_merges(store_path: Path) -> int:
    """Merges the store writer's engine is running now (``system.merges``, through its query endpoint)."""
    from sinks.query_endpoint import find_endpoint, query_remote

    return int(query_remote(find_endpoint(store_path), "SELECT count() AS n FROM system.merges")["n"][0].as_py())


def _wait_merges(busy: Callable[[], int], timeout_s: float = 60.0) -> None:
    """Wait until ``busy()`` (merges running) is 0 in two polls 0.5 s apart, or timeout: the merges a run's
    blocks set off, waited for by the same rule in (b), (b') and (c)."""
    quiet, deadline = 0, time.time() + timeout_s
    while quiet < 2 and time.time() < deadline:
        quiet = quiet + 1 if busy() == 0 else 0
        time.sleep(0.5)


def _sink_on_backlog(bootstrap: str, prefix: str, rows: int) -> tuple[float, float]:
    """rows/s and CPU µs/row of a store writer (in this process) reading probes.raw from the start."""
    from sinks.clickhouse import ChdbStore, migrate
    from sinks.kafka_sink import StoreWriter

    with tempfile.TemporaryDirectory() as d:
        store = ChdbStore(Path(d) / "ch")
        migrate(store)
        w = StoreWriter(store, bootstrap, prefix, group=f"backlog-{uuid.uuid4().hex[:6]}")
        deadline = time.time() + 600

        def stored() -> int:
            return w.stats.rows_by_table.get("probes", 0)

        while stored() + w.held_rows() == 0 and time.time() < deadline:
            w.poll_once()  # joins the group; CPU and time from the first message read
        c0, t0, n0 = _self_cpu_s(), time.perf_counter(), stored()
        while stored() + w.held_rows() < rows and time.time() < deadline:
            w.poll_once()
        w.poll_once(timeout=0, force=True)  # everything is read: the last block need not wait for its budget
        n, t1 = stored() - n0, time.perf_counter()
        # as (b) and (c): rows/s to the last row stored, CPU through the merges the blocks set off
        _wait_merges(lambda: store.query_arrow("SELECT count() AS n FROM system.merges").to_pylist()[0]["n"])
        out = n / (t1 - t0), (_self_cpu_s() - c0) / max(n, 1) * 1e6
        w.close()
        store.close()
    return out


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cores_for(r: ThroughputResult, rows_s: float) -> float:
    """Cores that ``rows_s`` rows/s would keep busy at this run's CPU per row of every process of the
    pipeline: stream workers, reducer, store writer and broker (a missing reducer figure counts as 0)."""
    reducer = 0.0 if r.reducer_cpu_us_per_row != r.reducer_cpu_us_per_row else r.reducer_cpu_us_per_row
    return rows_s * (r.worker_cpu_us_per_row + reducer + r.sink_cpu_us_per_row + r.broker_cpu_us_per_row) / 1e6


def report(r: ThroughputResult) -> str:
    """A plain-text report of one run."""
    lines = [
        f"rows: {r.rows}   workers: {r.workers}",
        "spans: (b) and (c) from the first measured row published (inserted) to the last row stored; merges the "
        "engine ran inside the span count, the rest do not; CPU per row includes the merges the rows set off "
        "(waited for the same way on every side, no OPTIMIZE); (a) reads a backlog already published",
        f"(a) bare Kafka consumer + decode : {r.bare_consumer_rows_s:12,.0f} rows/s",
        f"(b) Faust workers + store writer : {r.pipeline_rows_s:12,.0f} rows/s   worker CPU "
        f"{r.worker_cpu_us_per_row:.2f} µs/row, store writer CPU {r.sink_cpu_us_per_row:.2f} µs/row, "
        f"broker CPU {r.broker_cpu_us_per_row:.2f} µs/row",
        f"    span {r.pipeline_span_s:.1f} s from the first row published; the first output seen after the publish "
        f"at {r.first_output_s:.1f} s (a clock started there would say "
        f"{r.pipeline_rows_s * r.pipeline_span_s / max(r.pipeline_span_s - r.first_output_s, 1e-9):,.0f} rows/s)",
        f"(c) bare chdb insert (500k-row blocks, no views): {r.bare_insert_rows_s:12,.0f} rows/s   "
        f"CPU {r.bare_insert_cpu_us_per_row:.2f} µs/row",
        f"b/a = {r.pipeline_rows_s / r.bare_consumer_rows_s:.3f}   "
        f"b/c = {r.pipeline_rows_s / r.bare_insert_rows_s:.3f}   "
        f"store writer CPU / bare insert CPU = {r.sink_cpu_us_per_row / r.bare_insert_cpu_us_per_row:.2f}   "
        f"(of the writer's CPU, the engine's merges during the run {r.sink_merge_cpu_us_per_row:.2f} µs/row; "
        f"{r.sink_merged_parts} merged parts)",
        f"(b') store writer alone on the backlog: {r.sink_backlog_rows_s:12,.0f} rows/s   CPU "
        f"{r.sink_backlog_cpu_us_per_row:.2f} µs/row "
        f"(= {r.sink_backlog_cpu_us_per_row / r.bare_insert_cpu_us_per_row:.2f} x bare insert)",
        f"reducer process CPU {r.reducer_cpu_us_per_row:.2f} µs/row; stream workers idle before the run: "
        f"{r.worker_idle_cpu_ms_s:.1f} ms CPU per s",
        f"minute-tier rows per probe row: {r.minute_rows_per_probe:.3f}",
        f"worker event-loop lag: p99 <= {r.loop_lag_p99_ms:.0f} ms, max <= {r.loop_lag_max_ms:.0f} ms",
        "peak RSS (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in r.peak_rss_mib.items()),
        f"cores for 1.5 M rows/s (every process: workers + reducer + store writer + broker CPU per row): "
        f"{cores_for(r, 1.5e6):.1f}",
    ]
    return "\n".join(lines)
