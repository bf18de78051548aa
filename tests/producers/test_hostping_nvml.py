"""NVML on the Hostping host agent (producers.hostping.nvml): read call by call, and the GPU link rule.

NVML is absent here (no driver), which must be a clean refusal; a stand-in ``pynvml`` module (the
library's Python surface, not fabricscope code) checks that an unsupported call is reported by
name and the rest of the sample kept, the GPU link utilisation, and Xid events.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from nvml_double import fake_pynvml

from producers.hostping import nvml
from producers.hostping.nvml import GpuLink, GpuSample, NvmlSession, NvmlUnavailable, link_utilisation
from producers.hostping.pcie_link import link_gbps


def test_nvml_fails_clearly_without_gpu():
    try:
        links = nvml.read_gpu_links()
    except nvml.NvmlUnavailable as e:
        assert "NVML is not usable here" in str(e) or "no GPU" in str(e)
    else:  # on a GPU host the readings must be real links
        assert all(1 <= g.curr_gen <= g.max_gen for g in links)


def test_nvml_absent_is_a_clean_refusal_and_the_agent_monitors_without_it():
    try:
        NvmlSession().close()
    except NvmlUnavailable as err:
        assert "NVML is not usable here" in str(err) or "no GPU" in str(err)
    else:
        pytest.skip("this machine has a working NVML")


def test_nvml_sample_keeps_going_past_unsupported_calls(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(events=None))
    s = NvmlSession()
    g0, g1 = s.sample()
    assert (g0.index, g0.bdf, g0.name) == (0, "0000:07:00.0", "NVIDIA A100-SXM4-40GB")
    assert g0.values["pcie_link_gen"] == 4 and g0.values["pcie_tx_kbps"] == 10_000_000
    assert g0.values["gpu_util_pct"] is None and g0.unsupported == {"gpu_util_pct": "_NotSupported: Not Supported"}
    # busier direction: 10e6 KB/s = 80 Gb/s over Gen4 x16
    assert link_utilisation(g0) == pytest.approx(80.0 / link_gbps(16.0, 16))
    assert link_utilisation(g1) == 0.0
    assert s.xid_events() == [] and "Not Supported" in s.xid_error  # e.g. a container without the event device
    s.close()


def test_nvml_xid_events_are_read_without_blocking(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(events=[(1, 79), (0, 48)]))
    s = NvmlSession()
    assert s.xid_events() == [(1, 79), (0, 48)]  # 79: fallen off the bus; 48: double-bit ECC
    assert s.xid_events() == []
    s.close()


def test_link_utilisation_is_unknown_without_generation_or_throughput():
    g = GpuSample(0, "0000:07:00.0", "x", {"pcie_link_gen": None, "pcie_link_width": 16.0,
                                           "pcie_tx_kbps": 1.0, "pcie_rx_kbps": 1.0}, {})
    assert link_utilisation(g) is None
    assert np.isclose(link_utilisation(GpuSample(0, "b", "x", {"pcie_link_gen": 3.0, "pcie_link_width": 8.0,
                                                                "pcie_tx_kbps": 0.0, "pcie_rx_kbps": 7_877_000.0},
                                                 {})), 7_877_000 * 8e3 / 1e9 / link_gbps(8.0, 8))


def test_nvml_rule_busy_gpu_at_gen1_is_a_downgrade_idle_is_not():
    idle = GpuLink(0, "0000:3b:00.0", 1, 4, 16, 16, 0, 0, 0, util_pct=0)
    busy = GpuLink(0, "0000:3b:00.0", 1, 4, 16, 16, 0, 0, 0, util_pct=95)
    assert nvml.assess(idle).kind == "pcie_idle_power_saving"
    assert nvml.assess(busy).kind == "pcie_downgrade"
    assert nvml.assess(GpuLink(0, "x", 4, 4, 16, 16, 0, 0, 0, 50)) is None
