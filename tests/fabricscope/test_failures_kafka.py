"""Failures the pipeline must survive, each at a seeded random point, on the real broker and chdb.

After each failure the store must hold every row the agents produced, once:
``count() = uniqExact(agent_id, seq) = rows produced`` in ``probes``.
The seed is ``FABRICSCOPE_FAILURE_SEED`` (default 8); each test prints it with
its kill point so a failure can be replayed.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reliability import (
    ROLLUPS,
    Fleet,
    PrivateBroker,
    group_members,
    query,
    rollup_probes,
    settled_counts,
    store_counts,
    topic_messages,
)

from fabricscope.kafka_admin import create_topics
from producers.kafka_producer import AgentProducer

from conftest import REPO, Processes, read_topic, wait_for

pytestmark = pytest.mark.kafka

SEED = int(os.environ.get("FABRICSCOPE_FAILURE_SEED", "8"))
ROUNDS = 12  # 4 agents x 12 rounds x 50 probes = 2400 rows per test


# The store writer's block budget in these tests: a test runs ~5 s, so with the default (10 s) every kill
# would land before or after the one block; at 0.5 s the kills land between blocks and inside them.
SINK_BLOCK_S = "0.5"


@pytest.fixture
def pipeline_env(pipeline_env):
    """conftest's ``pipeline_env`` with short store-writer blocks (:data:`SINK_BLOCK_S`)."""
    env, procs = pipeline_env
    env["FABRICSCOPE_SINK_BLOCK_S"] = SINK_BLOCK_S
    return env, procs


def _rng(name: str) -> random.Random:
    return random.Random(f"{SEED}:{name}")


# A publish that waited on the broker would take its socket or message timeout (seconds); this bound
# leaves room for a loaded machine's scheduling and still catches that.
NEVER_BLOCKS_S = 0.5


def _wait_first_rows(store: Path) -> None:
    wait_for(lambda: (c := store_counts(store)) is not None and c[0] > 0, timeout=180, what="first rows in the store")


def _assert_exactly_once(store: Path, env: dict[str, str], workers: list[subprocess.Popen], expected: int,
                         what: str) -> tuple[int, int]:
    """Wait for ``expected`` rows and settle the pipeline (the ``workers`` are killed: see
    :func:`reliability.settled_counts`), then check the rows are unique, none came late, and every rollup
    (minute, hour per RNIC pair, hour per ToR pair) counts each of them once too."""
    got = settled_counts(store, env["KAFKA_BOOTSTRAP"], env["FABRICSCOPE_TOPIC_PREFIX"], workers, expected, what)
    assert got == (expected, expected), f"after {what}: (count, uniqExact) = {got}, produced {expected}"
    assert rollup_probes(store) == dict.fromkeys(ROLLUPS, expected), f"rollups after {what}"
    return got


def test_worker_sigkill_mid_stream_loses_and_duplicates_nothing(pipeline_env, tmp_path):
    env, procs = pipeline_env
    prefix, bootstrap = env["FABRICSCOPE_TOPIC_PREFIX"], env["KAFKA_BOOTSTRAP"]
    rng = _rng("worker")
    kill_at, kill_after = rng.randrange(2, ROUNDS - 3), rng.uniform(0.0, 0.6)
    store = tmp_path / "var" / "clickhouse"
    fleet = Fleet(AgentProducer(bootstrap), f"{prefix}probes.raw")
    procs.start("sink")
    worker = procs.start("worker")
    fleet.round_(0)
    _wait_first_rows(store)
    for k in range(1, ROUNDS):
        fleet.round_(k)
        if k == kill_at:
            time.sleep(kill_after)
            worker.send_signal(signal.SIGKILL)
            assert worker.wait(60) == -signal.SIGKILL
            fleet.round_(ROUNDS + k)  # an upload while no worker runs
            worker = procs.start("worker")
        time.sleep(rng.uniform(0.05, 0.3))
    assert fleet.producer.flush(30) == 0
    _assert_exactly_once(store, env, [worker], fleet.rows, "a worker SIGKILL")
    raw = topic_messages(bootstrap, f"{prefix}probes.raw")
    print(f"seed={SEED} worker SIGKILL after round {kill_at} (+{kill_after:.2f} s): rows={fleet.rows} "
          f"raw batches={raw}")
    assert raw == fleet.batches


