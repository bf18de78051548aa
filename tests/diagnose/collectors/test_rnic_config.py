"""``rnic_config`` collector: the ROCE_ACCL register read by ``mlxreg`` (slow start, TX window), on a
real public output (tests/diagnose/fixtures/artifacts, sources in its README)."""

from __future__ import annotations

from artifact_findings import ARTIFACTS, fixture

from producers.hostping import rnic_config


def test_roce_accl_register_is_wired_in_as_information():
    found = fixture("mlxreg_roce_accl.txt")
    assert [(f.kind, f.severity, f.evidence["slow_start"], f.evidence["tx_window"]) for f in found] == [
        ("rnic_config", "info", True, False)
    ]
    fields = rnic_config.parse((ARTIFACTS / "mlxreg_roce_accl.txt").read_text())
    assert fields["adp_retx_base_timeout_min"] == 4000
