"""Hostping analyzer: Figure 4 model, Eq. 1-3, and the 12 bottleneck patterns of Figures 8-10.

Each pattern's expected path-state matrix is written out first (rows rnic0..rnic3; columns
gpu0..gpu7, mem0, mem1 of the Figure 2 host; ``.`` normal, ``X`` abnormal, ``-`` not
tested). The sim host must produce it, and the analyzer, seeing only the matrix, its
baseline, the topology and the bus utilisation, must name the pattern.
"""

from __future__ import annotations

import numpy as np
import pytest

from producers.hostping.rnic_config import parse_roce_accl
from producers.hostping.simhost import Bottleneck, SimHost
from schemas.intrahost import figure2_topology
from streams.hostping.hostlink import (
    BandwidthMatrix,
    LinkHistory,
    algorithm1,
    busy_path_states,
    bw_host_gbps,
    fit_outstanding_read,
    idle_path_states,
    lat_host_us,
    loopback_latency_us,
    outstanding_read_bw_gbps,
)
from streams.hostping.hostpatterns import name_patterns

TOPO = figure2_topology("h1")

# ---- expected matrices (Figures 8 and 10), written before the sim model ---------------------
#            gpu0..7   mem0 mem1
RNIC_PCIE = ["..........", "..........", "XXXXXXXXXX", ".........."]  # Fig 8a: all of RNIC2
GPU_PCIE = ["....X.....", "....X.....", "....X.....", "....X....."]  # Fig 8b: GPU4 column
MEM_CHANNEL = ["........X.", "........X.", "........X.", "........X."]  # Fig 8b: mem0 column
UPI = ["....XXXX.X", "....XXXX.X", "XXXX....X.", "XXXX....X."]  # Fig 8c: every cross-socket path
ROOT_PORT = ["..XXXXXXXX", "XX........", "XX........", "XX........"]  # Fig 8d: via cpu0->sw0, P2P ok
ACS = ["XX........", "..XX......", "....XX....", "......XX.."]  # Fig 8f: P2P under each switch
ATS = ["XXXXXXXX..", "XXXXXXXX..", "XXXXXXXX..", "XXXXXXXX.."]  # #8: every GPU path
RNIC_WIDE = ["..........", "XXXXXXXXXX", "..........", ".........."]  # #9/#10: all of RNIC1
FLAP_ROUNDS = [  # Fig 9: mem0 bad through a different RNIC each round
    ["........X.", "..........", "..........", ".........."],
    ["..........", "........X.", "..........", ".........."],
    ["..........", "..........", "........X.", ".........."],
]
UPI_OVERLOAD = ["..------.X", "--..----.X", "----..--X.", "------..X."]  # Fig 10b (busy)
MEM_OVERLOAD = ["..------X.", "--..----X.", "----..--X.", "------..X."]  # Fig 10c (busy)
BUSY_GPU = ["..------..", "--..----..", "----X.--..", "------...."]  # Fig 10a (busy): RNIC2-GPU4
BUSY_HEALTHY = ["..------..", "--..----..", "----..--..", "------...."]  # affinitive + remote memory


def grid(states: np.ndarray) -> list[str]:
    return ["".join("-" if np.isnan(v) else ("." if v == 1.0 else "X") for v in row) for row in states]


def analyse(sim: SimHost, mode: str = "idle", rounds: int = 1, with_config: bool = False):
    history = LinkHistory()
    base = sim.baseline()
    grids, verdicts = [], []
    for k in range(rounds):
        m = BandwidthMatrix(sim.rnics, sim.endpoints, sim.matrix(round_no=k, mode=mode))
        states = idle_path_states(m, base) if mode == "idle" else busy_path_states(m, base)
        rnd = algorithm1(TOPO, m, states, history)
        history = rnd.history
        grids.append(grid(states))
        verdicts = name_patterns(TOPO, m, base, rnd, sim.bus_util(), sim.rnic_config() if with_config else None)
    return grids, [(v.pattern, v.location, v.cause) for v in verdicts], rnd


def sim(*bs: Bottleneck, seed: int = 1) -> SimHost:
    return SimHost(TOPO, list(bs), seed=seed)


# ---- Figure 4 and Eq. 1-3 ---------------------------------------------------------------------