@pytest.mark.parametrize("how", ["sigkill", "sigstop"])
def test_sink_down_for_a_while_then_back(pipeline_env, tmp_path, how):
    """The embedded store's owner SIGKILLed (restarted 4 s later) or frozen until the broker evicted it
    from its group (session timeout 6 s)."""
    env, procs = pipeline_env
    prefix, bootstrap = env["FABRICSCOPE_TOPIC_PREFIX"], env["KAFKA_BOOTSTRAP"]
    rng = _rng(f"sink-{how}")
    kill_at, kill_after = rng.randrange(2, ROUNDS - 3), rng.uniform(0.0, 0.6)
    store = tmp_path / "var" / "clickhouse"
    fleet = Fleet(AgentProducer(bootstrap), f"{prefix}probes.raw")
    sink = procs.start("sink")
    worker = procs.start("worker")
    fleet.round_(0)
    _wait_first_rows(store)
    for k in range(1, ROUNDS):
        fleet.round_(k)
        if k == kill_at:
            time.sleep(kill_after)
            before = store_counts(store)
            if how == "sigkill":
                sink.send_signal(signal.SIGKILL)
                assert sink.wait(60) == -signal.SIGKILL
                for j in range(2):  # uploads keep flowing while the store is down
                    fleet.round_(ROUNDS + 2 * k + j)
                    time.sleep(2)
                sink = procs.start("sink")
            else:
                sink.send_signal(signal.SIGSTOP)
                fleet.round_(ROUNDS + 2 * k)
                # frozen until the group evicted it (session.timeout.ms 6 s), however long that takes here
                wait_for(lambda: group_members(bootstrap, f"{prefix}fabricscope-store") == 0, timeout=120,
                         what="the frozen sink evicted from its consumer group")
                fleet.round_(ROUNDS + 2 * k + 1)
                sink.send_signal(signal.SIGCONT)
        time.sleep(rng.uniform(0.05, 0.3))
    assert fleet.producer.flush(30) == 0
    _assert_exactly_once(store, env, [worker], fleet.rows, f"the sink {how}")
    assert sink.poll() is None, "the sink exited after coming back"
    print(f"seed={SEED} sink {how} after round {kill_at} (+{kill_after:.2f} s) with {before} rows stored: "
          f"rows={fleet.rows} batches={fleet.batches}")


@pytest.fixture
def private_broker(tmp_path: Path):
    """A second broker on free ports with its own data dir; stopped (only it) afterwards."""
    b = PrivateBroker(tmp_path / "kvar")
    b.start()
    yield b
    b.cleanup()


def test_broker_restart_mid_stream_with_the_agent_buffering(private_broker, tmp_path):
    broker = private_broker
    prefix = "r."
    create_topics(broker.bootstrap, prefix)
    env = {**os.environ, "KAFKA_BOOTSTRAP": broker.bootstrap, "FABRICSCOPE_TOPIC_PREFIX": prefix,
           "FABRICSCOPE_SINK_BLOCK_S": SINK_BLOCK_S,
           "FABRICSCOPE_VAR": str(tmp_path / "var")}
    procs = Processes(env, tmp_path)
    rng = _rng("broker")
    stop_at = rng.randrange(2, ROUNDS - 3)
    store = tmp_path / "var" / "clickhouse"
    fleet = Fleet(AgentProducer(broker.bootstrap), f"{prefix}probes.raw")
    try:
        procs.start("sink")
        worker = procs.start("worker")
        fleet.round_(0)
        _wait_first_rows(store)
        down_publish_s: list[float] = []
        for k in range(1, ROUNDS):
            fleet.round_(k)
            if k == stop_at:
                time.sleep(rng.uniform(0.0, 0.6))
                broker.stop()
                assert not broker.answers()
                n0 = len(fleet.publish_s)
                for j in range(3):  # the agent keeps uploading into its local buffer
                    fleet.round_(ROUNDS + 3 * k + j)
                    time.sleep(0.5)
                down_publish_s = fleet.publish_s[n0:]
                assert fleet.producer.flush(0.1) > 0, "nothing was buffered while the broker was down"
                broker.start()
            time.sleep(rng.uniform(0.05, 0.3))
        assert fleet.producer.flush(60) == 0
        assert fleet.producer.stats.dropped_oldest == 0
        assert max(down_publish_s) < NEVER_BLOCKS_S, f"publish blocked while the broker was down: {down_publish_s}"
        assert all(p.poll() is None for p in procs.procs), "a worker or sink exited across the broker restart"
        _assert_exactly_once(store, env, [worker], fleet.rows, "a broker restart")
        print(f"seed={SEED} broker stopped after round {stop_at}: rows={fleet.rows} batches={fleet.batches}, "
              f"12 uploads buffered, slowest publish while down {max(down_publish_s) * 1000:.1f} ms")
    finally:
        procs.stop_all()


