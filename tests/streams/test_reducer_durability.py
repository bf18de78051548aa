"""The reducer survives kill -9 mid-window on the real broker: the verdicts equal an uninterrupted run's.

A dead RNIC (``rnic C1`` from the start) whose host then goes down mid-window (``host_down H5``,
revising the earlier ``rnic C1`` verdict): the revision needs the analyzer state carried from
earlier windows, so a reducer that lost its state on restart would miss it or differ. The worker
batches many raw messages per step; the restarted one re-reads what was not committed, grouped
differently, so a step merged twice would double that window's counts. Killed twice: before the
worker's first commit, and after it (resuming raw partitions and rebuilding the reducer past 0).
Both process layouts: one worker that also reduces (``--role all``, killed), and ``fabricscope up``'s,
a worker (``--role stream``) beside a reducer process of its own (``--role reducer``, killed)."""

from __future__ import annotations

import json
import random
import signal
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from fabricscope.kafka_admin import create_topics, delete_topics
from producers.kafka_producer import AgentProducer
from producers.sim import HostDown, RnicDown, Simulator
from producers.sim.fabrics import panel1
from producers.sim_publish import publish_sim
from schemas import topics as T
from schemas.codec import decode

from conftest import wait_for
from probe_rows import recent

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

START = recent(1_796_000_000_000_000_000)
S = 1_000_000_000
ROUNDS = 18  # 90 s of 5 s uploads: windows 0-3 close
FAULTS = [RnicDown("C1"), HostDown("H5", start_ns=START + 33 * S)]


class _Topics:
    """Reads verdicts and window summaries of one prefix from the beginning."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dur-{uuid.uuid4().hex[:6]}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.c.subscribe([T.topic_name(T.VERDICTS, prefix), T.topic_name(T.WINDOWS_CLOSED, prefix),
                          T.topic_name(T.WINDOW_PARTIALS, prefix)])
        self.verdicts: list[dict] = []
        self.closed: list[int] = []
        self.newest_partial_upload = 0

    def poll(self) -> None:
        for m in self.c.consume(num_messages=500, timeout=0.5):
            if m.error():
                continue
            if m.topic().endswith("windows.closed"):
                self.closed.append(json.loads(m.value())["window_start_ns"])
            elif m.topic().endswith("window.partials"):
                h = dict(m.headers() or [])
                self.newest_partial_upload = max(self.newest_partial_upload, int(h["upload_ns"]))
            else:
                self.verdicts.extend(decode(m.value(), "verdict.v1")[1].to_pylist())

    def windows(self, n: int) -> bool:
        self.poll()
        return len(set(self.closed)) >= n


# layout -> (roles of the processes started, the role of the one killed: the reducer's owner)
LAYOUTS = {"one process": (("all",), "all"), "own reducer": (("stream", "reducer"), "reducer")}


def _worker(procs, role: str):
    Path(procs.env["FABRICSCOPE_VAR"]).mkdir(parents=True, exist_ok=True)
    return procs.start("worker", "--role", role)


def _alive(procs) -> None:
    dead = [p.args for p in procs.procs if p.poll() not in (None, -signal.SIGKILL)]
    assert not dead, f"a pipeline process exited; see the logs in {procs.logdir}"


def _committed(bootstrap: str, prefix: str, reducer_group: str) -> dict[str, int]:
    """Committed offsets: the workers' highest of ``probes.raw``'s partitions, the reducer's of ``window.partials``."""
    out = {}
    for group, tps in ((f"{prefix}fabricscope", [TopicPartition(T.topic_name(T.PROBES_RAW, prefix), p)
                                                  for p in range(T.PROBES_RAW.partitions)]),
                       (f"{prefix}{reducer_group}", [TopicPartition(T.topic_name(T.WINDOW_PARTIALS, prefix), 0)])):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            out["partials" if len(tps) == 1 else "raw"] = max(tp.offset for tp in c.committed(tps, timeout=10))
        finally:
            c.close()
    return out


def _run(bootstrap: str, prefix: str, procs, kill_after: int | None, commit_first: bool = False,
         layout: str = "one process") -> _Topics:
    create_topics(bootstrap, prefix)
    producer = AgentProducer(bootstrap)
    sim = Simulator(panel1(), seed=7, faults=FAULTS, inter_tor="even")
    seen = _Topics(bootstrap, prefix)
    roles, owner = LAYOUTS[layout]
    started = {role: _worker(procs, role) for role in roles}
    victim = started[owner]
    reducer_group = "fabricscope-reducer" if owner == "reducer" else "fabricscope"
    if kill_after is None:
        publish_sim(sim, producer, prefix, START, ROUNDS)
    else:
        first = 0
        if commit_first:  # the worker commits part of the stream: the restart resumes and rebuilds past offset 0
            first = kill_after - 2
            publish_sim(sim, producer, prefix, START, first)
            wait_for(lambda: (_alive(procs), min(_committed(bootstrap, prefix, reducer_group).values()) > 0)[1],
                     what="the worker's first commits")
        publish_sim(sim, producer, prefix, START, kill_after, first=first)
        last_upload = START + kill_after * 5 * S
        # the worker has turned the last round into partials (the reducer is applying them now)
        wait_for(lambda: (_alive(procs), seen.poll(), seen.newest_partial_upload >= last_upload)[2],
                 what="partials of the last round")
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        _worker(procs, owner)
        publish_sim(sim, producer, prefix, START, ROUNDS, first=kill_after)
    wait_for(lambda: (_alive(procs), seen.windows(4))[1], timeout=240, what="four windows closed")
    seen.poll()
    return seen


def _key(v: dict) -> tuple:
    return (v["window_start_ns"], v["kind"], v["location"], v["verdict_id"], v["revision_of"] or "",
            v["failed_probes"], v["total_probes"], v["confidence"])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_kill_9_mid_window_gives_the_uninterrupted_verdicts(kafka_bootstrap, pipeline_env, layout):
    env, procs = pipeline_env
    kill_after = random.Random(12).choice([6, 7, 9, 10, 11])  # a seeded point inside a window (not on a 20 s edge)
    assert kill_after % 4
    runs, logs = {}, procs.logdir
    for name, kill, commit_first in (("uninterrupted", None, False), ("killed", kill_after, False),
                                     ("killed after commits", kill_after, True)):
        prefix = f"d{uuid.uuid4().hex[:6]}."
        procs.env = {**env, "FABRICSCOPE_TOPIC_PREFIX": prefix, "FABRICSCOPE_PARTITION_IDLE_S": "15"}
        procs.logdir = logs / name.replace(" ", "-")  # each run's worker logs kept apart
        procs.logdir.mkdir()
        try:
            runs[name] = _run(kafka_bootstrap, prefix, procs, kill, commit_first, layout)
        finally:
            procs.stop_all()
            procs.procs.clear()
            delete_topics(kafka_bootstrap, prefix)
    whole = {_key(v) for v in runs["uninterrupted"].verdicts if v["window_start_ns"] < START + 80 * S}
    for name in ("killed", "killed after commits"):
        killed = {_key(v) for v in runs[name].verdicts if v["window_start_ns"] < START + 80 * S}
        assert killed == whole, (name, sorted(killed - whole), sorted(whole - killed))
        # every window was emitted once, before and after the kill together
        closed = [w for w in runs[name].closed if w < START + 80 * S]
        assert sorted(closed) == sorted(set(closed)), name
    kinds = {(k[1], k[2], bool(k[4])) for k in whole}
    assert ("rnic", "C1", False) in kinds and ("host_down", "H5", True) in kinds  # the revision needs carried state
