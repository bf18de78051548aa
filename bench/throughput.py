"""`fabricscope bench throughput`: the same probe batches through three paths, in one run.

(a) a bare Kafka consumer that only deserialises (the raw limit of the bus + codec),
(b) the Faust worker + store writer into the embedded ClickHouse (the pipeline),
(c) a bare chdb insert of the same rows into ``probes`` (no views) in 500,000-row blocks.
Prints rows/s of each, CPU time per row of the worker processes, the store writer, the broker
and the bare insert (the figure to trust on a shared machine), the ratios, peak RSS per
process and the worker's event-loop lag (from its Prometheus histogram).
"""

from __future__ import annotations

import resource
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from confluent_kafka import Consumer

from schemas.codec import decode, encode


@dataclass
class ThroughputResult:
    """Rows/s and CPU µs per row of each path, peak RSS per process (MiB), the worker's event-loop lag."""

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
    from fabricscope.kafka_admin import create_topics, delete_topics
    from producers.kafka_producer import AgentProducer
    from sinks.clickhouse import ChdbStore, migrate
    from streams.pingmesh.rtt import decompose

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
        # table with no views (there are none since schemas/ddl/011), in 500,000-row blocks
        with tempfile.TemporaryDirectory() as d:
            store = ChdbStore(Path(d) / "ch")
            migrate(store)
            whole = pa.concat_tables([decompose(decode(p, "probe.v1")[1], f"b/{i}") for i, p in enumerate(payloads)])
            blocks = [whole.slice(i, 500_000) for i in range(0, whole.num_rows, 500_000)]
            c0, t0 = _self_cpu_s(), time.perf_counter()
            for i, t in enumerate(blocks):
                store.insert_arrow("probes", t, dedup_token=f"b/{i}")
            store.command("OPTIMIZE TABLE probes FINAL")  # the merges a writer process pays for later
            bare_insert = rows / (time.perf_counter() - t0)
            bare_insert_cpu = (_self_cpu_s() - c0) / rows * 1e6
            store.close()

        # (b) the pipeline: worker processes + the store writer
        with tempfile.TemporaryDirectory() as d, PipelineProcs(bootstrap, prefix, Path(d), workers) as pipe:
            sql = "SELECT (SELECT count() FROM probes) AS n, (SELECT sum(probes) FROM probes_1m) AS m"
            t_first = None
            n = m = n_first = 0
            cpu0: dict[str, float] = {}
            deadline = time.time() + 600
            while (n < rows or m < rows) and time.time() < deadline:
                r = pipe.query(sql)
                if r:
                    n, m = int(r[0]["n"]), int(r[0]["m"] or 0)
                    if n and t_first is None:
                        t_first, n_first = time.perf_counter(), n
                        cpu0 = pipe.cpu(broker)
                time.sleep(0.2)
            t_last = time.perf_counter()
            cpu1 = pipe.cpu(broker)
            minute_rows = pipe.query("SELECT count() AS c FROM probes_1m")[0]["c"]
            lag_p99, lag_max = worker_loop_lag_ms(pipe.metrics_ports)
            rss = pipe.peak_rss()
            # rows after the first visible insert over the time (and CPU) they took: excludes start-up
            done = max(n - n_first, 1)
            pipeline = done / max(t_last - (t_first or t_last), 1e-9)
            worker_cpu = sum(cpu1[k] - cpu0.get(k, cpu1[k]) for k in cpu1 if k.startswith("worker"))
        # (b') the store writer alone on the backlog the pipeline left in probes.enriched (full-size blocks)
        backlog_rows_s, backlog_cpu = _sink_on_backlog(bootstrap, prefix, rows)
    finally:
        delete_topics(bootstrap, prefix)
    rss["bench (this process)"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return ThroughputResult(
        rows, workers, bare_consumer, pipeline, bare_insert,
        worker_cpu / done * 1e6, (cpu1["sink"] - cpu0.get("sink", cpu1["sink"])) / done * 1e6, bare_insert_cpu,
        (cpu1["broker"] - cpu0.get("broker", cpu1["broker"])) / done * 1e6, rss, lag_p99, lag_max,
        minute_rows / max(n, 1), backlog_rows_s, backlog_cpu)


def _sink_on_backlog(bootstrap: str, prefix: str, rows: int) -> tuple[float, float]:
    """rows/s and CPU µs/row of a store writer (in this process) reading probes.enriched from the start."""
    from sinks.clickhouse import ChdbStore, migrate
    from sinks.kafka_sink import StoreWriter

    with tempfile.TemporaryDirectory() as d:
        store = ChdbStore(Path(d) / "ch")
        migrate(store)
        w = StoreWriter(store, bootstrap, prefix, group=f"backlog-{uuid.uuid4().hex[:6]}")
        deadline = time.time() + 600
        while w.stats.rows_by_table.get("probes", 0) == 0 and time.time() < deadline:
            w.poll_once()
        c0, t0, n0 = _self_cpu_s(), time.perf_counter(), w.stats.rows_by_table.get("probes", 0)
        while w.stats.rows_by_table.get("probes", 0) < rows and time.time() < deadline:
            w.poll_once()
        w.poll_once(timeout=0, force=True)
        store.command("OPTIMIZE TABLE probes FINAL")
        n = w.stats.rows_by_table.get("probes", 0) - n0
        out = n / (time.perf_counter() - t0), (_self_cpu_s() - c0) / max(n, 1) * 1e6
        w.close()
        store.close()
    return out


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def report(r: ThroughputResult) -> str:
    """A plain-text report of one run."""
    lines = [
        f"rows: {r.rows}   workers: {r.workers}",
        f"(a) bare Kafka consumer + decode : {r.bare_consumer_rows_s:12,.0f} rows/s",
        f"(b) Faust workers + store writer : {r.pipeline_rows_s:12,.0f} rows/s   worker CPU "
        f"{r.worker_cpu_us_per_row:.2f} µs/row, store writer CPU {r.sink_cpu_us_per_row:.2f} µs/row, "
        f"broker CPU {r.broker_cpu_us_per_row:.2f} µs/row",
        f"(c) bare chdb insert (500k-row blocks, no views, merged): {r.bare_insert_rows_s:12,.0f} rows/s   "
        f"CPU {r.bare_insert_cpu_us_per_row:.2f} µs/row",
        f"b/a = {r.pipeline_rows_s / r.bare_consumer_rows_s:.3f}   "
        f"b/c = {r.pipeline_rows_s / r.bare_insert_rows_s:.3f}   "
        f"store writer CPU / bare insert CPU = {r.sink_cpu_us_per_row / r.bare_insert_cpu_us_per_row:.2f}",
        f"(b') store writer alone on the backlog: {r.sink_backlog_rows_s:12,.0f} rows/s   CPU "
        f"{r.sink_backlog_cpu_us_per_row:.2f} µs/row "
        f"(= {r.sink_backlog_cpu_us_per_row / r.bare_insert_cpu_us_per_row:.2f} x bare insert)",
        f"minute-tier rows per probe row: {r.minute_rows_per_probe:.3f}",
        f"worker event-loop lag: p99 <= {r.loop_lag_p99_ms:.0f} ms, max <= {r.loop_lag_max_ms:.0f} ms",
        "peak RSS (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in r.peak_rss_mib.items()),
        f"cores for 1.5 M rows/s (worker + store writer + broker CPU per row): "
        f"{1.5 * (r.worker_cpu_us_per_row + r.sink_cpu_us_per_row + r.broker_cpu_us_per_row):.1f}",
    ]
    return "\n".join(lines)
