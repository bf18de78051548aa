"""``mlxconfig`` collector: a pending configuration change and ATS, with a real query as the
false-positive guard (tests/diagnose/fixtures/artifacts, sources in its README)."""

from __future__ import annotations

from artifact_findings import ARTIFACTS, fixture

from diagnose.collectors import mlxconfig


def test_mlxconfig_pending_change_and_ats_and_guard_real_query():
    text = (
        "Device:         0000:3b:00.0\n"
        "Configurations:                              Default         Current         Next Boot\n"
        "         SRIOV_EN                            False(0)        False(0)        True(1)\n"
        "         ATS_ENABLED                         False(0)        False(0)        False(0)\n"
    )
    found = mlxconfig.findings(mlxconfig.parse(text))
    assert [(f.kind, f.location, f.severity) for f in found] == [
        ("rnic_config", "0000:3b:00.0", "warning"),
        ("ats_disabled", "0000:3b:00.0", "info"),
    ]
    assert found[0].evidence["pending"] == {"SRIOV_EN": ["False(0)", "True(1)"]}
    assert fixture("mlxconfig_cx6lx_query.txt") == []
    assert len(mlxconfig.parse((ARTIFACTS / "mlxconfig_cx6lx_query.txt").read_text()).rows) == 7
