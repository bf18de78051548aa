"""A broker of a replicated 3-node KRaft cluster killed (kill -9) under load, at a seeded point.

The cluster is ``infra/kafka/kafka.sh cluster`` on free loopback ports (started and stopped here).
Topics get 3 replicas and ``min.insync.replicas`` 2; producers use ``acks=all`` with idempotence.
The simulator (scenario ``switch-link-down``, fixed seed and event time) feeds 6 agents, one
upload per second; workers and the store writer run as in production. Run twice on the same
cluster, under two topic prefixes: once untouched (the reference), once with the broker that leads
partition 0 of ``probes.raw`` killed mid-stream and restarted a few seconds later. Then:

* every partition had a live leader again within seconds, well inside the reducer's partition idle
  timeout (so no partition left the watermark);
* ClickHouse holds every produced row exactly once, in ``probes`` and in every rollup tier;
* the verdicts of every window closed in both runs (the windows around the kill among them) are the
  reference's, with the same identities;
* the time to recover (the consumer groups' lag back to zero after the kill) is printed.

The seed is ``FABRICSCOPE_FAILURE_SEED`` (default 8), printed with the kill point.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from reliability import (
    ROLLUPS,
    GroupLag,
    PrivateCluster,
    partition_leaders,
    rollup_probes,
    settled_counts,
    store_counts,
)

from fabricscope.demo import DemoResult, _Collector
from fabricscope.kafka_admin import create_topics, describe_topics
from producers.kafka_producer import AgentProducer
from producers.sim import Simulator
from producers.sim.fabrics import panel1
from producers.sim.scenarios import scenario_faults
from producers.sim_publish import publish_sim
from schemas.topics import ALL_TOPICS, topic_name
from schemas.verdicts import WINDOW_NS

from conftest import Processes, wait_for
from probe_rows import recent

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SEED = int(os.environ.get("FABRICSCOPE_FAILURE_SEED", "8"))
START = recent(1_795_000_000_000_000_000)  # fixed event time: both runs publish the same stream
SCENARIO, SIM_SEED = "switch-link-down", 3
UPLOADS = 14  # 5 s each: 70 s of event time, windows of 20 s; the first three close by the watermark
# one upload (6 agents, ~3,000 probe rows) per 2 s of wall time: a worker on 2 shared cores keeps up,
# so the lag is near zero before the kill and the time to recover measures the failure, not a backlog
PACE_S = 2.0
IDLE_S = 20.0  # the reducer's partition idle timeout in both runs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    c = PrivateCluster(tmp_path_factory.mktemp("kcluster"), brokers=3)
    c.start()
    yield c
    c.cleanup()


@dataclass
class Run:
    """What one run produced and observed."""

    rows: int = 0
    result: DemoResult = field(default_factory=lambda: DemoResult(SCENARIO, "sim", {}))
    # (time.monotonic(), workers' lag on probes.raw, store writer's on probes.raw); None: no answer
    lag: list[tuple[float, int | None, int | None]] = field(default_factory=list)

    def verdicts_by_window(self) -> dict[int, list[tuple]]:
        out: dict[int, list[tuple]] = {}
        for v in self.result.verdicts:
            out.setdefault(v["window_start_ns"], []).append((v["verdict_id"], v["kind"], v["location"],
                                                              v["revision_of"]))
        return {ws: sorted(vs) for ws, vs in out.items()}

    def closed(self) -> set[int]:
        return {w["window_start_ns"] for w in self.result.windows}


def _pipeline(cluster: PrivateCluster, tmp: Path, prefix: str) -> tuple[Processes, Path]:
    env = {**os.environ, "KAFKA_BOOTSTRAP": cluster.bootstrap, "FABRICSCOPE_TOPIC_PREFIX": prefix,
           "FABRICSCOPE_VAR": str(tmp / "var"), "FABRICSCOPE_PARTITION_IDLE_S": str(IDLE_S)}
    (tmp / "var").mkdir(parents=True, exist_ok=True)  # the worker makes var/faust, not its parents
    create_topics(cluster.bootstrap, prefix)
    procs = Processes(env, tmp)
    procs.start("sink")
    procs.start("worker")
    return procs, tmp / "var" / "clickhouse"


def _alive(procs: Processes, logs: Path) -> bool:
    """True while every worker and the sink run; fails the test at once (naming the logs) otherwise."""
    if any(p.poll() is not None for p in procs.procs):
        pytest.fail(f"a worker or the sink exited; logs in {logs}")
    return True


def _lag_sampler(bootstrap: str, prefix: str, run: Run, done: threading.Event) -> threading.Thread:
    """Samples the workers' lag on probes.raw and the store writer's (its own group) every 0.5 s (Faust
    commits every 2.8 s, so the workers' lag moves in steps of about that)."""
    def loop() -> None:
        workers = GroupLag(bootstrap, f"{prefix}fabricscope", f"{prefix}probes.raw")
        store = GroupLag(bootstrap, f"{prefix}fabricscope-store", f"{prefix}probes.raw")
        try:
            while not done.is_set():
                run.lag.append((time.monotonic(), workers.lag(), store.lag()))
                done.wait(0.5)
        finally:
            workers.close()
            store.close()

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return th


def _run(cluster: PrivateCluster, tmp: Path, prefix: str, on_upload=None) -> Run:  # noqa: ANN001
    """Publish the scenario paced at ``PACE_S``; ``on_upload(i)`` runs before upload i. Waits for every row
    in the store and the windows to close; returns rows, verdicts, window summaries and lag samples."""
    run = Run()
    procs, store = _pipeline(cluster, tmp, prefix)
    collector = _Collector(cluster.bootstrap, prefix, {})
    done = threading.Event()
    try:
        inv = panel1()
        faults = scenario_faults(SCENARIO, inv, SIM_SEED, START)
        sim = Simulator(inv, seed=SIM_SEED, faults=faults, inter_tor="even")
        producer = AgentProducer(cluster.bootstrap)
        wait_for(lambda: store_counts(store) is not None, timeout=90, what="the store writer's endpoint")
        t0 = time.monotonic()
        sampler = _lag_sampler(cluster.bootstrap, prefix, run, done)
        step = {"i": 0}

        def pace() -> bool:  # publish_sim asks before every upload: pace it, and let the test act
            i = step["i"]
            if i:
                time.sleep(max(0.0, t0 + i * PACE_S - time.monotonic()))
            if on_upload:
                on_upload(i)
            step["i"] += 1
            collector.poll(run.result, timeout=0.01)
            return False

        run.rows = publish_sim(sim, producer, prefix, START, UPLOADS, stop=pace)
        assert producer.flush(60) == 0
        wait_for(lambda: _alive(procs, tmp) and (c := store_counts(store)) is not None and c[0] >= run.rows,
                 timeout=120, what=f"{run.rows} rows in the store")
        want = {START + k * WINDOW_NS for k in range(3)}  # the first three windows close by the watermark
        wait_for(lambda: (collector.poll(run.result, timeout=0.5), want <= run.closed())[1], timeout=120,
                 what=f"windows {sorted(want)} closed")
        wait_for(lambda: run.lag and run.lag[-1][1] == 0 and run.lag[-1][2] == 0, timeout=120,
                 what="lag zero at the end")
        collector.poll(run.result, timeout=1.0)
        _alive(procs, tmp)
        workers = [p for p in procs.procs if "worker" in p.args]
        got = settled_counts(store, cluster.bootstrap, prefix, workers, run.rows, prefix)  # no late replay
        assert got == (run.rows, run.rows), f"{prefix}: (count, uniqExact) = {got}, produced {run.rows}"
        assert rollup_probes(store) == dict.fromkeys(ROLLUPS, run.rows), f"{prefix}: rollups"
        done.set()
        sampler.join(5)
        return run
    finally:
        done.set()
        collector.close()
        procs.stop_all()


def test_broker_kill_under_load_keeps_every_row_once_and_the_verdicts(cluster, tmp_path):
    rng = random.Random(f"{SEED}:cluster-broker-kill")
    kill_at, kill_after = rng.randrange(4, 8), rng.uniform(0.0, 0.8)
    restart_after = rng.uniform(3.0, 6.0)  # seconds after the leaders moved

    reference = _run(cluster, tmp_path / "ref", "ref.")

    prefix = "kill."
    topics = [topic_name(t, prefix) for t in ALL_TOPICS]
    brokers, states = describe_topics(cluster.bootstrap, "ref.")
    kill: dict = {}
    restarted = threading.Event()

    def on_upload(i: int) -> None:
        if i != kill_at:
            return
        time.sleep(kill_after)
        leaders = partition_leaders(cluster.bootstrap, topics)
        victim = leaders[(f"{prefix}probes.raw", 0)]
        kill.update(node=victim, led=sum(1 for b in leaders.values() if b == victim), of=len(leaders))
        t_kill = time.monotonic()
        cluster.kill(victim)
        kill["t"] = t_kill

        def after() -> None:  # the leaders move; the broker comes back a few seconds later
            while True:
                try:
                    now = partition_leaders(cluster.bootstrap, topics)
                except Exception:  # noqa: BLE001 - the metadata request may hit the dead broker: ask again
                    now = {}
                if now and all(b not in (victim, -1) for b in now.values()):
                    kill["moved_s"] = time.monotonic() - t_kill
                    break
                time.sleep(0.1)
            time.sleep(restart_after)
            cluster.start()
            kill["restarted_s"] = time.monotonic() - t_kill
            restarted.set()

        threading.Thread(target=after, daemon=True).start()

    killed = _run(cluster, tmp_path / "kill", prefix, on_upload)
    assert restarted.wait(120), f"the killed broker did not come back (leaders moved after: {kill.get('moved_s')})"

    assert brokers == 3 and all(s.replication == 3 and s.min_insync == 2 for s in states)
    # leaders moved within seconds: well inside the reducer's idle timeout
    assert kill["moved_s"] < IDLE_S / 2, f"leaders moved after {kill['moved_s']:.1f} s"
    # the same rows (exactly once: checked in _run), the same windows, the same verdicts
    assert killed.rows == reference.rows
    both = reference.closed() & killed.closed()
    kill_ws = START + (kill_at * 5_000_000_000 // WINDOW_NS) * WINDOW_NS
    around = {kill_ws - WINDOW_NS, kill_ws, kill_ws + WINDOW_NS} & {START + k * WINDOW_NS for k in range(3)}
    assert around <= both
    ref_v, kill_v = reference.verdicts_by_window(), killed.verdicts_by_window()
    assert any(ref_v.get(ws) for ws in both), "the reference found no verdict: the comparison would be empty"
    for ws in sorted(both):
        assert kill_v.get(ws, []) == ref_v.get(ws, []), f"window {ws}: verdicts differ from the reference"

    after_kill = [(t - kill["t"], w, s) for t, w, s in killed.lag if t >= kill["t"]]
    recovered = next((t for t, w, s in after_kill if w == 0 and s == 0 and t >= kill["moved_s"]), None)
    workers_back = next((t for t, w, _ in after_kill if w == 0 and t >= kill["moved_s"]), None)
    assert recovered is not None, f"lag never back to zero after the kill: {after_kill}"
    peak = max((w or 0) + (s or 0) for _, w, s in after_kill)
    before = [(w or 0) + (s or 0) for t, w, s in killed.lag if kill["t"] - 10 <= t < kill["t"]]
    if os.environ.get("FABRICSCOPE_DEBUG_LAG"):
        print("lag after the kill (s, workers, store):", [(round(t, 1), w, s) for t, w, s in after_kill])
    print(f"\nseed={SEED}: killed broker {kill['node']} (leader of probes.raw/0 and {kill['led']} of {kill['of']} "
          f"partitions) {kill_after:.2f} s into upload {kill_at}; leaders moved in {kill['moved_s']:.2f} s; "
          f"broker back {kill['restarted_s']:.1f} s after the kill; consumer lag (workers + store writer) "
          f"{max(before, default=0)} messages at most in the 10 s before the kill, peaked at {peak} and was back to "
          f"zero {recovered:.1f} s after the kill (time to recover; the workers' own lag at {workers_back:.1f} s); "
          f"rows {killed.rows} stored once in probes and {', '.join(ROLLUPS)}; verdicts of windows "
          f"{[(ws - START) // WINDOW_NS for ws in sorted(both)]} equal the reference's "
          f"({sum(len(v) for v in ref_v.values())} verdicts)")
