"""Shared fixtures: the real Kafka broker (started by .ci/run or infra/kafka/kafka.sh start)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

#: the repository root: tests name files from it, never from the folder a test module sits in (they move)
REPO = Path(__file__).resolve().parents[1]
BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")


def _broker_answers() -> bool:
    from confluent_kafka.admin import AdminClient

    try:
        return bool(AdminClient({"bootstrap.servers": BOOTSTRAP}).list_topics(timeout=5).brokers)
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The bootstrap address of a live broker. In CI a missing broker fails the test; locally it skips."""
    if not _broker_answers():
        msg = f"no Kafka broker at {BOOTSTRAP}: run infra/kafka/kafka.sh start"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return BOOTSTRAP


@pytest.fixture
def migrated_store(tmp_path: Path) -> Iterator:
    """A fresh embedded store (chdb) with every migration applied; closed afterwards."""
    from sinks.clickhouse import migrate, open_store

    s = open_store(tmp_path / "clickhouse")
    migrate(s)
    yield s
    s.close()


@pytest.fixture
def new_topic(kafka_bootstrap: str) -> Iterator:
    """A factory ``new_topic(suffix, partitions=1) -> name`` of fresh, uniquely named topics (replication 1);
    every topic it made is deleted afterwards."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    made: list[str] = []

    def make(suffix: str, partitions: int = 1) -> str:
        name = f"t{uuid.uuid4().hex[:8]}.{suffix}"
        for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            f.result()
        made.append(name)
        # created is not yet served: a client that asks before every partition has a leader is refused (a
        # mirror's catch-up then applies nothing, by design), so the topic is handed out once it is served
        deadline = time.monotonic() + 30
        while True:
            meta = admin.list_topics(name, timeout=10).topics.get(name)
            if meta is not None and meta.error is None and len(meta.partitions) == partitions and all(
                    pm.leader >= 0 and pm.error is None for pm in meta.partitions.values()):
                return name
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name}: no leader for every partition within 30 s")
            time.sleep(0.1)

    yield make
    if made:
        for f in admin.delete_topics(made).values():
            f.result()


@pytest.fixture
def topic_prefix(kafka_bootstrap: str) -> Iterator[str]:
    """A fresh set of the pipeline's topics under a unique prefix; deleted afterwards."""
    from fabricscope.kafka_admin import create_topics, delete_topics

    prefix = f"t{uuid.uuid4().hex[:8]}."
    create_topics(kafka_bootstrap, prefix)
    yield prefix
    delete_topics(kafka_bootstrap, prefix)


class Processes:
    """Child processes of one test (workers, sinks), stopped at teardown."""

    def __init__(self, env: dict[str, str], logdir: Path) -> None:
        self.env = env
        self.logdir = logdir
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str) -> subprocess.Popen:
        log = open(self.logdir / f"{args[0]}-{len(self.procs)}.log", "w")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen([sys.executable, "-m", "fabricscope", *args], env=self.env, stdout=log,
                             stderr=subprocess.STDOUT, cwd=self.logdir)
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def pipeline_env(tmp_path: Path, topic_prefix: str, kafka_bootstrap: str) -> Iterator[tuple[dict[str, str], Processes]]:
    """Environment for fabricscope child processes on this test's topics and its own embedded store."""
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "FABRICSCOPE_TOPIC_PREFIX": topic_prefix,
        "FABRICSCOPE_VAR": str(tmp_path / "var"),
    }
    procs = Processes(env, tmp_path)
    yield env, procs
    procs.stop_all()


