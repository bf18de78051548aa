"""Publishes a simulated fabric's uploads to Kafka in the order real agents would.

Per 5 s upload: registry changes (restarts), then each agent's traced paths,
then its probe batch, so a worker that catches up on paths before a probe batch
knows every path of it. An agent with no probe rows still sends an empty batch
whose headers carry ``agent_id``, ``upload_ns`` and ``host`` (the heartbeat that
tells silent from idle).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from producers.controller import pinglist_for_host
from producers.controller_publish import publish_pinglists
from producers.kafka_producer import AgentProducer
from producers.sim.engine import BATCH_NS, Simulator, to_pylists
from producers.sim.stream import registry_updates
from schemas.arrow_nano import encode_columns
from schemas.topics import JOB_METRICS, PATHS_TRACED, PROBES_RAW, REGISTRY, topic_name


def publish_sim(
    sim: Simulator,
    producer: AgentProducer,
    prefix: str,
    start_ns: int,
    n_batches: int | None,
    realtime: bool = False,
    stop: Callable[[], bool] = lambda: False,
    job_metric: tuple[str, float] | None = None,
    first: int = 0,
) -> int:
    """Publish ``n_batches`` uploads (None: until ``stop()``); returns the number of probe rows sent.

    ``realtime`` paces one upload per 5 s of wall time; otherwise as fast as the producer takes them.
    ``job_metric`` = (job id, value): one ``jobmetric.v1`` sample per upload, as the job would report it.
    ``first`` > 0 continues an earlier call on the same simulator from upload ``first`` (no pinglists
    and registry preamble again).
    """
    probes_t, paths_t, reg_t = (topic_name(t, prefix) for t in (PROBES_RAW, PATHS_TRACED, REGISTRY))
    jobs_t = topic_name(JOB_METRICS, prefix)
    if first == 0:
        lists = sim.pinglists(start_ns)
        publish_pinglists(producer, prefix, {h: pinglist_for_host(lists, h) for h in sim.inv.hosts}, start_ns)
        producer.publish(
            reg_t,
            encode_columns("registry.v1", to_pylists(sim.registry_columns(start_ns))),
            "registry.v1",
            key="controller",
        )
    rows = 0
    i = first
    while (n_batches is None or i < n_batches) and not stop():
        t0 = start_ns + i * BATCH_NS
        began = time.monotonic()
        if job_metric:
            producer.publish(jobs_t, encode_columns("jobmetric.v1", {
                "job_id": [job_metric[0]], "sample_ns": [t0 + BATCH_NS // 2], "value": [job_metric[1]]}),
                "jobmetric.v1", key=job_metric[0])
        reg = registry_updates(sim, t0, t0 + BATCH_NS)
        if reg["rnic"]:
            producer.publish(reg_t, encode_columns("registry.v1", reg), "registry.v1", key="controller")
        for agent, probes, paths in sim.upload_batches(t0):
            if len(paths["hops"]):
                producer.publish(paths_t, encode_columns("path.v1", to_pylists(paths)), "path.v1", key=agent)
            n = len(probes["seq"])
            upload_ns = int(max(probes["upload_ns"])) if n else t0 + BATCH_NS
            # sim agents are named after their host
            hb = [("agent_id", agent.encode()), ("upload_ns", str(upload_ns).encode()), ("host", agent.encode())]
            producer.publish(
                probes_t, encode_columns("probe.v1", to_pylists(probes)), "probe.v1", key=agent, headers=hb
            )
            rows += n
        i += 1
        if realtime:
            time.sleep(max(0.0, BATCH_NS / 1e9 - (time.monotonic() - began)))
    producer.flush()
    return rows
