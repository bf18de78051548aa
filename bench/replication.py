"""`fabricscope bench replication`: what replication costs the agents' uploads.

Publishes the same agent uploads (``probe.v1`` Arrow IPC, one 5 s upload of 8 RNICs at the paper's
150 probes/s = 6,000 rows, ~1 MB) with the agent producer (``acks=all``, idempotent) into
``probes.raw`` of the cluster at ``KAFKA_BOOTSTRAP``, whose topics get the cluster's replication
(min(3, brokers), ``min.insync.replicas`` one less). Prints uploads/s, MB/s, probe rows/s and the
delivery latency (publish -> acknowledged by every in-sync replica) at p50/p99. Run it against a
single broker and against ``infra/kafka/kafka.sh cluster`` to see the cost of 3 replicas.
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Producer

from fabricscope.kafka_admin import create_topics, delete_topics, describe_topics
from producers.bulk import bulk_probe_columns
from schemas.arrow_pa import table_from_columns
from schemas.codec import encode
from schemas.headers import headers_for


@dataclass
class ReplicationResult:
    """Publish figures of one run: uploads, rows per upload, bytes, seconds, latencies (s)."""

    brokers: int
    rate: float
    replication: int
    min_insync: int
    uploads: int
    rows_per_upload: int
    bytes_total: int
    seconds: float
    latencies_s: list[float]

    @property
    def uploads_s(self) -> float:
        """Uploads acknowledged per second over the run."""
        return self.uploads / self.seconds

    def pct(self, q: float) -> float:
        """The q-quantile (0..1) of the delivery latency, in ms."""
        s = sorted(self.latencies_s)
        return 1000 * s[min(len(s) - 1, int(q * len(s)))]


def run(bootstrap: str, uploads: int = 200, rows: int = 6_000, seed: int = 7,
        client_config: dict[str, str] | None = None, rate: float = 0.0) -> ReplicationResult:
    """Publish ``uploads`` uploads of ``rows`` probe rows each, keyed over 64 agents, and wait for every ack.

    ``rate``: uploads per second (0 = as fast as the producer takes them: the throughput, where the
    latency is mostly queueing; a rate under that gives the latency of one upload).

    Raises:
        RuntimeError: an upload was not delivered within 120 s.
    """
    prefix = f"benchrep{uuid.uuid4().hex[:6]}."
    create_topics(bootstrap, prefix, client_config)
    try:
        brokers, states = describe_topics(bootstrap, prefix, client_config)
        raw = next(s for s in states if s.topic == f"{prefix}probes.raw")
        payload = encode(table_from_columns("probe.v1", bulk_probe_columns(rows, seed=seed, start_ns=time.time_ns())))
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                      "compression.type": "lz4", "message.max.bytes": 16 * 1024 * 1024, **(client_config or {})})
        latencies: list[float] = []
        failed: list[str] = []

        def acked(err: object, _msg: object, t0: float) -> None:
            if err is not None:
                failed.append(str(err))
            latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        for i in range(uploads):
            if rate:
                while time.perf_counter() < start + i / rate:
                    p.poll(min(0.01, max(0.0, start + i / rate - time.perf_counter())))
            t0 = time.perf_counter()
            while True:
                try:
                    p.produce(f"{prefix}probes.raw", payload, key=f"agent-{i % 64}",
                              headers=headers_for("probe.v1"), on_delivery=lambda e, m, t0=t0: acked(e, m, t0))
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        if p.flush(120) or failed:
            raise RuntimeError(f"uploads not delivered: {len(failed)} failed ({failed[:1]})")
        seconds = time.perf_counter() - start
        return ReplicationResult(brokers, rate, raw.replication or 0, raw.min_insync or 0, uploads, rows,
                                 uploads * len(payload), seconds, latencies)
    finally:
        delete_topics(bootstrap, prefix, client_config)


def report(r: ReplicationResult) -> str:
    """The figures as text."""
    return "\n".join([
        f"cluster: {r.brokers} broker(s); probes.raw replication {r.replication}, min.insync.replicas "
        f"{r.min_insync}; acks=all, idempotent",
        f"uploads: {r.uploads} x {r.rows_per_upload} rows ({r.bytes_total / r.uploads / 1e6:.2f} MB each), "
        + (f"paced at {r.rate:g}/s" if r.rate else "as fast as they are taken"),
        f"published in {r.seconds:.1f} s: {r.uploads_s:.1f} uploads/s, {r.bytes_total / r.seconds / 1e6:.1f} MB/s, "
        f"{r.uploads_s * r.rows_per_upload:,.0f} probe rows/s",
        f"delivery latency (publish -> acked by the in-sync replicas): p50 {r.pct(0.5):.0f} ms, "
        f"p99 {r.pct(0.99):.0f} ms, mean {1000 * statistics.fmean(r.latencies_s):.0f} ms",
    ])
