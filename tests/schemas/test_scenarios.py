"""The one scenario catalogue (schemas.scenarios) is what the simulator, the lab and the CLI all offer."""

from __future__ import annotations

from fabricscope.choices import ALL_SCENARIOS, LAB_SCENARIOS
from infra.lab import faults as lab_faults
from infra.lab import scenarios as lab_scenarios
from producers.sim.scenarios import SCENARIOS as SIM_SCENARIOS
from schemas.scenarios import BY_NAME, CATALOGUE, LAB_NAMES, NAMES


def test_the_catalogue_names_each_scenario_once_lab_ones_first():
    assert len(set(NAMES)) == len(NAMES) == 11
    assert NAMES[: len(LAB_NAMES)] == LAB_NAMES == (
        "healthy", "switch-link-down", "switch-link-lossy", "partial-5tuple", "rnic-down", "host-down",
        "host-restart", "busy-host")
    assert [s.name for s in CATALOGUE if s.verdict is None] == ["healthy"]
    assert all(s.description for s in CATALOGUE)


def test_sim_lab_and_cli_offer_the_catalogue_in_its_order():
    assert SIM_SCENARIOS == NAMES
    assert ALL_SCENARIOS == NAMES
    assert tuple(lab_scenarios.SCENARIOS) == LAB_SCENARIOS == LAB_NAMES


def test_the_lab_table_is_the_one_it_had_and_its_verdicts_are_the_catalogues():
    # the lab's table before the catalogue, by hand: (lab fault kind, expected verdict kind)
    assert lab_scenarios.SCENARIOS == {
        "healthy": (None, None),
        "switch-link-down": ("link-down", "switch"),
        "switch-link-lossy": ("link-loss", "switch"),
        "partial-5tuple": ("partial-5tuple", "switch"),
        "rnic-down": ("nic-down", "rnic"),
        "host-down": ("host-down", "host_down"),
        "host-restart": ("host-restart", "stale_qpn"),
        "busy-host": ("busy-host", "busy_host"),
    }
    assert {n: v for n, (_, v) in lab_scenarios.SCENARIOS.items()} == {n: BY_NAME[n].verdict for n in LAB_NAMES}
    # every lab fault is one the lab can inject, and the lab maps no scenario the catalogue keeps off it
    assert set(lab_scenarios._LAB_FAULT) == set(LAB_NAMES)
    assert {k for k, _ in lab_scenarios.SCENARIOS.values() if k} <= set(lab_faults.KINDS)
