"""`fabricscope demo`: one scenario through the whole pipeline on the real broker, verdicts out.

Starts (or reuses) the local Kafka broker, creates topics under a fresh prefix,
runs the store writer and the Faust worker(s) as child processes, feeds a source
(the netns lab with a real injected fault, or the simulator), and collects the
verdicts and the closed-window summaries from their topics. Used by the end-to-end
tests and by people who want to see the product work.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer

from fabricscope.settings import Settings
from fabricscope.stopping import Cleanup, call_abandonable
from fabricscope.supervise import child_env
from infra.process_group import kill_group, signal_group
from schemas.codec import decode
from schemas.verdicts import WINDOW_NS

JOB_ID = "job-h1h3"


@dataclass
class DemoResult:
    """Verdicts (dicts of verdict.v1) and window summaries collected, and what was injected."""

    scenario: str
    source: str
    truth: dict
    verdicts: list[dict] = field(default_factory=list)
    windows: list[dict] = field(default_factory=list)
    fault_start_ns: int = 0
    injected_ns: int = 0

    def complete_windows(self) -> list[dict]:
        """Summaries of windows that started at or after the fault (the 'first complete window' on)."""
        return [w for w in self.windows if w["window_start_ns"] >= self.fault_start_ns]

    def verdicts_in(self, window_start_ns: int) -> list[dict]:
        """Verdicts of one window."""
        return [v for v in self.verdicts if v["window_start_ns"] == window_start_ns]


class _Collector:
    def __init__(self, bootstrap: str, prefix: str, conf: dict[str, str]) -> None:
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}demo-{uuid.uuid4().hex[:6]}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
        self.c.subscribe([f"{prefix}verdicts", f"{prefix}windows.closed"])

    def poll(self, result: DemoResult, timeout: float = 1.0) -> None:
        for m in self.c.consume(num_messages=100, timeout=timeout):
            if m.error():
                continue
            if m.topic().endswith("windows.closed"):
                result.windows.append(json.loads(m.value()))
            else:
                result.verdicts.extend(decode(m.value(), "verdict.v1")[1].to_pylist())

    def close(self) -> None:
        # librdkafka's close() takes no timeout and no signal interrupts it: past 5 s it is abandoned
        call_abandonable(self.c.close, 5.0)


def _children(s: Settings, prefix: str, var: Path, workers: int, thresholds: dict | None = None
              ) -> list[subprocess.Popen]:
    env = {**os.environ, "KAFKA_BOOTSTRAP": s.kafka_bootstrap, "FABRICSCOPE_TOPIC_PREFIX": prefix,
           "FABRICSCOPE_VAR": str(var), "FABRICSCOPE_PARTITION_IDLE_S": "5", "FABRICSCOPE_ORIGIN": "demo",
           "FABRICSCOPE_JOB_THRESHOLDS": json.dumps(thresholds or {})}
    exe = [sys.executable, "-m", "fabricscope"]
    var.mkdir(parents=True, exist_ok=True)
    names = ["sink", *(f"worker{i}" for i in range(workers))]
    procs = []
    for name in names:
        with open(var / f"{name}.log", "w") as log:
            # a group of its own (a terminal's Ctrl-C reaches the demo only), dying with the demo
            procs.append(subprocess.Popen([*exe, name.rstrip("0123456789")], env=child_env(env), stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, process_group=0))
    return procs


def _stop(procs: list[subprocess.Popen], timeout_s: float = 5.0) -> None:
    for p in procs:
        signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        kill_group(p)


def run_demo(s: Settings, source: str, scenario: str, seed: int = 1, windows: int = 1, workers: int = 1,
             var: Path | None = None, prefix: str | None = None, timeout_s: float = 240.0,
             start_ns: int | None = None, on_verdict=None, warmup_s: float = 6.0,  # noqa: ANN001
             job: tuple[float, float] | None = None, cleanup_s: float | None = None) -> DemoResult:
    """Run ``scenario`` on ``source`` (``sim`` or ``lab``) until ``windows`` complete windows after the
    fault have closed (or ``timeout_s``); returns what the pipeline said.

    ``job`` = (metric value, threshold): on the sim, the digest's job H1+H3 (``job-h1h3``: A2→B2 via
    S3, A1→B1 via S1) runs on the ``service`` pinglist and reports that metric each upload; below the
    threshold its problems are P0, else P1. ``cleanup_s`` bounds the clean-up after a stop (the
    command passes it; see :class:`fabricscope.stopping.Cleanup`); a second signal during it exits.

    Raises:
        ValueError: unknown source or scenario.
        infra.lab.netns.LabError: the lab needs root and network namespaces.
    """
    from fabricscope.kafka_admin import create_topics, delete_topics

    if source not in ("sim", "lab"):
        raise ValueError(f"unknown source {source!r}: use sim or lab")
    prefix = prefix or f"demo{uuid.uuid4().hex[:6]}."
    own_var = var is None
    tmp = tempfile.TemporaryDirectory(prefix="fabricscope-demo-") if own_var else None
    var = Path(tmp.name) if tmp else var
    create_topics(s.kafka_bootstrap, prefix, s.kafka_client_config())
    thresholds = {JOB_ID: {"value": job[1]}} if job else None
    procs = _children(s, prefix, var, workers, thresholds)
    collector = _Collector(s.kafka_bootstrap, prefix, s.kafka_client_config())
    try:
        if source == "sim":
            result = _feed_sim(s, prefix, scenario, seed, windows, start_ns, job[0] if job else None)
        else:
            from fabricscope.cmd_lab import start_lab_source

            lab = start_lab_source(s.kafka_bootstrap, prefix, seed=seed, directory=var / "lab",
                                   kafka_config=s.kafka_client_config() or None)
            time.sleep(warmup_s)  # healthy traffic first: baselines and paths
            now = time.time_ns()
            t = lab.scenario(scenario, seed=seed)
            result = DemoResult(scenario, source, {"kind": t.kind, "locations": list(t.locations)},
                                fault_start_ns=(time.time_ns() // WINDOW_NS + 1) * WINDOW_NS, injected_ns=now)
        deadline = time.time() + timeout_s
        seen = 0
        while time.time() < deadline and len(result.complete_windows()) < windows:
            collector.poll(result)
            if on_verdict:
                for v in result.verdicts[seen:]:
                    on_verdict(v)
                seen = len(result.verdicts)
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a pipeline process exited; see the logs in {var}")
        collector.poll(result, timeout=2.0)
        if on_verdict:
            for v in result.verdicts[seen:]:
                on_verdict(v)
        _wait_stored(var / "clickhouse", len({v["verdict_id"] for v in result.verdicts}), deadline)
        return result
    finally:
        with Cleanup("fabricscope demo", cleanup_s, on_abort=lambda: [kill_group(p) for p in procs]) as cleanup:
            for p in procs:
                signal_group(p, signal.SIGTERM)
            if source == "lab":
                cleanup.owe("lab", f"the demo's lab in {var / 'lab'} (`fabricscope lab down --dir {var / 'lab'}`)")
                from infra.lab.netns import down_if_ours

                down_if_ours(var / "lab")  # also a lab half-built when the stop came
                cleanup.done("lab")
            collector.close()
            _stop(procs)
            cleanup.owe("topics", f"the demo's topics {prefix}* (`fabricscope topics` lists them)")
            delete_topics(s.kafka_bootstrap, prefix, s.kafka_client_config())
            cleanup.done("topics")
            if tmp:
                tmp.cleanup()


def _wait_stored(store_path: Path, n_verdicts: int, deadline: float) -> None:
    """Wait until the sink has written the verdicts seen on the topic (it is stopped next)."""
    from sinks.query_endpoint import find_endpoint, query_remote

    while time.time() < deadline + 30:
        url = find_endpoint(store_path)
        if url and query_remote(url, "SELECT uniqExact(verdict_id) AS n FROM verdicts")["n"][0].as_py() >= n_verdicts:
            return
        time.sleep(0.5)


def _feed_sim(s: Settings, prefix: str, scenario: str, seed: int, windows: int, start_ns: int | None,
              job_value: float | None) -> DemoResult:
    from producers.kafka_producer import AgentProducer
    from producers.sim import Simulator
    from producers.sim.fabrics import panel1
    from producers.sim.scenarios import panel1_job_connections, scenario_faults
    from producers.sim_publish import publish_sim

    inv = panel1()
    start = start_ns or (time.time_ns() // WINDOW_NS) * WINDOW_NS
    faults = scenario_faults(scenario, inv, seed, start)
    truth = [{k: v for k, v in t.items() if k in ("kind", "location")}
             for t in Simulator(inv, seed=seed, faults=faults).truth()]
    sim = Simulator(inv, seed=seed, faults=faults, inter_tor="even")
    if job_value is not None:
        sim.set_connections(panel1_job_connections(sim, JOB_ID))
    producer = AgentProducer(s.kafka_bootstrap, kafka_config=s.kafka_producer_config())
    # windows + 1 so the last wanted window has uploads past its end, + 2 uploads of grace
    publish_sim(sim, producer, prefix, start, n_batches=(windows + 1) * 4 + 2,
                job_metric=(JOB_ID, job_value) if job_value is not None else None)
    return DemoResult(scenario, "sim", {"faults": truth}, fault_start_ns=start, injected_ns=start)
