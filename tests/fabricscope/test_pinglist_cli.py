"""``fabricscope pinglist explain`` and the plan report under it (simulator truth: the fabric's ECMP model)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from bench.accuracy import SIZES
from fabricscope.cli import app, register_all
from producers.plan_explain import explain_plan

CORE_PAIRS = ("P0S1->X1|P1S1->X1", "P0S1->X2|P1S1->X2", "P0S2->X3|P1S2->X3", "P0S2->X4|P1S2->X4")


@pytest.fixture(scope="module")
def cli():
    register_all()
    return CliRunner()


def test_panel1_is_identifiable_under_eq1_and_the_builder_adds_nothing(cli):
    r = cli.invoke(app, ["pinglist", "explain", "--json", "--two-link"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["eq1"]["links"] == 12 and d["eq1"]["identifiable"] == 12 and d["eq1"]["every_link_identifiable"]
    assert d["extra_inter_tor_tuples"] == 0 and d["extra_pps"] == 0
    # every probe through a spine crosses two of its three ToR links: 3 pairs per spine, 4 spines
    assert d["two_link_ambiguous"] == 12
    text = cli.invoke(app, ["pinglist", "explain"])
    assert text.exit_code == 0 and "every switch link identifiable" in text.output


def test_three_tier_core_pairs_stay_ambiguous_and_are_said_to_be_a_probing_limit():
    x = explain_plan(SIZES[3][1](1), seed=1)
    groups = x.as_dict()["with_builder"]["ambiguous_groups"]
    # inter-pod paths through core X climb one pod's agg->X and descend the other's: no 5-tuple splits them
    assert [g["links"] for g in groups] == list(CORE_PAIRS)
    assert not any(g["splittable"] for g in groups)
    assert x.after.uncovered == () and len(x.after.identifiable) == len(x.after.links) - 8
    assert len(x.augmented.extra) <= 0.25 * x.augmented.base_entries


def test_three_tier_standing_bounces_make_every_link_identifiable_at_an_eighth_more_probes(cli):
    d = explain_plan(SIZES[3][1](1), seed=1, bounce=True).as_dict()
    assert d["with_builder"]["every_link_identifiable"] and d["with_builder"]["ambiguous_groups"] == []
    assert d["eq1"]["identifiable"] == 16 and d["with_builder"]["identifiable"] == 24
    assert (d["bounced_tuples"], d["bounce_pps"], d["eq1_inter_tor_pps"]) == (64, 80.0, 640.0)
    # on Panel 1 (two-tier) there is nothing to bounce, and the table says how much a bounce costs when there is
    text = cli.invoke(app, ["pinglist", "explain", "--bounce"])
    assert text.exit_code == 0, text.output
    assert "standing bounces: 0 bounced probes, 0.0 probes/s" in text.output


def test_an_unreadable_inventory_is_named(cli, tmp_path):
    bad = tmp_path / "inv.yaml"
    bad.write_text("tors: [\n")
    r = cli.invoke(app, ["pinglist", "explain", "--inventory", str(bad)])
    assert r.exit_code != 0
    assert "inv.yaml" in r.output or "inv.yaml" in str(r.exception)