def test_figure4_outstanding_read_model_predicts_distance_4():
    w_kbit, c_us = fit_outstanding_read(1.0, 195.0, 2.2, 125.5)
    assert c_us == pytest.approx(1.167, abs=1e-3)
    assert w_kbit == pytest.approx(422.5, abs=0.1)  # ~52.8 KB of reads in flight
    assert outstanding_read_bw_gbps(2.4, w_kbit, c_us) == pytest.approx(116.4, rel=0.05)
    # the ~40 % loss from 1.4 µs of extra latency
    assert 1 - outstanding_read_bw_gbps(2.4, w_kbit, c_us) / 195.0 == pytest.approx(0.40, abs=0.03)


def test_eq1_to_eq3_recover_lat_host_and_bw_host():
    t_proc, lat_host, bw = 1.5, 1.0, 195.0
    small = loopback_latency_us(t_proc, lat_host, 1, bw)
    large = loopback_latency_us(t_proc, lat_host, 128 * 1024, bw)
    assert large == pytest.approx(1.5 + 1.0 + 131072 * 8 / 195e3)
    assert lat_host_us(small, t_proc) == pytest.approx(1.0, abs=1e-4)
    assert bw_host_gbps(128 * 1024, large, small) == pytest.approx(195.0, rel=1e-3)
    with pytest.raises(ValueError, match="Lat_large"):
        bw_host_gbps(128 * 1024, small, large)


# ---- Algorithm 1 on a hand-made round -----------------------------------------------------------


def test_algorithm1_normal_abnormal_gray_and_flapping_after_three_grays():
    rn, ep = ("rnic0", "rnic1"), ("gpu0", "mem0")
    m = BandwidthMatrix(rn, ep, np.ones((2, 2)))
    # rnic0->mem0 abnormal, every other path normal: cpu0->mem0 is normal via rnic1 -> gray path
    states = np.array([[1.0, 0.0], [1.0, 1.0]])
    h = LinkHistory()
    for k in range(3):
        rnd = algorithm1(TOPO, m, states, h)
        h = rnd.history
        assert rnd.gray_paths == (("rnic0", "mem0"),)
        assert rnd.state["cpu0->mem0"] == ("flapping" if k == 2 else "gray")
    # a plain abnormal link: only rnic1's paths abnormal
    rnd = algorithm1(TOPO, m, np.array([[1.0, 1.0], [0.0, 0.0]]))
    assert rnd.state["sw1->rnic1"] == "abnormal"
    assert rnd.state["cpu0->mem0"] == "normal"
    assert "rnic2" not in "".join(rnd.state)  # untested links get no state


# ---- the 12 patterns --------------------------------------------------------------------------


def test_rnic_pcie_link_failure():
    grids, verdicts, _ = analyse(sim(Bottleneck("cap", "sw2->rnic2", 67.0)))
    assert grids[0] == RNIC_PCIE
    assert verdicts == [("rnic_pcie_link_failure", "sw2->rnic2", "failure")]


def test_gpu_pcie_link_failure():
    grids, verdicts, _ = analyse(sim(Bottleneck("cap", "sw2->gpu4", 50.0)))
    assert grids[0] == GPU_PCIE
    assert verdicts == [("gpu_pcie_link_failure", "sw2->gpu4", "failure")]


def test_memory_channel_failure():
    grids, verdicts, _ = analyse(sim(Bottleneck("scale", "cpu0->mem0", 0.4)))
    assert grids[0] == MEM_CHANNEL
    assert verdicts == [("memory_channel_failure", "cpu0->mem0", "failure")]


def test_upi_failure():
    grids, verdicts, _ = analyse(sim(Bottleneck("cap", "cpu0->cpu1", 60.0)))
    assert grids[0] == UPI
    assert verdicts == [("upi_failure", "cpu0->cpu1", "failure")]


def test_cpu_root_port_failure_direct_p2p_paths_stay_normal():
    grids, verdicts, rnd = analyse(sim(Bottleneck("cap", "cpu0->sw0", 80.0)))
    assert grids[0] == ROOT_PORT
    assert verdicts == [("cpu_root_port_failure", "cpu0->sw0", "failure")]
    assert rnd.state["sw0->rnic0"] == rnd.state["sw0->gpu0"] == "normal"


