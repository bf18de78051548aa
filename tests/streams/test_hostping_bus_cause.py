"""Bus utilisation and the cause of an abnormal link (Hostping §3.4).

Without a utilisation reading the cause of an abnormal link is unknown, never ``failure``: pure
function, pattern naming, and the stream fed with what the host agent publishes (``hostmetric.v2``).
"""

from __future__ import annotations

import pytest

from producers.hostping.sim_source import sim_host, sim_uploads
from schemas.arrow_nano import encode_columns
from schemas.codec import decode
from streams.hostping.hostlink import (
    UNKNOWN_NO_COUNTERS,
    UNKNOWN_NO_LINK_COUNTER,
    BandwidthMatrix,
    algorithm1,
    bus_cause,
    idle_path_states,
)
from streams.hostping.hostpatterns import host_link_rows, name_patterns
from streams.hostping.hostping_stream import HostpingStream


def test_bus_cause_by_hand():
    assert bus_cause(0.95) == "congestion"
    assert bus_cause(0.90) == "failure"  # not above Util_high (90 %)
    assert bus_cause(0.2) == "failure"
    assert bus_cause(None, host_has_counters=False) == UNKNOWN_NO_COUNTERS == "unknown (no bus counters on this host)"
    assert bus_cause(None) == UNKNOWN_NO_LINK_COUNTER


def _gpu_failure_round():
    sim = sim_host("gpu_pcie_link_failure", "h1")
    topo = sim.topo
    m = BandwidthMatrix(tuple(sim.rnics), tuple(sim.endpoints), sim.matrix(0))
    rnd = algorithm1(topo, m, idle_path_states(m, sim.baseline()))
    return sim, topo, m, rnd


@pytest.mark.parametrize(("bus", "pattern", "cause"), [
    (None, "gpu_pcie_link_degraded", UNKNOWN_NO_COUNTERS),
    ({}, "gpu_pcie_link_degraded", UNKNOWN_NO_COUNTERS),
    ({"cpu0->mem0": 0.1}, "gpu_pcie_link_degraded", UNKNOWN_NO_LINK_COUNTER),
    ({"sw2->gpu4": 0.3}, "gpu_pcie_link_failure", "failure"),
    ({"sw2->gpu4": 0.97}, "gpu_pcie_congestion", "congestion"),
])
def test_abnormal_gpu_link_is_failure_only_with_a_low_reading(bus, pattern, cause):
    sim, topo, m, rnd = _gpu_failure_round()
    v = name_patterns(topo, m, sim.baseline(), rnd, bus)
    assert [(x.pattern, x.location, x.cause) for x in v] == [(pattern, "sw2->gpu4", cause)]
    rows = host_link_rows(topo, rnd, v, 1)
    assert [(r["link"], r["cause"]) for r in rows if r["state"] == "abnormal"] == [("sw2->gpu4", cause)]


def _agent_rows(host: str, rows: list[tuple[str, str, float]]) -> bytes:
    """What the host agent publishes: ``hostmetric.v2`` rows (device, metric, value) with their source."""
    n = len(rows)
    cols = {"agent_id": [f"hostping-{host}"] * n, "upload_ns": [5] * n, "host": [host] * n,
            "device": [d for d, _, _ in rows], "metric": [m for _, m, _ in rows], "value": [v for *_, v in rows],
            "unit": ["ratio"] * n, "sample_ns": [5] * n, "source": ["nvml:nvmlDeviceGetPcieThroughput"] * n}
    return encode_columns("hostmetric.v2", cols)


HOST = "x-gpu_pcie_link_failure"


@pytest.mark.parametrize(("readings", "cause"), [
    ([(HOST, "bus_counters", 0.0)], UNKNOWN_NO_COUNTERS),  # a host without readable counters
    ([("sw2->gpu4", "bus_util", 0.35), (HOST, "bus_counters", 1.0)], "failure"),
    ([("sw2->gpu4", "bus_util", 0.96), (HOST, "bus_counters", 1.0)], "congestion"),
])
def test_stream_takes_the_cause_from_the_agents_hostmetric_v2_rows(readings, cause):
    s = HostpingStream()
    batches = []
    for _, up in sim_uploads(["gpu_pcie_link_failure"], 1, 10**18, 30 * 10**9, host_prefix="x"):
        _, table = decode(up.payload, up.schema)
        if up.topic == "hosts.topology":
            s.on_topology(table)
        elif up.topic == "loopback.raw":
            batches.append(table)  # the sim's own bus readings are left out: the agent's rows stand in
    s.on_hostmetrics(decode(_agent_rows(HOST, readings), "hostmetric.v2")[1])
    res = s.process(batches[0])
    links = {r["link"]: r for r in res.host_links.to_pylist()}
    assert (links["sw2->gpu4"]["state"], links["sw2->gpu4"]["cause"]) == ("abnormal", cause)
