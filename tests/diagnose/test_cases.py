"""Every field case in tests/diagnose/fixtures/cases (sources: SOURCES.md there) gets its stated right diagnosis."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from diagnose.run import diagnose_paths
from fabricscope import cmd_diagnose
from producers.hostping.findings import Finding

from conftest import REPO

CASES = REPO / "tests" / "diagnose" / "fixtures" / "cases"
NETWORK_KINDS = {"switch", "rnic", "lossy_roce"}


def case(prefix: str) -> Path:
    found = sorted(CASES.glob(f"{prefix}_*.txt"))
    assert found, f"field case {prefix} not found under {CASES}"
    return found[0]


def problems(prefix: str) -> list[Finding]:
    return [f for f in diagnose_paths([case(prefix)]) if f.is_problem]


def test_case_03_port_error_is_rnic_on_host_b_not_host_down():
    found = problems("case_03")
    assert [(f.kind, f.location) for f in found] == [("rnic", "host-b")]
    ev = found[0].evidence
    assert ev["subkind"] == "port_flapping"
    assert ev["ranks_reporting"] == 8
    assert ev["error12_reported_by"] == ["host-c"]  # charged to host-b's RNIC, not a switch


def test_case_04_socket_errors_are_peer_process_failure_not_network():
    found = problems("case_04")
    assert [f.kind for f in found] == ["host_down"]
    assert "10.0.0.7" in found[0].location
    assert found[0].evidence["network_innocent"] is True
    assert found[0].evidence["proxy_retcodes"] == [6]
    assert not NETWORK_KINDS & {f.kind for f in found}


def test_case_05_pairwise_vote_names_host_a_and_leaves_e_f_undetermined():
    found = problems("case_05")
    assert [(f.kind, f.location) for f in found] == [("slow_host", "host-A"), ("undetermined", "host-E,host-F")]
    assert found[0].evidence["votes"] == 2
    assert found[0].evidence["crossing_predicts_slowness"] is False
    assert "switch" not in {f.kind for f in found}


def test_case_07_acs_redirect_only_in_the_broken_block():
    found = problems("case_07")
    assert [(f.kind, f.cause) for f in found] == [("acs_redirect", "config")]
    assert found[0].evidence["enabled_redirects"] == ["ReqRedir", "CmpltRedir"]
    text = case("case_07").read_text().splitlines()
    line = int(found[0].source.rsplit(":", 1)[1])
    assert "ReqRedir+" in text[line - 1]  # the 'ACS on' line, not the healthy one


def test_case_10_all_traffic_on_prio0_with_ack_timeouts_is_lossy_roce_misconfiguration():
    found = problems("case_10")
    assert [(f.kind, f.location, f.cause) for f in found] == [("lossy_roce", "enp178s0f0 (mlx5_0/port1)", "config")]
    ev = found[0].evidence
    assert ev["priority"] == 0
    assert ev["loss"] == {"local_ack_timeout_err": 2705}
    assert ev["congestion"] == {"np_cnp_sent": 1333}
    assert ev["cumulative"] is True


def test_case_11_speed_downgrade_and_width_is_slot_limit():
    found = problems("case_11")
    assert [f.kind for f in found] == ["pcie_downgrade"]
    ev = found[0].evidence
    assert ev["downgraded"] == ["speed"]
    assert (ev["current_speed_gtps"], ev["max_speed_gtps"], ev["target_speed_gtps"]) == (8.0, 16.0, 16.0)
    assert "slot limit" in ev["width_limit"]
    assert ev["current_gbps"] == pytest.approx(31.5, abs=0.1)


def test_case_12_idle_gpu_at_gen1_full_width_raises_no_problem():
    found = diagnose_paths([case("case_12")])
    assert found, "the idle reading should still be noted"
    assert {f.kind for f in found} == {"pcie_idle_power_saving"}
    assert not [f for f in found if f.is_problem]


def test_case_13_downgrade_reported_at_upstream_port_not_gpu_function():
    found = problems("case_13")
    assert [(f.kind, f.location) for f in found] == [("pcie_downgrade", "0000:01:00.0")]
    ev = found[0].evidence
    assert (ev["current_speed_gtps"], ev["current_width"]) == (16.0, 8)
    assert (ev["max_speed_gtps"], ev["max_width"]) == (32.0, 16)
    assert ev["downgraded"] == ["speed", "width"]
    levels = next(iter(ev["pp_dpm_pcie"].values()))
    assert [lv for lv in levels if lv["active"]] == [{"level": 1, "speed_gtps": 16.0, "width": 8, "active": True}]


def test_case_14_aer_escalation_and_xid79_is_gpu_link_failure():
    found = problems("case_14")
    assert [(f.kind, f.location, f.severity) for f in found] == [
        ("gpu_pcie_link_failure", "0000:00:02.0->0000:02:00.0", "critical")
    ]
    ev = found[0].evidence
    assert ev["xid"] == 79
    assert ev["aer_corrected"] == {"Replay Timer Timeout": 1}
    assert ev["aer_uncorrected"] == {"Surprise Down Error": 1}


def test_case_16_width_x2_of_x4_on_both_gx10_functions_not_the_reference_host():
    found = problems("case_16")
    assert [(f.kind, f.location) for f in found] == [
        ("pcie_downgrade", "0002:01:00.0"),
        ("pcie_downgrade", "0002:01:00.1"),
    ]
    for f in found:
        ev = f.evidence
        assert ev["downgraded"] == ["width"]  # speed 32 GT/s is fine
        assert (ev["current_width"], ev["max_width"]) == (2, 4)
        assert ev["same_link_functions"] == ["0002:01:00.0", "0002:01:00.1"]
        assert ev["section"] == "Observed on ASUS GX10"
        assert ev["limiting_hop"].startswith("upstream port")
        assert "replace the card or cable" not in f.explanation  # the platform, not the card


def test_case_18_local_access_violation_and_flushes_is_probable_mtu_mismatch_config():
    found = problems("case_18")
    assert [(f.kind, f.location, f.cause) for f in found] == [("mtu_mismatch", "host-a/mlx5_0<->10.0.0.2", "config")]
    ev = found[0].evidence
    assert ev["probable"] is True
    assert ev["secondary_flushes"] == 1  # status 5 / vendor 249 tied to the primary, not a finding
    assert "active_mtu" in ev["compare_on_both_ends"]
    assert ev["async_events"] == ["local access violation work queue error"]


def test_case_19_modify_qp_enodev_is_hca_selection_on_mlx5_3():
    found = problems("case_19")
    assert [(f.kind, f.location, f.cause) for f in found] == [("hca_selection", "host-a/mlx5_3", "config")]
    assert found[0].evidence["call"] == "ibv_modify_qp"
    assert found[0].evidence["selected_hcas"] == ["mlx5_3"]
    assert not NETWORK_KINDS & {f.kind for f in found}


def test_case_21_gdr_disabled_on_every_hca_is_host_config_not_one_rnic():
    found = problems("case_21")
    assert [(f.kind, f.location, f.cause) for f in found] == [("gdr_disabled", "host-a", "config")]
    assert found[0].evidence["disabled_hcas"] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert "nvidia-peermem" in found[0].explanation


def test_case_22_fallen_off_bus_without_xid_is_critical_gpu_loss():
    found = problems("case_22")
    assert [(f.kind, f.location, f.severity) for f in found] == [("gpu_pcie_link_failure", "0000:b3:00.0", "critical")]
    assert found[0].evidence["equivalent_xid"] == 79


def test_case_24_both_gids_on_host_a_is_intra_host_nic_pair_not_remote_peer():
    found = problems("case_24")
    assert [(f.kind, f.location) for f in found] == [
        ("intra_host_path", "host-a:fd00::3:ff22<->fd00::3:ff1f"),
        ("intra_host_path", "host-a:fd00::3:ff21<->fd00::3:ff20"),
    ]
    first, second = found
    assert first.evidence["local_netdev"] == "net1"
    assert second.evidence["remote_netdev"] == "net4"
    assert first.evidence["status"] == 12 and first.evidence["vendor_err"] == 129
    assert first.evidence["count"] == 2
    assert "NCCL_NET_DISABLE_INTRA=1" in first.explanation
    assert "undetermined" not in {f.kind for f in found}  # not "host-a <-> remote peer"


def test_case_25_crc_on_all_lanes_and_power_budget_event_are_one_port_fault():
    found = problems("case_25")
    assert [(f.kind, f.location) for f in found] == [("transceiver", "eth5 (0000:81:00.0 module 0)")]
    ev = found[0].evidence
    assert ev["phy"]["pattern"] == "all_lanes_equal"
    assert ev["phy"]["uncorrectable"]["rx_crc_errors_phy"] == 13147323
    assert ev["module_event"]["events"] == ["Cable error, Power budget exceeded"]


#: Every field case and its stated right diagnosis: (kind, location) of each problem, in order.
RIGHT_DIAGNOSIS = {
    "case_03": [("rnic", "host-b")],
    "case_04": [("host_down", "10.0.0.7, host-a.<cluster-domain>, rank 9")],
    "case_05": [("slow_host", "host-A"), ("undetermined", "host-E,host-F")],
    "case_07": [("acs_redirect", "device at line 12")],
    "case_10": [("lossy_roce", "enp178s0f0 (mlx5_0/port1)")],
    "case_11": [("pcie_downgrade", "device at line 9")],
    "case_12": [],
    "case_13": [("pcie_downgrade", "0000:01:00.0")],
    "case_14": [("gpu_pcie_link_failure", "0000:00:02.0->0000:02:00.0")],
    "case_16": [("pcie_downgrade", "0002:01:00.0"), ("pcie_downgrade", "0002:01:00.1")],
    "case_18": [("mtu_mismatch", "host-a/mlx5_0<->10.0.0.2")],
    "case_19": [("hca_selection", "host-a/mlx5_3")],
    "case_21": [("gdr_disabled", "host-a")],
    "case_22": [("gpu_pcie_link_failure", "0000:b3:00.0")],
    "case_24": [
        ("intra_host_path", "host-a:fd00::3:ff22<->fd00::3:ff1f"),
        ("intra_host_path", "host-a:fd00::3:ff21<->fd00::3:ff20"),
    ],
    "case_25": [("transceiver", "eth5 (0000:81:00.0 module 0)")],
}


@pytest.mark.parametrize("prefix", sorted(RIGHT_DIAGNOSIS))
def test_every_case_gets_its_right_diagnosis(prefix):
    assert [(f.kind, f.location) for f in problems(prefix)] == RIGHT_DIAGNOSIS[prefix]


def test_every_case_file_has_a_stated_diagnosis_here():
    files = sorted(CASES.glob("case_*.txt"))
    if not files:
        pytest.skip(f"no field cases under {CASES}")
    assert sorted(f.name[:7] for f in files) == sorted(RIGHT_DIAGNOSIS)


def test_cli_json_over_all_cases():
    app = typer.Typer()
    app.add_typer(cmd_diagnose.commands)
    app.command("noop")(lambda: None)  # keep a multi-command app so 'diagnose' is a subcommand
    files = [str(case(p)) for p in ("case_11", "case_12", "case_14")]
    result = CliRunner().invoke(app, ["diagnose", *files, "--json"])
    assert result.exit_code == 1, result.output  # findings above info: exit 1, like a linter
    doc = json.loads(result.stdout)
    kinds = [d["kind"] for d in doc["findings"]]
    assert doc["unread"] == [] and doc["exit_code"] == 1
    assert kinds == ["pcie_downgrade", "pcie_idle_power_saving", "pcie_idle_power_saving", "gpu_pcie_link_failure"]


def test_cli_missing_file_names_it():
    app = typer.Typer()
    app.add_typer(cmd_diagnose.commands)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, ["diagnose", "/nonexistent/lspci.txt"])
    assert result.exit_code == 2
    assert "/nonexistent/lspci.txt" in result.output


GOLDEN = REPO / "tests" / "diagnose" / "fixtures" / "cases.golden.json"


def _summary() -> list[dict[str, str]]:
    files = sorted(CASES.glob("case_*.txt"))
    if not files:
        pytest.skip(f"no field cases under {CASES}")
    return [
        {
            "case": f.source.split("/")[-1].split(":")[0],
            "kind": f.kind,
            "location": f.location,
            "severity": f.severity,
            "cause": f.cause,
        }
        for case_file in files  # each case is its own incident: files given together are one incident
        for f in diagnose_paths([case_file])
    ]


def test_golden_diagnosis_of_all_cases():
    """Whole-tool output over every case; a change must update the golden file on purpose:
    ``FABRICSCOPE_UPDATE_GOLDEN=1 python -m pytest tests/diagnose/test_cases.py``."""
    got = _summary()
    if os.environ.get("FABRICSCOPE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(GOLDEN.read_text())
