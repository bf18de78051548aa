"""The real pipeline's processes for the benchmarks: N stream workers and one store writer.

`bench throughput` and `bench scale` both run ``fabricscope worker`` (N processes, one consumer
group; by default as ``fabricscope up`` lays them out: N ``--role stream`` workers and one ``--role
reducer`` process) and ``fabricscope sink`` (the store writer, which owns an embedded chdb store and serves
read-only queries on 127.0.0.1) as child processes on topics of their own prefix, and read the
figures every benchmark reports from outside: CPU seconds and peak RSS per process from ``/proc``
(:mod:`bench.procstat`), the workers' event-loop lag from their Prometheus endpoints, the store
through the writer's query endpoint, and consumer-group lag from the broker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procstat import cpu_s, free_port, listener_pid, peak_rss_mib, rss_mib
from fabricscope.stopping import Cleanup, interrupt_on_terminate

STOP_GRACE_S = 12.0  # a stream worker's own stop is bounded at 10 s (streams.runtime.bounded_stop)
FAUST_GROUP = "fabricscope"  # the app id (streams.runtime.app): the workers' consumer group, after the prefix
REDUCER_GROUP = "fabricscope-reducer"  # the app id of a `--role reducer` process: its own group
STORE_GROUP = "fabricscope-store"  # sinks.kafka_sink.StoreWriter's default group, after the prefix


@dataclass
class PipelineProcs:
    """Running worker processes (``worker0`` ..), reducer (``reducer``) and store writer (``sink``) on topics
    of ``prefix``.

    Args:
        bootstrap: Kafka bootstrap servers.
        prefix: topic and consumer-group prefix (topics created by the caller).
        var_dir: the pipeline's ``FABRICSCOPE_VAR`` (its embedded store is ``var_dir/clickhouse``).
        workers: worker processes.
        env: extra environment for every child (e.g. ``FABRICSCOPE_STEP_MESSAGES``).
        own_reducer: True (``fabricscope up``'s layout): the workers run ``--role stream`` at ``up``'s lower
            priority (:data:`fabricscope.up.STREAM_WORKER_NICE`) and the reducer runs alone (``--role
            reducer``); False: every worker runs ``--role all`` and one of them reduces.

    Use as a context manager: the children are terminated on exit (:meth:`stop`). While it is entered, a
    SIGTERM to a benchmark that left SIGTERM's default action raises ``KeyboardInterrupt`` instead of ending
    the process on the spot, so the exit stops the children (the reducer, in a session of its own, gets no
    signal its parent's group gets).
    """

    bootstrap: str
    prefix: str
    var_dir: Path
    workers: int = 1
    env: dict[str, str] = field(default_factory=dict)
    own_reducer: bool = True
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    metrics_ports: list[int] = field(default_factory=list)
    cpu_before_restart: dict[str, float] = field(default_factory=dict)
    """CPU seconds of the processes :meth:`restart_worker` replaced (counted in :meth:`cpu`)"""
    stop_grace_s: float = STOP_GRACE_S
    """seconds :meth:`stop` waits for the children before it kills those still running"""
    _restore_signals: Callable[[], None] | None = field(default=None, init=False, repr=False)

    def __enter__(self) -> PipelineProcs:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
            self._restore_signals = interrupt_on_terminate()
        env = {**os.environ, "KAFKA_BOOTSTRAP": self.bootstrap, "FABRICSCOPE_TOPIC_PREFIX": self.prefix,
               "FABRICSCOPE_VAR": str(self.var_dir), **self.env}
        exe = [sys.executable, "-m", "fabricscope"]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cwd": self.var_dir}
        self.procs["sink"] = subprocess.Popen([*exe, "sink"], env=env, **quiet)
        self.metrics_ports = [free_port() for _ in range(self.workers)]
        from fabricscope.supervise import child_env
        from fabricscope.up import STREAM_WORKER_NICE

        role = ["--role", "stream", "--nice", str(STREAM_WORKER_NICE)] if self.own_reducer else ["--role", "all"]
        for w, port in enumerate(self.metrics_ports):
            self.procs[f"worker{w}"] = subprocess.Popen([*exe, "worker", *role, "--metrics-port", str(port)],
                                                        env=env, **quiet)
        self._worker_env = env
        if self.own_reducer:
            # a session of its own, as `fabricscope up` starts it (a CPU share of its own under autogroup
            # scheduling); out of the benchmark's process group, so it dies with the benchmark by itself
            self.procs["reducer"] = subprocess.Popen([*exe, "worker", "--role", "reducer"], env=child_env(env),
                                                     start_new_session=True, **quiet)
        return self

    def restart_worker(self, name: str) -> None:
        """``kill -9`` the worker ``name`` (``worker0`` ..) and start it again with the same command, as an
        operator's restart after a crash: its partitions go back to the group and it rejoins."""
        old = self.procs[name]
        spent = cpu_s(old.pid)
        old.kill()
        old.wait()
        self.cpu_before_restart[name] = self.cpu_before_restart.get(name, 0.0) + spent
        self.procs[name] = subprocess.Popen(old.args, env=self._worker_env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, cwd=self.var_dir)

    @property
    def reducer_group(self) -> str:
        """The consumer group (without the prefix) that reads ``window.partials``."""
        return REDUCER_GROUP if self.own_reducer else FAUST_GROUP

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            if self._restore_signals is not None:
                self._restore_signals()
                self._restore_signals = None

    def stop(self, grace_s: float | None = None) -> None:
        """Terminate every child and wait for them: those still running after ``grace_s`` seconds (default
        :attr:`stop_grace_s`) are killed.

        A second SIGINT/SIGTERM meanwhile (the benchmark's first one is what unwound to here) kills every
        child at once and exits the benchmark with 1 (:class:`fabricscope.stopping.Cleanup`), naming the topics
        it leaves: no child outlives it, the reducer included, which runs in a session of its own.
        """
        self._signal_all(kill=False)
        # signals are the main thread's: elsewhere the grace alone bounds the stop
        main = threading.current_thread() is threading.main_thread()
        with (Cleanup("fabricscope bench", deadline_s=None, on_abort=lambda: self._signal_all(kill=True)) if main
              else contextlib.nullcontext()) as cleanup:
            if cleanup is not None:
                # an abort kills the children; what the benchmark's own clean-up would still have removed stays
                cleanup.owe("topics", f"its topics on {self.bootstrap} (names starting {self.prefix})")
            self._wait_or_kill(self.stop_grace_s if grace_s is None else grace_s)

    def _wait_or_kill(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def _signal_all(self, kill: bool) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                (p.kill if kill else p.terminate)()

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Wait until the store writer serves queries (store open and migrated) and every worker serves metrics.

        Raises:
            RuntimeError: a child exited, or ``timeout_s`` passed.
        """
        import httpx

        from sinks.query_endpoint import find_endpoint

        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if dead := self.dead():
                raise RuntimeError(f"{dead} exited during start-up")
            up = find_endpoint(self.store_path) is not None
            for port in self.metrics_ports:
                try:
                    up = up and httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 200
                except httpx.HTTPError:
                    up = False
            if up:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the store writer or a worker did not come up in {timeout_s:.0f} s")

    @property
    def store_path(self) -> Path:
        """The embedded store the writer owns."""
        return self.var_dir / "clickhouse"

    def dead(self) -> list[str]:
        """Names of children that have exited (a benchmark stops waiting on them)."""
        return [n for n, p in self.procs.items() if p.poll() is not None]

    def cpu(self, broker_pid: int | None) -> dict[str, float]:
        """CPU seconds so far of every child and of the broker process (NaN when not on this machine)."""
        out = {n: cpu_s(p.pid) + self.cpu_before_restart.get(n, 0.0) for n, p in self.procs.items()}
        out["broker"] = cpu_s(broker_pid) if broker_pid else float("nan")
        return out

    def rss(self) -> dict[str, float]:
        """Current RSS (MiB) of every child."""
        return {n: rss_mib(p.pid) for n, p in self.procs.items()}

    def peak_rss(self) -> dict[str, float]:
        """Peak RSS (VmHWM, MiB) of every child."""
        return {n: peak_rss_mib(p.pid) for n, p in self.procs.items()}

    def query(self, sql: str) -> list[dict] | None:
        """Rows of ``sql`` through the writer's query endpoint; None while it is not serving yet."""
        from sinks.query_endpoint import find_endpoint, query_remote

        url = find_endpoint(self.store_path)
        return query_remote(url, sql).to_pylist() if url else None


def broker_pid(bootstrap: str) -> int | None:
    """The local broker's process (its CPU is counted per row), or None when it runs elsewhere."""
    return listener_pid(int(bootstrap.split(",")[0].rsplit(":", 1)[1]))


def worker_loop_lag_ms(ports: list[int]) -> tuple[float, float]:
    """p99 and max (upper bucket bounds, ms) of the workers' event-loop lag histograms, merged."""
    import httpx

    buckets: dict[float, float] = {}
    for port in ports:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        except httpx.HTTPError:
            continue
        for line in text.splitlines():
            if line.startswith("fabricscope_worker_event_loop_lag_seconds_bucket"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                bound = float("inf") if le == "+Inf" else float(le)
                buckets[bound] = buckets.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    if not buckets or not buckets.get(float("inf")):
        return float("nan"), float("nan")
    bounds = sorted(buckets)
    total = buckets[float("inf")]
    p99 = next(b for b in bounds if buckets[b] >= 0.99 * total)
    top = next(b for b in bounds if buckets[b] >= total)
    return p99 * 1000, top * 1000


class GroupLag:
    """Consumer lag (messages not yet committed) of consumer groups, per topic, read from the broker.

    Args:
        bootstrap: Kafka bootstrap servers.
        groups: ``{group id: [topic, ...]}``; every partition of each topic is counted.

    A group that has committed nothing on a partition lags by the whole partition (its
    ``auto.offset.reset`` is earliest).
    """

    def __init__(self, bootstrap: str, groups: dict[str, list[str]]):
        from confluent_kafka import Consumer, TopicPartition

        self._meta = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-lag-meta"})
        self._groups: dict[str, tuple[Consumer, list[TopicPartition]]] = {}
        for g, topics in groups.items():
            md = self._meta.list_topics(timeout=10).topics
            tps = [TopicPartition(t, p) for t in topics for p in sorted(md[t].partitions)]
            # a consumer that never subscribes never joins the group: it only reads its committed offsets
            self._groups[g] = (Consumer({"bootstrap.servers": bootstrap, "group.id": g,
                                         "enable.auto.commit": False}), tps)

    def sample(self) -> dict[str, int]:
        """``{topic: lag in messages}`` summed over partitions (a topic read by two groups: both summed)."""
        out: dict[str, int] = {}
        for consumer, tps in self._groups.values():
            committed = self._committed(consumer, tps)
            for tp in committed:
                _, high = self._meta.get_watermark_offsets(tp, timeout=10, cached=False)
                done = tp.offset if tp.offset >= 0 else 0
                out[tp.topic] = out.get(tp.topic, 0) + max(0, high - done)
        return out

    @staticmethod
    def _committed(consumer: Any, tps: list[Any], tries: int = 10) -> list[Any]:
        """The group's committed offsets; the coordinator moving or loading (a group just created, a leader
        change) is retried, up to ``tries`` times 0.5 s apart, as Kafka's own clients do.

        Raises:
            KafkaException: any other error, or the coordinator still not answering after the tries.
        """
        from confluent_kafka import KafkaError, KafkaException

        retriable = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                     KafkaError.COORDINATOR_NOT_AVAILABLE}
        for _ in range(tries - 1):
            try:
                return consumer.committed(tps, timeout=10)
            except KafkaException as err:
                if not err.args or err.args[0].code() not in retriable:
                    raise
                time.sleep(0.5)
        return consumer.committed(tps, timeout=10)

    def close(self) -> None:
        """Close the broker connections."""
        for consumer, _ in self._groups.values():
            consumer.close()
        self._meta.close()
