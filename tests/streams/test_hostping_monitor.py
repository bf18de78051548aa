"""Hardware monitor triggers, host_link.v1 rows and the Figure 8 picture."""

from __future__ import annotations

import json

import numpy as np
import pytest

from producers.hostping import monitor
from producers.hostping.simhost import Bottleneck, SimHost
from schemas.intrahost import figure2_topology
from schemas.records import HOST_LINK_V1, HOSTMETRIC_V1
from streams.hostping.hostlink import BandwidthMatrix, algorithm1, idle_path_states
from streams.hostping.hostpatterns import host_link_rows, name_patterns
from streams.hostping.hostplot import save_matrix_png


def test_rates_pause_ratio_and_idle_status():
    prev = {"tx_bytes_phy": 0, "rx_bytes_phy": 0, "tx_prio3_pause_duration": 0, "local_ack_timeout_err": 5}
    # 1 s: 2.5 GB sent (20 Gb/s), 45 ms of pause on priority 3, 2 retransmission timeouts
    cur = {
        "tx_bytes_phy": 2_500_000_000,
        "rx_bytes_phy": 10,
        "tx_prio3_pause_duration": 45_000,
        "local_ack_timeout_err": 7,
    }
    r = monitor.rates("mlx5_0", prev, cur, 1.0)
    assert r.throughput_gbps == pytest.approx(20.0)
    assert r.tx_pause_ratio == pytest.approx(0.045)
    assert r.retrans_timeouts_per_s == 2
    assert monitor.host_status([r], 200.0) == "busy"  # 10 % of line rate
    assert monitor.trigger("busy", [r]) == "busy"  # pause 4.5 % > 3 %
    quiet = monitor.rates("mlx5_0", prev, dict(cur, tx_bytes_phy=1_000_000_000, tx_prio3_pause_duration=0), 1.0)
    assert monitor.host_status([quiet], 200.0) == "idle"  # 8 Gb/s < 5 % of 200
    assert monitor.trigger("busy", [quiet]) is None
    rows = monitor.metric_rows("h1", r, "agent-1", 7)
    assert set(rows[0]) == set(HOSTMETRIC_V1.names)
    with pytest.raises(ValueError, match="mlx5_0"):
        monitor.rates("mlx5_0", prev, cur, 0)


def test_host_link_rows_carry_state_and_cause():
    topo = figure2_topology("h1")
    sim = SimHost(topo, [Bottleneck("cap", "sw2->rnic2", 67.0)], seed=3)
    m = BandwidthMatrix(sim.rnics, sim.endpoints, sim.matrix())
    states = idle_path_states(m, sim.baseline())
    rnd = algorithm1(topo, m, states)
    rows = host_link_rows(topo, rnd, name_patterns(topo, m, sim.baseline(), rnd, sim.bus_util()), 42)
    assert set(rows[0]) == set(HOST_LINK_V1.names)
    bad = [r for r in rows if r["state"] != "normal"]
    assert [(r["link"], r["state"], r["cause"]) for r in bad] == [("sw2->rnic2", "abnormal", "failure")]
    assert json.loads(bad[0]["evidence"])["pattern"] == "rnic_pcie_link_failure"
    assert len(rows) == len(topo.links)


def test_matrix_png(tmp_path):
    topo = figure2_topology()
    sim = SimHost(topo, [Bottleneck("cap", "sw2->gpu4", 50.0)])
    m = BandwidthMatrix(sim.rnics, sim.endpoints, sim.matrix())
    out = save_matrix_png(m, idle_path_states(m, sim.baseline()), tmp_path / "m.png", "GPU4 PCIe")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert np.isnan(idle_path_states(BandwidthMatrix(("r",), ("e",), np.array([[np.nan]])), np.ones((1, 1)))).all()