AGENT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from reliability import Fleet
from producers.kafka_producer import AgentProducer
bootstrap, topic, qpn, slot0 = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
fleet = Fleet(AgentProducer(bootstrap), topic, qpn=qpn, slot0=slot0)
for k in range(1000):
    fleet.round_(k, ["h0"])
    assert fleet.producer.flush(60) == 0  # printed rounds are delivered rounds
    print(k, flush=True)
    time.sleep(0.2)
"""


def _first_round(agent: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait until ``agent`` printed its first round (flushed to the broker); its start-up time varies with load."""
    ready, _, _ = select.select([agent.stdout], [], [], timeout)
    assert ready and agent.stdout.readline().strip() == "0", f"agent printed no round in {timeout} s"


def test_agent_restart_with_a_new_qpn(pipeline_env, tmp_path):
    """Agent h0 SIGKILLed and restarted with a new QPN; its peers' probes to the old QPN time out (stale-QPN
    noise). Every row that reached probes.raw is stored once; the timeouts are rows, not dead letters."""
    env, procs = pipeline_env
    prefix, bootstrap = env["FABRICSCOPE_TOPIC_PREFIX"], env["KAFKA_BOOTSTRAP"]
    rng = _rng("agent")
    kill_after = rng.uniform(1.0, 3.0)
    store = tmp_path / "var" / "clickhouse"
    topic = f"{prefix}probes.raw"
    procs.start("sink")
    worker = procs.start("worker")
    tests_dir = str(REPO / "tests")

    def agent(qpn: int, slot0: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", AGENT, tests_dir, bootstrap, topic, str(qpn), str(slot0)],
                                stdout=subprocess.PIPE, text=True)

    first = agent(1000, 0)
    _first_round(first)  # the kill lands after a round reached the broker, however slow the start
    time.sleep(kill_after)
    first.send_signal(signal.SIGKILL)
    first.wait(60)
    rounds_first = 1 + len(first.stdout.read().split())
    second = agent(2000, 10_000)  # new incarnation: new QPN, seqs past the old ones
    peers = Fleet(AgentProducer(bootstrap), topic)
    for k in range(4):  # peers still probe h0-r0 with the old QPN until the registry update: all time out
        peers.round_(k, ["h1", "h2", "h3"])
    stale = _stale_batch(peers, 99)
    assert peers.producer.flush(30) == 0
    _first_round(second)
    time.sleep(1.5)
    second.terminate()
    second.wait(60)
    rounds_second = 1 + len(second.stdout.read().split())
    # rows produced = what reached probes.raw (a SIGKILLed agent may have lost its unsent buffer)
    raw_rows = _raw_rows(bootstrap, topic)
    _assert_exactly_once(store, env, [worker], raw_rows, "an agent restart")
    t = query(store, "SELECT qpn, count() AS n FROM probes WHERE agent_id = 'h0' GROUP BY qpn ORDER BY qpn")
    by_qpn = dict(zip(t["qpn"].to_pylist(), t["n"].to_pylist(), strict=True))
    assert set(by_qpn) == {1000, 2000}
    assert by_qpn[1000] >= rounds_first * 50 and by_qpn[2000] >= rounds_second * 50
    n_stale = query(store, "SELECT count() AS n FROM probes WHERE status = 'timeout' AND responder_rnic = 'h0-r0' "
                           "AND qpn = 1000 AND agent_id != 'h0'")["n"][0].as_py()
    assert n_stale == stale
    dl = query(store, "SELECT count() AS n FROM deadletters")["n"][0].as_py()
    assert dl == 0
    print(f"seed={SEED} agent h0 SIGKILL after {kill_after:.2f} s ({rounds_first} uploads acked), restarted with "
          f"QPN 2000 ({rounds_second} uploads); rows in probes.raw = stored = {raw_rows}; stale-QPN timeouts {stale}")


def _stale_batch(peers: Fleet, slot: int) -> int:
    """One upload of h1 whose probes to h0-r0 carry the old QPN and time out; returns their number."""
    from reliability import SLOT_NS, START_NS

    from producers.synthetic import synthetic_batch
    from schemas.arrow_nano import encode_columns

    n = 20
    cols = synthetic_batch("h1", ["h1-r0"], ["h0-r0"], START_NS + slot * SLOT_NS, n, seed=slot, seq0=slot * 50,
                           timeout_rate=1.0)
    cols["qpn"] = [1000] * n
    peers.producer.publish(peers.topic, encode_columns("probe.v1", cols), "probe.v1", key="h1")
    peers.rows += n
    return n


