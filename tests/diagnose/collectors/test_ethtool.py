"""``ethtool`` collector: ``ethtool -S`` PHY counters (FEC-corrected only, one bad lane, link flaps), on
hand-written and real public outputs (tests/diagnose/fixtures/artifacts, sources in its README), with
false-positive guards."""

from __future__ import annotations

from artifact_findings import fixture, kinds

from diagnose.run import diagnose_text
from producers.hostping import ethtool


def test_fec_corrected_only_is_informational_on_pam4():
    text = (
        "ethtool -S eth3\n     rx_corrected_bits_phy: 81234\n     rx_err_lane_0_phy: 40000\n"
        "     rx_err_lane_1_phy: 41234\n     rx_crc_errors_phy: 0\n     rx_symbol_err_phy: 0\n"
    )
    assert kinds(text) == [("phy_fec_corrected", "eth3", "info")]


def test_one_lane_with_uncorrectable_errors_points_at_that_lane_and_flaps_are_counted():
    text = (
        "ethtool -S eth3\n     rx_crc_errors_phy: 12\n     rx_err_lane_0_phy: 0\n     rx_err_lane_1_phy: 9000\n"
        "     link_down_events_phy: 3\n"
    )
    found = diagnose_text(text)
    assert [(f.kind, f.severity) for f in found] == [("phy_errors", "error"), ("rnic", "warning")]
    assert found[0].evidence["pattern"] == "one_lane"
    assert found[1].evidence == {"subkind": "port_flapping", "link_down_events_phy": 3, "cumulative": True}


def test_guard_zero_phy_counters_raise_nothing():
    text = (
        "ethtool -S eth3\n     rx_crc_errors_phy: 0\n     rx_symbol_err_phy: 0\n     rx_corrected_bits_phy: 0\n"
        "     link_down_events_phy: 0\n"
    )
    assert ethtool.detect(text) and kinds(text) == []


def test_real_pam4_link_with_corrected_bits_only_raises_nothing_above_info():
    found = fixture("ethtool_cx7_pam4_corrected_only.txt")
    assert [(f.kind, f.severity) for f in found] == [("phy_fec_corrected", "info")]
    assert found[0].evidence["corrected"]["rx_corrected_bits_phy"] == 198


def test_real_uncorrectable_symbol_errors_with_one_dominant_lane():
    found = fixture("ethtool_mlx5_lane3_dominant.txt")
    assert [(f.kind, f.severity, f.evidence["pattern"], f.evidence["worst_lane"]) for f in found] == [
        ("phy_errors", "error", "one_lane", 3)
    ]
    assert found[0].evidence["uncorrectable"] == {"rx_pcs_symbol_err_phy": 386}
