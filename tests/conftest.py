"""Shared fixtures: the real Kafka broker (started by .ci/run or infra/kafka/kafka.sh start)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
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
    """Poll ``predicate()`` until it returns a truthy value; fail with ``what`` after ``timeout`` s."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
