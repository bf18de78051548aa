"""Prometheus metrics of the long-running processes, scraped from a real worker and sink."""

from __future__ import annotations

import httpx
import pytest

from producers.kafka_producer import AgentProducer
from schemas.arrow_nano import encode_columns

from conftest import free_port, wait_for
from probe_rows import columns, known_rows

pytestmark = pytest.mark.kafka


def _metric(port: int, name: str) -> float:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.TransportError:
        return -1.0
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_worker_and_sink_count_rows_and_dead_letters(pipeline_env):
    env, procs = pipeline_env
    prefix = env["FABRICSCOPE_TOPIC_PREFIX"]
    rows, _ = known_rows()
    p = AgentProducer(env["KAFKA_BOOTSTRAP"])
    p.publish(f"{prefix}probes.raw", encode_columns("probe.v1", columns(rows)), "probe.v1", key="H1")
    p.publish(f"{prefix}probes.raw", b"not arrow", "probe.v1", key="H1")
    assert p.flush() == 0
    wport = free_port(2)
    sport = wport + 1
    procs.start("worker", "--metrics-port", str(wport))
    procs.start("sink", "--metrics-port", str(sport))
    wait_for(lambda: _metric(sport, 'fabricscope_sink_rows_written_total{table="probes"}') == 3, what="3 rows")
    # the bad batch may be a later worker step than the good one: wait until it was dead-lettered too
    wait_for(lambda: _metric(wport, "fabricscope_worker_dead_letters_total") == 1, what="the dead letter counted")
    assert _metric(wport, "fabricscope_worker_probe_batches_total") == 2
    assert _metric(wport, 'fabricscope_worker_probe_rows_total{outcome="ok"}') == 3
    wait_for(lambda: _metric(sport, 'fabricscope_sink_rows_written_total{table="deadletters"}') == 1,
             what="the dead letter stored")
