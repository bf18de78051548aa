"""``nvidia_smi_query`` collector: ``nvidia-smi --query-gpu`` PCIe generation and width against
utilisation (idle power saving, downgrade), on hand-written and real public outputs
(tests/diagnose/fixtures/artifacts, sources in its README)."""

from __future__ import annotations

from artifact_findings import fixture, kinds

from diagnose.collectors import nvidia_smi_query

QUERY = """\
index, name, pci.bus_id, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, pcie.link.width.max, \
utilization.gpu [%]
0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 4, 4, 16, 16, 97 %
1, NVIDIA A100-SXM4-80GB, 00000000:0B:00.0, 1, 4, 16, 16, 0 %
2, NVIDIA A100-SXM4-80GB, 00000000:48:00.0, 4, 4, 8, 16, 95 %
3, NVIDIA A100-SXM4-80GB, 00000000:4C:00.0, 1, 4, 16, 16, 90 %
"""


def test_nvidia_smi_query_width_down_is_flagged_idle_gen1_is_not_busy_gen1_is_a_fault():
    assert [(k, loc, sev) for k, loc, sev in kinds(QUERY)] == [
        ("pcie_idle_power_saving", "0000:0b:00.0", "info"),
        ("pcie_downgrade", "0000:48:00.0", "warning"),  # confirm with lspci: the board may be x8
        ("pcie_downgrade", "0000:4c:00.0", "error"),
    ]
    rows = nvidia_smi_query.parse(QUERY)
    assert rows[2]["pcie.link.width.current"] == "8" and rows[0]["utilization.gpu"] == "97 %"


def test_real_nvidia_smi_idle_l40s_is_power_saving_and_x8_board_is_only_a_warning():
    idle = fixture("nvidia_smi_query_l40s_idle.txt")
    assert [f.location for f in idle] == [f"GPU{i}" for i in range(8)]
    assert {(f.kind, f.severity) for f in idle} == {("pcie_idle_power_saving", "info")}
    board = fixture("nvidia_smi_query_x8_board_loaded.txt")
    assert [(f.kind, f.location, f.severity) for f in board] == [("pcie_downgrade", "GPU at line 2", "warning")]
    assert "lspci" in board[0].evidence["confirm_with"]