def wait_for(predicate, timeout: float = 90.0, every: float = 0.5, what: str = "condition"):  # noqa: ANN001
    """Poll ``predicate()`` until it returns a truthy value and return that value; fail with ``what`` after
    ``timeout`` s. The timeout only bounds a failure: pick it generous (CI runs on 2 loaded cores).
    Timed on the monotonic clock, so a wall-clock step cannot end or stretch the wait."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            break
        time.sleep(every)
    pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def stays(predicate, seconds: float, every: float = 0.25, what: str = "condition") -> None:  # noqa: ANN001
    """Check that ``predicate()`` holds throughout ``seconds`` s; fail at the first time it does not.

    For absences ("nothing more arrives"): they can only be watched for a span. A slow machine makes the
    check less sensitive, never wrong, so the span is not a race."""
    deadline = time.monotonic() + seconds
    while True:
        if not predicate():
            pytest.fail(f"{what} stopped holding")
        if time.monotonic() >= deadline:
            return
        time.sleep(every)


def _ephemeral_ports() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (``ip_local_port_range``)."""
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(count: int = 1, kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    """The first of ``count`` consecutive 127.0.0.1 ports nothing is bound to now, for a server the test
    starts later.

    Drawn at random below the kernel's ephemeral range: ``bind(0)`` would hand out a port from that range,
    where any outgoing connection (Kafka clients open many) may take it before the server binds it.

    Raises:
        RuntimeError: no free run found in 200 draws.
    """
    eph_lo, eph_hi = _ephemeral_ports()
    lo, hi = 10_000, eph_lo - count
    if hi <= lo:  # a kernel whose ephemeral range starts low: use the ports above it
        lo, hi = eph_hi + 1, 65_536 - count
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(lo, hi)
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, kind)
                socks.append(s)
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return base
    raise RuntimeError(f"no run of {count} free loopback ports in {lo}..{hi}")


def read_topic(bootstrap: str, topic: str, timeout: float = 120.0) -> list:
    """Every message of ``topic`` up to its partitions' high watermarks at the call (offset order within a
    partition; error events skipped), read by a client outside any group.

    Waits until each partition is read to that end rather than for a fixed poll time, so a slow fetch
    cannot cut the list short; fails the test after ``timeout`` s.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}",
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1] for p in parts}
        todo = {p for p, end in ends.items() if end > 0}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        out = []
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() >= deadline:
                pytest.fail(f"read {len(out)} messages of {topic} in {timeout} s; partitions {sorted(todo)} "
                            f"not read to their ends {ends}")
            for m in c.consume(500, timeout=1):
                if not m.error() and m.offset() < ends[m.partition()]:
                    out.append(m)
            todo = {tp.partition for tp in c.position([TopicPartition(topic, p) for p in todo])
                    if tp.offset < ends[tp.partition]}
        return out
    finally:
        c.close()


_FORKS: list[str] | None = None  # while a test holds `no_fork`: where os.fork was called


def _fork_audit(event: str, args: tuple) -> None:
    if _FORKS is not None and event in ("os.fork", "os.forkpty"):
        import traceback

        _FORKS.append("".join(traceback.format_stack(limit=12)))
        raise RuntimeError("os.fork inside a test that forbids it (no fork of a multi-threaded process)")


sys.addaudithook(_fork_audit)  # audit hooks cannot be removed: this one acts only while `no_fork` is held


@pytest.fixture
def no_fork() -> Iterator[list[str]]:
    """Any ``os.fork`` in this process during the test raises, and its stack is recorded in the list.

    ``subprocess`` (fork+exec in C, no Python code in the child) is not a fork here; pyroute2's netns
    helpers and ``multiprocessing``'s fork start method are.
    """
    global _FORKS
    _FORKS = []
    try:
        yield _FORKS
    finally:
        _FORKS = None


@pytest.fixture(params=["batched", "python"])
def socket_calls(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test over the udp engine's compiled batch calls (``recvmmsg``/``sendmmsg``) and over its
    pure-Python fallback (one datagram per call), which a host without a C compiler gets."""
    from producers import udp_prober

    if request.param == "batched":
        if udp_prober._udpbatch is None:
            pytest.fail("producers._udpbatch is not built: `pip install -e .` compiles it (setup.py)")
    else:
        monkeypatch.setattr(udp_prober, "_udpbatch", None)
    yield request.param
