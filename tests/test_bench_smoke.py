"""Smoke test of `fabricscope bench accuracy` at a tiny size: real numbers, right structure."""

from __future__ import annotations

import math

from bench import accuracy as ba
from producers.sim import LinkDown
from producers.sim.fabrics import panel1


def test_panel1_dead_link_has_full_recall_and_precision():
    sc = ba.Scenario(0, "panel1", panel1(), [LinkDown("A", "S3")], 40)
    rep = ba.score([ba.run_scenario(sc, seed=0)], seed=0, wall_s=0.0)
    assert rep.window_recall == {"link_down": (2, 2)}
    assert rep.fault_recall == {"link_down": (1, 1)}
    assert rep.precision["switch"][0] == rep.precision["switch"][1] >= 2
    assert rep.overall_precision() == 1.0
    assert rep.confusion["link_down"]["switch"] == 2
    assert rep.latency_windows["link_down"] == [0]
    assert not rep.wrong and not rep.missed


def test_two_small_scenarios_print_real_numbers(capsys):
    rep = ba.run(2, seed=3, big_every=0, seconds=40)
    assert rep.scenarios == 2 and sum(rep.sizes.values()) == 2
    for right, claims in rep.precision.values():
        assert 0 <= right <= claims
    p = rep.overall_precision()
    assert math.isnan(p) or 0.0 <= p <= 1.0
    for hit, n in [*rep.window_recall.values(), *rep.fault_recall.values()]:
        assert 0 <= hit <= n
    assert rep.hostping == (36, 36), rep.hostping_wrong
    ba.print_report(rep)
    out = capsys.readouterr().out
    assert "precision" in out and "confusion" in out and "Hostping: 36/36" in out


def test_scenarios_draw_zero_to_three_faults_on_disjoint_elements():
    for i in range(40):
        sc = ba.draw_scenario(i, seed=5, big_every=0)
        assert 0 <= len(sc.faults) <= 3
        hosts = [getattr(f, "host", None) for f in sc.faults if getattr(f, "host", None)]
        assert len(hosts) == len(set(hosts))
