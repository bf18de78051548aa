"""`fabricscope bench throughput`: the same probe batches through three paths, in one run.

(a) a bare Kafka consumer that only deserialises (the raw limit of the bus + codec),
(b) the Faust worker + store writer into the embedded ClickHouse (the pipeline),
(c) a bare chdb insert of the same Arrow tables (the raw limit of the store).
Prints rows/s of each, the ratios b/a and b/c, and peak RSS of the processes.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer

from producers.bulk import bulk_probe_columns
from schemas.arrow_pa import table_from_columns
from schemas.codec import decode, encode


@dataclass
class ThroughputResult:
    """Rows/s of each path and peak RSS in MiB."""

    rows: int
    bare_consumer_rows_s: float
    pipeline_rows_s: float
    bare_insert_rows_s: float
    pipeline_peak_rss_mib: dict[str, float]


def _payloads(rows: int, batch_rows: int, seed: int) -> list[bytes]:
    out = []
    for i in range(0, rows, batch_rows):
        n = min(batch_rows, rows - i)
        cols = bulk_probe_columns(n, seed=seed + i, start_ns=1_795_000_000_000_000_000 + i * 1000,
                                  agent_id=f"h{(i // batch_rows) % 64}", seq0=i)
        out.append(encode(table_from_columns("probe.v1", cols)))
    return out


def _peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def run(bootstrap: str, rows: int = 1_000_000, batch_rows: int = 20_000, seed: int = 7) -> ThroughputResult:
    """Run the three paths over ``rows`` probe rows in batches of ``batch_rows``."""
    from fabricscope.kafka_admin import create_topics, delete_topics
    from producers.kafka_producer import AgentProducer
    from sinks.clickhouse import ChdbStore, migrate
    from sinks.query_endpoint import find_endpoint, query_remote
    from streams.pingmesh.rtt import decompose

    payloads = _payloads(rows, batch_rows, seed)
    prefix = f"bench{uuid.uuid4().hex[:6]}."
    create_topics(bootstrap, prefix)
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

        # (c) bare chdb insert of the same tables (decoded and decomposed like the worker does)
        with tempfile.TemporaryDirectory() as d:
            store = ChdbStore(Path(d) / "ch")
            migrate(store)
            tables = [decompose(decode(p, "probe.v1")[1], f"b/{i}") for i, p in enumerate(payloads)]
            t0 = time.perf_counter()
            for i, t in enumerate(tables):
                store.insert_arrow("probes", t, dedup_token=f"b/{i}")
            bare_insert = rows / (time.perf_counter() - t0)
            store.close()

        # (b) the pipeline: worker + sink processes
        with tempfile.TemporaryDirectory() as d:
            env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "FABRICSCOPE_TOPIC_PREFIX": prefix,
                   "FABRICSCOPE_VAR": d}
            exe = [sys.executable, "-m", "fabricscope"]
            procs = {name: subprocess.Popen([*exe, name], env=env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, cwd=d) for name in ("sink", "worker")}
            store_path = Path(d) / "clickhouse"
            t_first = t_last = None
            n = 0
            deadline = time.time() + 600
            while n < rows and time.time() < deadline:
                url = find_endpoint(store_path)
                if url:
                    n = query_remote(url, "SELECT count() AS n FROM probes")["n"][0].as_py()
                    if n and t_first is None:
                        t_first = time.perf_counter()
                time.sleep(0.2)
            t_last = time.perf_counter()
            rss = {name: _peak_rss_mib(p.pid) for name, p in procs.items()}
            for p in procs.values():
                p.terminate()
            for p in procs.values():
                p.wait(timeout=30)
            # rows after the first visible insert over the time they took (excludes process start-up)
            first_batch = min(batch_rows, rows)
            pipeline = (n - first_batch) / max(t_last - (t_first or t_last), 1e-9)
    finally:
        delete_topics(bootstrap, prefix)
    rss["bench (this process)"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return ThroughputResult(rows, bare_consumer, pipeline, bare_insert, rss)


def report(r: ThroughputResult) -> str:
    """A plain-text report of one run."""
    lines = [
        f"rows: {r.rows}",
        f"(a) bare Kafka consumer + decode : {r.bare_consumer_rows_s:12,.0f} rows/s",
        f"(b) Faust worker + store writer  : {r.pipeline_rows_s:12,.0f} rows/s",
        f"(c) bare chdb insert             : {r.bare_insert_rows_s:12,.0f} rows/s",
        f"b/a = {r.pipeline_rows_s / r.bare_consumer_rows_s:.3f}   "
        f"b/c = {r.pipeline_rows_s / r.bare_insert_rows_s:.3f}",
        "peak RSS (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in r.pipeline_peak_rss_mib.items()),
        f"paper target for a 10,000-RNIC cluster: 1.5 M probe rows/s -> {r.pipeline_rows_s / 1.5e6:.2%} of it per "
        "worker+sink pair on this machine",
    ]
    return "\n".join(lines)
