"""The Hostping loopback engine (producers.hostping.loopback): its test plans, Eq. 2-3 over a simulated host, and
the verbs backend around the device, an injected RDMA layer whose WRITEs take a known time.

No RDMA device here: the device layer below stands in for pyverbs and advances a clock by Eq. 1's
``T_proc + Lat_host + Size / BW_host`` per WRITE, so the engine and Eq. 2-3 must give back the
hand-set ``Lat_host`` and ``BW_host``. The pyverbs layer itself runs only on an RNIC host.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from rdma_double import Device

from producers.hostping import loopback, simhost
from producers.hostping.loopback import LoopbackTest, LoopbackUnavailable
from producers.hostping.loopback_verbs import PyverbsDevice, VerbsBackend
from schemas.intrahost import figure2_topology
from schemas.records import LOOPBACK_V1


def test_loopback_plan_sizes():
    t = figure2_topology()
    assert len(loopback.plan(t, "idle")) == 4 * 10
    busy = loopback.plan(t, "busy")
    assert [x.dst for x in busy if x.rnic == "rnic2"] == ["gpu4", "gpu5", "mem1", "mem0"]
    with pytest.raises(ValueError, match="idle"):
        loopback.plan(t, "sometimes")


def test_loopback_eq2_eq3_recover_sim_host_latency_and_bandwidth():
    t = figure2_topology()
    sim = simhost.SimHost(t, noise=0.0)
    results = loopback.measure(simhost.SimBackend(sim, t_proc_us=1.5), loopback.plan(t, "idle"))
    lat = np.array([r.lat_host_us for r in results]).reshape(4, 10)
    bw = np.array([r.bw_host_gbps for r in results]).reshape(4, 10)
    expected_lat = np.array([[sim.lat_host_us(r, e) for e in sim.endpoints] for r in sim.rnics])
    np.testing.assert_allclose(lat, expected_lat, atol=1e-3)  # T_proc calibrated away
    np.testing.assert_allclose(bw, sim.baseline(), rtol=1e-4)
    rows = loopback.to_rows(results, "agent-1", "h1", "idle", 123)
    assert set(rows[0]) == set(LOOPBACK_V1.names)
    assert rows[0]["latency_ns"] == 1000 and rows[0]["msg_bytes"] == 131072


def test_engine_gives_back_lat_host_and_bw_host_by_eq_1_to_3():
    # Figure 4: distance 1 (same switch) 1.0 µs and 195 Gb/s; distance 3 (root complex) 2.2 µs, 125.5 Gb/s
    dev = Device({("rnic0", "gpu0"): (1.0, 195.0), ("rnic0", "mem0"): (2.2, 125.5), ("rnic0", "mem1"): (2.4, 116.4)})
    eng = VerbsBackend(device=dev, iterations=9, warmup=2, clock=dev.clock)
    tests = [LoopbackTest("rnic0", e, e) for e in ("gpu0", "mem0", "mem1")]
    res = {r.test.dst: r for r in loopback.measure(eng, tests)}
    # T_proc (1.5 µs) is calibrated away by the nearest endpoint's 1.0 µs (Figure 4 distance 1)
    assert res["gpu0"].lat_host_us == pytest.approx(1.0, abs=1e-3)
    assert res["mem0"].lat_host_us == pytest.approx(2.2, abs=1e-3)
    assert res["mem1"].lat_host_us == pytest.approx(2.4, abs=1e-3)
    # Eq. 3: 131072 B x 8 / (Lat_large - Lat_small); the clock has 1 ns steps, so within 0.01 %
    assert res["gpu0"].bw_host_gbps == pytest.approx(195.0, rel=1e-4)
    assert res["mem0"].bw_host_gbps == pytest.approx(125.5, rel=1e-4)
    assert res["mem1"].bw_host_gbps == pytest.approx(116.4, rel=1e-4)
    # 3 tests x 2 sizes x (2 warm-up + 9 timed); one QP per RNIC; a read and a write region per endpoint
    assert dev.writes == 3 * 2 * 11 and len(dev.qps) == 1
    assert sorted(e for _, e, _ in dev.registered) == ["gpu0", "gpu0", "mem0", "mem0", "mem1", "mem1"]
    assert {n for *_, n in dev.registered} == {128 * 1024}  # registered once, at the largest message
    eng.close()
    assert dev.qps[0].closed


def test_an_endpoint_without_peer_memory_or_a_bad_completion_fails_only_its_test():
    dev = Device({("rnic0", "gpu0"): (1.0, 195.0), ("rnic0", "gpu1"): (1.0, 195.0), ("rnic0", "mem0"): (2.2, 125.5)})
    dev.no_peer_memory.add("gpu1")
    dev.bad_completion.add(("rnic0", "mem0"))
    eng = VerbsBackend(device=dev, iterations=3, warmup=0, clock=dev.clock)
    tests = [LoopbackTest("rnic0", e, e) for e in ("gpu0", "gpu1", "mem0")]
    res = {r.test.dst: r for r in loopback.measure(eng, tests)}
    assert (res["gpu0"].status, res["gpu0"].lat_host_us) == ("ok", pytest.approx(1.0, abs=1e-3))
    assert res["gpu1"].status == "error" and "nvidia-peermem" in res["gpu1"].error
    assert res["mem0"].status == "error" and "completion status 12" in res["mem0"].error
    rows = loopback.to_rows(list(res.values()), "a", "h", "idle", 7)
    assert [(r["dst_endpoint"], r["status"], r["bandwidth_gbps"] is None) for r in rows] == [
        ("gpu0", "ok", False), ("gpu1", "error", True), ("mem0", "error", True)]


def test_engine_refuses_at_construction_without_a_device(tmp_path):
    with pytest.raises(LoopbackUnavailable, match=r"no RDMA device under .*class/infiniband.*hardware monitor only"):
        VerbsBackend(tmp_path)
    with pytest.raises(LoopbackUnavailable, match="no RDMA device"):
        PyverbsDevice(tmp_path)
    with pytest.raises(LoopbackUnavailable, match="no RDMA device"):
        VerbsBackend(tmp_path, device=Device({}))


def test_pyverbs_missing_is_named_when_a_device_exists(tmp_path):
    (tmp_path / "class" / "infiniband" / "mlx5_0").mkdir(parents=True)
    if importlib.util.find_spec("pyverbs") is not None:
        pytest.skip("pyverbs is installed on this machine")
    with pytest.raises(LoopbackUnavailable, match="pyverbs is not installed"):
        PyverbsDevice(tmp_path)


def test_bad_arguments_are_named():
    dev = Device({("rnic0", "mem0"): (2.2, 125.5)})
    eng = VerbsBackend(device=dev, iterations=1, warmup=0, clock=dev.clock)
    with pytest.raises(ValueError, match="rnic9 is not an RDMA device of this host"):
        eng.latency_us("rnic9", "mem0", "mem0", 1)
    with pytest.raises(ValueError, match=">= 1 byte"):
        eng.latency_us("rnic0", "mem0", "mem0", 0)
    with pytest.raises(ValueError, match="iterations"):
        VerbsBackend(device=dev, iterations=0)


def test_full_mesh_plan_on_figure2_runs_every_pair_through_the_engine():
    topo = figure2_topology("h")
    paths = {(r, e): (1.0 if topo.is_p2p(r, e) else 2.2, 195.0 if topo.is_p2p(r, e) else 125.5)
             for r in topo.rnics for e in topo.endpoints}
    dev = Device(paths)
    eng = VerbsBackend(device=dev, iterations=1, warmup=0, clock=dev.clock)
    res = loopback.measure(eng, loopback.plan(topo, "idle"))
    assert len(res) == 40 and all(r.status == "ok" for r in res)
    by = {(r.test.rnic, r.test.dst): r.bw_host_gbps for r in res}
    assert by[("rnic0", "gpu0")] == pytest.approx(195.0, rel=1e-4)  # same switch
    assert by[("rnic0", "mem1")] == pytest.approx(125.5, rel=1e-4)


def test_a_large_message_not_slower_than_the_small_one_is_an_error_result_not_a_crash():
    dev = Device({("rnic0", "mem0"): (2.2, 125.5), ("rnic0", "mem1"): (2.4, 116.4)})

    class NoisyEngine(VerbsBackend):
        def latency_us(self, rnic: str, src: str, dst: str, size_bytes: int) -> float:
            v = super().latency_us(rnic, src, dst, size_bytes)
            return 3.0 if dst == "mem1" else v  # mem1: 1 B and 128 KB both 3.0 µs

    eng = NoisyEngine(device=dev, iterations=1, warmup=0, clock=dev.clock)
    res = {r.test.dst: r for r in loopback.measure(eng, [LoopbackTest("rnic0", e, e) for e in ("mem0", "mem1")])}
    assert res["mem0"].status == "ok"
    assert res["mem1"].status == "error" and "must exceed Lat_small" in res["mem1"].error
