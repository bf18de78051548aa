"""loopback.v1 Arrow batches through the host-link processor (flapping across rounds)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from producers.hostping import loopback
from producers.hostping.simhost import Bottleneck, SimBackend, SimHost
from schemas.arrow_pa import arrow_schema
from schemas.intrahost import figure2_topology
from schemas.records import LOOPBACK_V1
from streams.hostping.hostlink_batch import HostLinkProcessor, matrix_from_loopback


def batch(sim: SimHost, round_no: int) -> pa.Table:
    tests = loopback.plan(sim.topo, "idle")
    res = loopback.measure(SimBackend(sim, round_no=round_no), tests)
    return pa.Table.from_pylist(
        loopback.to_rows(res, "a1", sim.topo.host, "idle", round_no), arrow_schema(LOOPBACK_V1.key)
    )


def test_matrix_from_loopback_roundtrip():
    topo = figure2_topology("h1")
    sim = SimHost(topo, noise=0.0)
    m = matrix_from_loopback(batch(sim, 0), topo)
    np.testing.assert_allclose(m.gbps, sim.baseline(), rtol=1e-4)


def test_processor_finds_memory_channel_flapping_over_three_batches():
    topo = figure2_topology("h1")
    sim = SimHost(topo, [Bottleneck("flap", "cpu0->mem0", 0.4)], seed=5)
    proc = HostLinkProcessor({"h1": topo}, {"h1": sim.baseline()})
    states = []
    for k in range(3):
        rows, verdicts = proc.process(batch(sim, k), round_ns=k)
        states.append(next(r["state"] for r in rows if r["link"] == "cpu0->mem0"))
    assert states == ["gray", "gray", "flapping"]
    assert [(v.pattern, v.location) for v in verdicts] == [("memory_channel_flapping", "cpu0->mem0")]
