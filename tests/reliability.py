"""Helpers of the failure tests: seeded uploads, store counts, topic sizes, a private broker.

Nothing here mocks Kafka or ClickHouse: uploads go through :class:`AgentProducer`
to a real broker, rows are counted in the real embedded store through the sink's
query endpoint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from producers.kafka_producer import AgentProducer
from producers.synthetic import synthetic_batch
from schemas.arrow_nano import encode_columns
from sinks.clickhouse import StoreError
from sinks.query_endpoint import find_endpoint, query_remote

from conftest import REPO, free_port, wait_for
from probe_rows import recent

KAFKA_SH = REPO / "infra" / "kafka" / "kafka.sh"
START_NS = recent(1_795_000_000_000_000_000)
SLOT_NS = 5_000_000_000


def link_kafka_jars(var: Path) -> None:
    """Make ``var/kafka/libs`` a link to the checkout's downloaded broker jars (no second Maven download).

    Raises:
        RuntimeError: the jars are not installed (``infra/kafka/kafka.sh install``).
    """
    kafka = var / "kafka"
    kafka.mkdir(parents=True, exist_ok=True)
    shared_libs = REPO / "var" / "kafka" / "libs"
    if not (kafka / "libs").exists():
        if not (shared_libs / ".complete").exists():
            raise RuntimeError(f"no Kafka jars at {shared_libs}: run infra/kafka/kafka.sh install")
        os.symlink(shared_libs, kafka / "libs")


@dataclass
class Fleet:
    """A few agents uploading one ``probe.v1`` batch each per round, with globally unique (agent_id, seq).

    ``round_`` k of agent h covers event time ``START_NS + (slot0 + k) * 5 s`` and seqs
    ``(slot0 + k) * probes ...``; ``rows`` counts what was handed to the producer.
    """

    producer: AgentProducer
    topic: str
    hosts: int = 4
    probes: int = 50
    qpn: int = 1000
    slot0: int = 0
    rows: int = 0
    batches: int = 0
    publish_s: list[float] = field(default_factory=list)

    def agents(self) -> list[str]:
        return [f"h{h}" for h in range(self.hosts)]

    def round_(self, k: int, agents: list[str] | None = None) -> None:
        """Publish round ``k`` for ``agents`` (all by default); records how long each publish call took."""
        every = [f"h{h}-r0" for h in range(self.hosts)]
        slot = self.slot0 + k
        for a in agents or self.agents():
            cols = synthetic_batch(a, [f"{a}-r0"], [r for r in every if not r.startswith(f"{a}-")],
                                   START_NS + slot * SLOT_NS, self.probes, seed=slot * 31 + int(a[1:]),
                                   seq0=slot * self.probes)
            cols["qpn"] = [self.qpn] * self.probes
            payload = encode_columns("probe.v1", cols)
            t0 = time.perf_counter()
            self.producer.publish(self.topic, payload, "probe.v1", key=a)
            self.publish_s.append(time.perf_counter() - t0)
            self.rows += self.probes
            self.batches += 1


def store_counts(store_path: Path, table: str = "probes") -> tuple[int, int] | None:
    """``(count(), uniqExact(agent_id, seq))`` of ``table`` through the running sink, or None if none answers."""
    try:
        url = find_endpoint(store_path)
        if not url:
            return None
        t = query_remote(url, f"SELECT count() AS n, uniqExact(agent_id, seq) AS u FROM {table}", timeout=5)
    except (OSError, StoreError):  # a writer that is gone or going: ConnectionError, TimeoutError
        return None
    row = t.to_pylist()[0]
    return int(row["n"]), int(row["u"])


ROLLUPS = ("probes_1m", "probes_1h_rnic", "probes_1h_tor")  # schemas/ddl/005_history.sql


def rollup_probes(store_path: Path) -> dict[str, int] | None:
    """``sum(probes)`` of every rollup table, through the running sink; None if it does not answer."""
    sql = " UNION ALL ".join(f"SELECT '{r}' AS t, sum(probes) AS n FROM {r}" for r in ROLLUPS)
    t = query(store_path, sql)
    return None if t is None else {r["t"]: int(r["n"]) for r in t.to_pylist()}


def query(store_path: Path, sql: str):  # noqa: ANN201 - a pyarrow table or None
    """Run ``sql`` through the running sink; None when it does not answer."""
    try:
        url = find_endpoint(store_path)
        return query_remote(url, sql, timeout=5) if url else None
    except (OSError, StoreError):  # a writer that is gone or going: ConnectionError, TimeoutError
        return None


def topic_messages(bootstrap: str, topic: str) -> int:
    """Messages ever written to ``topic`` (sum of high watermarks over its partitions)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fabricscope-watermarks"})
    try:
        md = c.list_topics(topic, timeout=10)
        total = 0
        for p in md.topics[topic].partitions:
            _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high
        return total
    finally:
        c.close()