def _raw_rows(bootstrap: str, topic: str) -> int:
    """Rows in every message of ``topic`` (read to its end)."""
    from schemas.codec import decode

    msgs = read_topic(bootstrap, topic)
    assert len(msgs) == topic_messages(bootstrap, topic)
    return sum(decode(m.value())[1].num_rows for m in msgs)


def test_agent_buffer_is_bounded_drops_the_oldest_waiting_and_never_blocks(tmp_path):
    """60 uploads while no broker runs, buffer of 20: the 2 handed to librdkafka and the newest 18 arrive."""

    broker = PrivateBroker(tmp_path / "kvar")
    try:
        # The topic exists before the agent can reach the broker, as in production (`kafka topics` runs
        # first). Created only after the start, the agent's first batches could reach the broker ahead of
        # it on a slow machine and fail for good (UNKNOWN_TOPIC_OR_PART).
        broker.start()
        create_topics(broker.bootstrap, "b.")
        broker.stop()
        producer = AgentProducer(broker.bootstrap, max_buffered=20)  # the broker is down: "unreachable"
        assert producer.in_flight_max == 2
        took = []
        for i in range(60):
            t0 = time.perf_counter()
            producer.publish("b.probes.raw", str(i).encode(), "probe.v1", key="h0")
            took.append(time.perf_counter() - t0)
        assert max(took) < NEVER_BLOCKS_S, f"publish blocked: {max(took):.3f} s"
        assert producer.stats.dropped_oldest == 40
        broker.start()
        assert producer.flush(60) == 0
        assert producer.stats.failed == 0
        got = [int(m.value()) for m in read_topic(broker.bootstrap, "b.probes.raw")]  # one key: one partition
        assert got == [0, 1, *range(42, 60)]
        assert producer.stats.delivered == 20
        print(f"60 uploads with the broker down, buffer 20: delivered {got[:2]} + {got[2]}..{got[-1]}, "
              f"dropped {producer.stats.dropped_oldest}, slowest publish {max(took) * 1000:.2f} ms")
    finally:
        broker.cleanup()


def test_store_refusing_inserts_for_a_while_then_back(pipeline_env, tmp_path):
    """The store refuses every insert (the data directory of `probes` is not writable, as on a failed or
    full disk) until the sink retried an insert twice: the sink retries the same insert with the same
    token, commits nothing meanwhile, then catches up; every row once in probes and in every rollup.
    (The endpoint is read-only, so the test breaks the directory from outside rather than detaching a
    table through it.)"""
    from sinks.query_endpoint import find_endpoint, query_remote

    env, procs = pipeline_env
    prefix, bootstrap = env["FABRICSCOPE_TOPIC_PREFIX"], env["KAFKA_BOOTSTRAP"]
    rng = _rng("store")
    fail_at = rng.randrange(2, ROUNDS - 3)
    store = tmp_path / "var" / "clickhouse"
    fleet = Fleet(AgentProducer(bootstrap), f"{prefix}probes.raw")
    sink = procs.start("sink")
    worker = procs.start("worker")
    fleet.round_(0)
    _wait_first_rows(store)
    url = find_endpoint(store)
    sink_log = tmp_path / "sink-0.log"
    retries = lambda: sink_log.read_text().count("insert into probes failed, retrying")  # noqa: E731
    for k in range(1, ROUNDS):
        fleet.round_(k)
        if k == fail_at:
            data = Path(query_remote(url, "SELECT data_paths[1] AS p FROM system.tables WHERE name = 'probes' "
                                          "AND database = currentDatabase()")["p"][0].as_py().rstrip("/"))
            data.rename(data.with_name(data.name + ".away"))
            data.write_text("")  # a file where the part directories go: every insert fails (ENOTDIR)
            # count() comes from the parts' metadata in memory; reading their columns would fail now.
            before = query_remote(url, "SELECT count() AS n FROM probes")["n"][0].as_py()
            retried = retries()
            for j in range(3):
                fleet.round_(ROUNDS + 3 * k + j)
            wait_for(lambda n=retried + 2: retries() >= n, timeout=120, what="two refused inserts retried by the sink")
            during = query_remote(url, "SELECT count() AS n FROM probes")["n"][0].as_py()
            data.unlink()
            data.with_name(data.name + ".away").rename(data)
        time.sleep(rng.uniform(0.05, 0.3))
    assert fleet.producer.flush(30) == 0
    assert during == before, f"rows were written while the store refused: {before} -> {during}"
    _assert_exactly_once(store, env, [worker], fleet.rows, "a refusing store")
    assert sink.poll() is None
    print(f"seed={SEED} store refused inserts after round {fail_at} at {before} rows; sink retried "
          f"{retries()} times; rows={fleet.rows}")