def test_memory_channel_flapping_after_three_gray_rounds():
    grids, verdicts, rnd = analyse(sim(Bottleneck("flap", "cpu0->mem0", 0.4)), rounds=3)
    assert grids == FLAP_ROUNDS
    assert verdicts == [("memory_channel_flapping", "cpu0->mem0", "failure")]
    assert rnd.state["sw0->rnic0"] == "normal"  # its one gray round was not consecutive


def test_memory_channel_flapping_not_named_before_third_round():
    _, verdicts, rnd = analyse(sim(Bottleneck("flap", "cpu0->mem0", 0.4)), rounds=2)
    assert verdicts == []
    assert rnd.state["cpu0->mem0"] == "gray"


def test_acs_enabled():
    grids, verdicts, _ = analyse(sim(*(Bottleneck("acs", f"sw{i}") for i in range(4))))
    assert grids[0] == ACS
    assert verdicts == [("acs_enabled", "sw0,sw1,sw2,sw3", "config")]


def test_ats_disabled():
    grids, verdicts, _ = analyse(sim(Bottleneck("ats_off", value=1.5)))
    assert grids[0] == ATS
    assert verdicts == [("ats_disabled", "h1", "config")]


def test_slow_start_and_tx_window_same_matrix_both_named_without_config():
    for b in (Bottleneck("slow_start", "rnic1", 0.6), Bottleneck("tx_window", "rnic1", 0.5)):
        grids, verdicts, _ = analyse(sim(b))
        assert grids[0] == RNIC_WIDE
        assert verdicts == [("rnic_config", "rnic1", "config")]


def test_rnic_slow_start_named_from_registers():
    grids, verdicts, _ = analyse(sim(Bottleneck("slow_start", "rnic1", 0.6)), with_config=True)
    assert grids[0] == RNIC_WIDE
    assert verdicts == [("rnic_slow_start", "rnic1", "config")]


def test_rnic_small_tx_window_named_from_registers():
    grids, verdicts, _ = analyse(sim(Bottleneck("tx_window", "rnic1", 0.5)), with_config=True)
    assert grids[0] == RNIC_WIDE
    assert verdicts == [("rnic_small_tx_window", "rnic1", "config")]


def test_upi_overload_busy_mode_congestion():
    grids, verdicts, _ = analyse(sim(Bottleneck("congest", "cpu0->cpu1", 0.5, util=0.95)), mode="busy")
    assert grids[0] == UPI_OVERLOAD
    assert verdicts == [("upi_overload", "cpu0->cpu1", "congestion")]


def test_memory_channel_overload_busy_mode_congestion():
    grids, verdicts, _ = analyse(sim(Bottleneck("congest", "cpu0->mem0", 0.5, util=0.97)), mode="busy")
    assert grids[0] == MEM_OVERLOAD
    assert verdicts == [("memory_channel_overload", "cpu0->mem0", "congestion")]


# ---- busy mode thresholds ---------------------------------------------------------------------


def test_busy_mode_gpu_link_20_percent_below_peers_is_abnormal_15_percent_is_normal():
    grids, verdicts, _ = analyse(sim(Bottleneck("scale", "sw2->gpu4", 0.75)), mode="busy")
    assert grids[0] == BUSY_GPU
    assert verdicts == [("gpu_pcie_link_failure", "sw2->gpu4", "failure")]  # Fig 10a
    grids, verdicts, _ = analyse(sim(Bottleneck("scale", "sw2->gpu4", 0.85)), mode="busy")
    assert verdicts == []
    assert grids[0] == BUSY_HEALTHY


def test_healthy_host_has_no_verdict_in_either_mode():
    for mode in ("idle", "busy"):
        _, verdicts, rnd = analyse(sim(), mode=mode)
        assert verdicts == []
        assert set(rnd.state.values()) == {"normal"}


def test_roce_accl_register_parser():
    text = (
        "Field Name                     | Data\n"
        "=======================================\n"
        "roce_tx_window_en              | 0x00000000\n"
        "roce_slow_restart_en           | 0x00000001\n"
        "roce_slow_restart_idle_en      | 0x00000000\n"
    )
    assert parse_roce_accl(text) == {"slow_start": True, "tx_window": False}
    with pytest.raises(ValueError, match="ROCE_ACCL"):
        parse_roce_accl("nothing here")