class PrivateBroker:
    """A second Kafka broker from the shared jars, on its own ports and data dir, for restart tests.

    Never touches the shared broker on 9092: ``kafka.sh`` is pointed at ``var`` through
    ``FABRICSCOPE_VAR`` and at other ports through ``KAFKA_PORT``/``KAFKA_CONTROLLER_PORT``.
    """

    def __init__(self, var: Path, extra_env: dict[str, str] | None = None) -> None:
        self.var = var
        self.port = free_port(2)  # the listener and, next to it, the controller
        self.controller_port = self.port + 1
        link_kafka_jars(var)
        self.env = {**os.environ, "FABRICSCOPE_VAR": str(var), "KAFKA_PORT": str(self.port),
                    "KAFKA_CONTROLLER_PORT": str(self.controller_port), **(extra_env or {})}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _sh(self, action: str, timeout: float = 120) -> str:
        r = subprocess.run(["bash", str(KAFKA_SH), action], env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"kafka.sh {action} (private broker {self.bootstrap}) failed: {r.stdout}{r.stderr}")
        return r.stdout

    def start(self) -> str:
        return self._sh("start")

    def stop(self) -> str:
        return self._sh("stop")

    def answers(self) -> bool:
        try:
            return bool(AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=3).brokers)
        except Exception:
            return False

    def cleanup(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.var / "kafka" / "data", ignore_errors=True)


class PrivateCluster:
    """``kafka.sh cluster`` with ``brokers`` combined KRaft nodes on free loopback ports, data under ``var``.

    Node k listens on ``port0 + k - 1`` (controller ``port0 + brokers + k - 1``); never touches the shared
    broker on 9092 nor a cluster on the default ports.
    """

    def __init__(self, var: Path, brokers: int = 3) -> None:
        self.var = var
        self.brokers = brokers
        self.port0 = free_port(2 * brokers)  # listeners, then controllers
        link_kafka_jars(var)
        self.env = {**os.environ, "FABRICSCOPE_VAR": str(var), "KAFKA_CLUSTER_PORT": str(self.port0),
                    "KAFKA_CLUSTER_CONTROLLER_PORT": str(self.port0 + brokers)}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port0 + k}" for k in range(self.brokers))

    def _sh(self, *args: str, timeout: float = 180) -> str:
        r = subprocess.run(["bash", str(KAFKA_SH), "cluster", *args, "--brokers", str(self.brokers)],
                           env=self.env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"kafka.sh cluster {' '.join(args)} ({self.bootstrap}) failed: {r.stdout}{r.stderr}")
        return r.stdout

    def start(self) -> str:
        """Start every node that is not running; returns when all brokers are in the metadata."""
        return self._sh("start")

    def kill(self, node: int) -> str:
        """kill -9 of node ``node`` (1-based)."""
        return self._sh("kill", str(node))

    def stop(self) -> str:
        return self._sh("stop")

    def cleanup(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.var / "kafka-cluster", ignore_errors=True)


def partition_leaders(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    """``{(topic, partition): leader broker id}`` (-1: no leader) from one metadata request."""
    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2}).list_topics(timeout=10)
    return {(t, p.id): p.leader for t in topics if t in md.topics for p in md.topics[t].partitions.values()}


class GroupLag:
    """Messages of ``topic`` not yet committed by consumer group ``group``, asked with one client (not a
    member of the group: it only reads the group's committed offsets and the high watermarks)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.topic = topic
        # log_level 2: a dead broker in the bootstrap list is expected here, not worth a line per sample
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                            "log_level": 2})

    def lag(self) -> int | None:
        """The lag now; None when the cluster did not answer in time."""
        try:
            parts = self._c.list_topics(self.topic, timeout=5).topics[self.topic].partitions
            tps = self._c.committed([TopicPartition(self.topic, p) for p in parts], timeout=5)
            lag = 0
            for tp in tps:
                _, high = self._c.get_watermark_offsets(TopicPartition(self.topic, tp.partition), timeout=5)
                lag += high - max(tp.offset, 0)
            return lag
        except Exception:
            return None

    def close(self) -> None:
        self._c.close()


def group_members(bootstrap: str, group: str) -> int | None:
    """Members of consumer group ``group`` now (0 once the broker evicted or let go of all); None if unknown."""
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
        return len(admin.describe_consumer_groups([group], request_timeout=5)[group].result(timeout=10).members)
    except Exception:  # noqa: BLE001 - an unanswered request: the caller asks again
        return None


def settled_counts(store_path: Path, bootstrap: str, prefix: str, workers: list[subprocess.Popen],
                   expected: int, what: str) -> tuple[int, int] | None:
    """Wait for ``expected`` rows in ``probes``, settle the pipeline, and return the final
    ``(count(), uniqExact(agent_id, seq))``.

    Settled means nothing can change ``probes`` any more, so a late duplicate (a replay of uncommitted
    input) would be in the returned count rather than arrive after it: the stream ``workers`` are
    SIGKILLed, then the store writer's group has committed every message of ``probes.raw`` (it commits a
    block only after its inserts returned). The workers were expected to keep running until then, so one
    that exited before fails the test.
    """
    wait_for(lambda: (c := store_counts(store_path)) is not None and c[0] >= expected, timeout=240,
             what=f"{expected} rows after {what}")
    assert all(w.poll() is None for w in workers), f"a worker exited during {what}"
    for w in workers:
        w.kill()
        w.wait(60)
    lag = GroupLag(bootstrap, f"{prefix}fabricscope-store", f"{prefix}probes.raw")
    try:
        wait_for(lambda: lag.lag() == 0, timeout=120, what=f"the store writer caught up after {what}")
    finally:
        lag.close()
    return store_counts(store_path)
