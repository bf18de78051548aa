"""The lab accuracy benchmark's parts that need no lab: the scenario draw, the truth it scores against,
and the simulator's scoring of a hand-made verdict list over a lab scenario's windows."""

from __future__ import annotations

from collections import Counter

import pytest

from bench import accuracy
from bench.lab_accuracy import (
    LAB_KINDS,
    LabFault,
    LabRun,
    LabScenario,
    draw_lab_scenario,
    quiet_windows,
    restart_span,
    scenario_result,
    truth_of,
)
from infra.lab import LabSpec, plan
from schemas.inventory_yaml import from_dict

S = 1_000_000_000
W = accuracy.WINDOW
B = 1_764_000_000 * S // W * W  # a wall-clock window boundary (2025-11)
FAB = plan(LabSpec(prefix="fsa-"))
INV = from_dict(FAB.inventory_dict(), source="lab plan")


def test_draw_is_a_function_of_seed_and_index():
    a = [draw_lab_scenario(i, 5, FAB) for i in range(40)]
    assert a == [draw_lab_scenario(i, 5, plan(LabSpec())) for i in range(40)]  # the prefix draws nothing
    assert a != [draw_lab_scenario(i, 6, FAB) for i in range(40)]


def test_draw_covers_every_kind_healthy_and_two_faults_on_disjoint_targets():
    drawn = [draw_lab_scenario(i, 11, FAB, windows=3) for i in range(300)]
    n = Counter(len(d.faults) for d in drawn)
    assert set(n) == {0, 1, 2} and n[0] > 20 and n[2] > 20, n
    assert {f.kind for d in drawn for f in d.faults} == set(LAB_KINDS)
    assert {f.down for d in drawn for f in d.faults if f.kind == "one-way-loss"} == {True, False}
    for d in drawn:
        assert d.windows == 3
        links = [dict(f.target)["a"] + dict(f.target)["b"] for f in d.faults if "a" in dict(f.target)]
        hosts = [dict(f.target).get("host") or INV.host_of(dict(f.target)["rnic"])
                 for f in d.faults if "a" not in dict(f.target)]
        assert len(set(links)) == len(links) and len(set(hosts)) == len(hosts), d
        for f in d.faults:
            t = dict(f.target)
            if "a" in t:
                assert t["a"] in FAB.tors and t["b"] in FAB.spines
            if f.kind == "link-loss":
                assert 0.005 <= f.loss <= 0.5
                assert f.kwargs == {"a": t["a"], "b": t["b"], "loss": f.loss}
            if f.kind == "one-way-loss":  # inject drops what its ``a`` sends
                assert f.kwargs["a"] == (t["b"] if f.down else t["a"]) and f.kwargs["loss"] == f.loss
            if f.kind == "flapping-link":  # the simulator benchmark's periods and down times
                assert f.period_s in (5.0, 10.0, 20.0) and f.down_s in (1.0, 2.0, 3.0)
                assert f.kwargs == {"a": t["a"], "b": t["b"], "period_s": f.period_s, "down_s": f.down_s}
            if f.kind == "partial-5tuple":
                assert 0.1 <= f.fraction <= 0.6
                assert f.kwargs["fraction"] == f.fraction and f.kwargs["seed"] == f.hash_seed


def test_draw_refuses_a_scenario_without_windows():
    with pytest.raises(ValueError, match="at least one window"):
        draw_lab_scenario(0, 1, FAB, windows=0)


def test_truth_is_the_simulators_shape_with_the_analyzers_link_name():
    assert truth_of(LabFault("link-loss", (("a", "B"), ("b", "S3")), loss=0.1), 5, 9) == {
        "kind": "switch", "location": "B->S3", "start_ns": 5, "end_ns": 9, "fault": "lossy_link"}
    assert truth_of(LabFault("nic-down", (("rnic", "C2"),)), 1, 2)["location"] == "C2"
    assert truth_of(LabFault("nic-down", (("rnic", "C2"),)), 1, 2)["kind"] == "rnic"
    assert truth_of(LabFault("host-restart", (("host", "H4"),)), 1, 2) == {
        "kind": "stale_qpn", "location": "H4", "start_ns": 1, "end_ns": 2, "fault": "host_restart"}
    # a one-way loss down the cable names the same physical link
    one_way = LabFault("one-way-loss", (("a", "B"), ("b", "S3")), loss=0.1, down=True)
    assert truth_of(one_way, 5, 9)["location"] == "B->S3"
    with pytest.raises(ValueError, match="unknown lab fault"):
        truth_of(LabFault("meteor", ()), 1, 2)


def _v(ws: int, kind: str, location: str, i: int, revision_of: str | None = None) -> dict:
    return {"window_start_ns": ws, "kind": kind, "location": location, "confidence": 0.9,
            "verdict_id": f"v{i}", "revision_of": revision_of}


def test_scoring_of_hand_made_verdicts_over_two_lab_scenarios():
    # scenario 0: A-S3 down for two windows (injected 0.2 s after the boundary, cleared 0.3 s after the
    # second window ended), then the window after the clear; scenario 1: H2 restarts, one window
    dead = LabFault("link-down", (("a", "A"), ("b", "S3")))
    down = LabRun(LabScenario(0, (dead,), 2), B, [(dead, B + S // 5, B + 2 * W + 3 * S // 10)])
    b1 = B + 3 * W
    h2 = LabFault("host-restart", (("host", "H2"),))
    restart = LabRun(LabScenario(1, (h2,), 1), b1, [(h2, b1, b1 + W + S)])
    verdicts = [
        _v(B, "switch", "A->S3", 1),             # right, window 0
        _v(B, "rnic", "B1", 2),                  # wrong: no fault there
        _v(B + W, "undetermined", "A->S3|A->S4", 3),  # not a claim; an abstention that holds the fault
        _v(B + 2 * W, "switch", "A->S3", 4),     # the window after the clear overlaps the fault by 0.3 s: right
        _v(b1, "stale_qpn", "A3", 5),            # A3 is H2's RNIC: right for the host's restart
        _v(b1 + 7 * W, "switch", "A->S3", 6),    # a window of no scenario: not scored
    ]
    probes = {B: {"A->S3": 500}, B + W: {"A->S3": 500}}
    results = [scenario_result(r, INV, "lab 4x3 (12 RNICs)", verdicts, probes) for r in (down, restart)]
    assert [len(r.windows) for r in results] == [3, 2]  # every window of a scenario, verdicts or not
    assert results[0].windows[0][0] == accuracy.T0 and results[1].windows[0][0] == accuracy.T0
    assert results[0].truth[0] == {"kind": "switch", "location": "A->S3", "start_ns": accuracy.T0 + S // 5,
                                   "end_ns": accuracy.T0 + 2 * W + 3 * S // 10, "fault": "link_down"}
    rep = accuracy.score(results, seed=1, wall_s=0.0)
    assert rep.precision == {"switch": (2, 2), "rnic": (0, 1), "stale_qpn": (1, 1)}
    assert rep.undetermined == 1
    # link down: window 0 named, window 1 a right abstention (neither hit nor miss), window 2 under half
    assert rep.window_recall == {"link_down": (1, 1), "host_restart": (1, 1)}
    assert len(rep.abstentions) == 1 and rep.abstentions[0]["window"] == 1
    assert rep.fault_recall == {"link_down": (1, 1), "host_restart": (1, 1)}
    assert rep.latency_windows == {"link_down": [0], "host_restart": [0]}
    # 500 probes x 19.8 s / 20 s crossed the dead link in window 0; the restart fails every probe to H2
    assert rep.window_recall_10 == (2, 2)
    assert rep.confusion["(none)"] == Counter({"rnic": 1})


def test_a_window_without_verdicts_is_a_miss_not_dropped():
    c1 = LabFault("nic-down", (("rnic", "C1"),))
    run = LabRun(LabScenario(0, (c1,), 2), B, [(c1, B, B + 2 * W)])
    rep = accuracy.score([scenario_result(run, INV, "lab", [_v(B, "rnic", "C1", 1)])], seed=1, wall_s=0.0)
    assert rep.window_recall == {"rnic_down": (1, 2)}
    assert [m["window"] for m in rep.missed_windows] == [1]


def test_a_host_downs_clear_is_a_restart_scored_until_the_probers_refresh():
    # H2 down for one window; its clear (restarting its agents with new QPNs) returns 1.5 s after the boundary
    h2 = LabFault("host-down", (("host", "H2"),))
    cleared = B + W + 3 * S // 2
    span = restart_span(B + W, cleared, refresh_s=30.0)
    assert span == (B + W, cleared + 30 * S)
    assert restart_span(B + W, cleared)[1] == cleared + 10 * S  # the benchmark's probers refresh every 10 s
    events = [(h2, B, cleared), (LabFault("host-restart", h2.target), *span)]
    # stale QPNs may linger until 31.5 s after the fault window: two quiet windows before the next scenario
    assert quiet_windows(events, cleared, B + W) == 2
    assert quiet_windows(events[:1], cleared, B + W) == 1
    run = LabRun(LabScenario(0, (h2,), 1), B, events, n_windows=3)
    verdicts = [_v(B, "host_down", "H2", 1), _v(B + W, "stale_qpn", "A3", 2), _v(B + 2 * W, "stale_qpn", "A4", 3)]
    rep = accuracy.score([scenario_result(run, INV, "lab", verdicts)], seed=1, wall_s=0.0)
    assert rep.precision == {"host_down": (1, 1), "stale_qpn": (2, 2)}
    # the restart is active 18.5 s of window 1 (required) and 11.5 s of window 2 (required)
    assert rep.window_recall == {"host_down": (1, 1), "host_restart": (2, 2)}


def test_undetermined_is_counted_apart_on_healthy_and_on_fault_windows():
    # a scenario without faults (two windows) and one whose link fault starts at its second window's
    # boundary and lasts two windows; a window after every fault ended would be neither
    calm = LabRun(LabScenario(0, (), 2), B, [])
    b1 = B + 3 * W
    dead = LabFault("link-down", (("a", "A"), ("b", "S3")))
    late = LabRun(LabScenario(1, (dead,), 3), b1, [(dead, b1 + W, b1 + 3 * W)])
    verdicts = [
        _v(B, "undetermined", "A->S3|A->S4", 1),      # healthy window: noise an operator sees
        _v(b1, "undetermined", "B->S3|B->S4", 2),     # before the fault starts: healthy too
        _v(b1 + W, "switch", "A->S3", 3),
        _v(b1 + 2 * W, "undetermined", "A->S3|A->S4", 4),  # with the fault active
    ]
    results = [scenario_result(r, INV, "lab", verdicts) for r in (calm, late)]
    rep = accuracy.score(results, seed=1, wall_s=0.0)
    assert rep.undetermined == 3
    # a scenario is scored over its windows and the one after (see above): calm's three and late's first
    assert rep.healthy_windows == (2, 4)
    assert rep.fault_windows == (1, 2)  # late's fourth window, after the clear, is neither


def test_a_faults_undetermined_windows_are_counted_in_runs():
    assert [accuracy.longest_run(w) for w in ([], [4], [1, 2, 3, 5], [0, 2, 4], [3, 4, 7, 8, 9])] == [0, 1, 3, 1, 3]
    # a link fault over four windows: undetermined over a set holding it in windows 0-2, named in window 3
    dead = LabFault("link-down", (("a", "A"), ("b", "S3")))
    run = LabRun(LabScenario(0, (dead,), 4), B, [(dead, B, B + 4 * W)])
    verdicts = [_v(B + k * W, "undetermined", "A->S3|A->S4", 1 + k) for k in range(3)]
    verdicts.append(_v(B + 3 * W, "switch", "A->S3", 9))
    rep = accuracy.score([scenario_result(run, INV, "lab", verdicts)], seed=1, wall_s=0.0)
    assert rep.undetermined_streaks == [{"scenario": 0, "size": "lab", "fault": "link_down", "location": "A->S3",
                                         "windows": 3, "longest": 3}]
    # named in every other window: the undetermined ones never run longer than one
    verdicts = [_v(B + k * W, *(("undetermined", "A->S3|A->S4") if k % 2 == 0 else ("switch", "A->S3")), 1 + k)
                for k in range(4)]
    rep = accuracy.score([scenario_result(run, INV, "lab", verdicts)], seed=1, wall_s=0.0)
    assert [(x["windows"], x["longest"]) for x in rep.undetermined_streaks] == [(2, 1)]


def test_windows_with_two_faults_count_when_both_are_named():
    a = LabFault("link-down", (("a", "A"), ("b", "S3")))
    c = LabFault("link-down", (("a", "C"), ("b", "S4")))
    run = LabRun(LabScenario(0, (a, c), 2), B, [(a, B, B + 2 * W), (c, B, B + 2 * W)])
    verdicts = [_v(B, "switch", "A->S3", 1), _v(B, "switch", "C->S4", 2), _v(B + W, "switch", "C->S4", 3)]
    rep = accuracy.score([scenario_result(run, INV, "lab", verdicts)], seed=1, wall_s=0.0)
    assert rep.concurrent_windows == (1, 2)  # window 0 names both; window 1 misses A->S3
    assert rep.concurrent_windows_10 == (0, 0)  # no link crossings counted here: nothing expected to fail
    # 100 probes crossed each dead link in window 0, 100 and 5 in window 1: window 1's A->S3 could fail 5
    probes = {B: {"A->S3": 100, "C->S4": 100}, B + W: {"A->S3": 5, "C->S4": 100}}
    rep = accuracy.score([scenario_result(run, INV, "lab", verdicts, probes)], seed=1, wall_s=0.0)
    assert rep.concurrent_windows == (1, 2) and rep.concurrent_windows_10 == (1, 1)
    assert rep.window_recall == {"link_down": (3, 4)}


def test_the_lab_loop_writes_its_split_tuples_into_the_agents_pinglist_files_and_withdraws_them(tmp_path):
    import json
    from types import SimpleNamespace

    from bench.lab_accuracy import LabLoop
    from fabricscope.cmd_lab import build_lab_pinglists

    qpns = {r: 1000 + i for i, r in enumerate(sorted(INV.rnics))}
    base = build_lab_pinglists(INV, qpns, 1, [])
    lab = SimpleNamespace(inventory=INV, qpns=qpns, pinglists=base, directory=tmp_path)
    loop = LabLoop(lab, seed=1)
    assert not loop.step([], B) and not (tmp_path / "pinglists").exists()  # nothing asked: nothing written

    def files() -> dict[str, list[dict]]:
        return {p.stem: json.loads(p.read_text())["entries"] for p in (tmp_path / "pinglists").glob("*.json")}

    tie = {"verdict_id": "v1", "window_start_ns": B, "kind": "undetermined", "location": "A->S2|B->S2",
           "revision_of": None, "evidence": json.dumps({"why": "links explain the same failures equally"})}
    assert loop.step([tie], B + W)
    written = files()
    extra = [e for h, es in written.items() for e in es[len(base[h]):]]
    assert written.keys() == base.keys() and all(written[h][:len(base[h])] == base[h] for h in base)
    assert extra and all(e["pinglist"] == "inter_tor" and e["qpn"] == qpns[e["responder_rnic"]] for e in extra)
    assert not loop.step([tie], B + W + S)  # the same verdicts again: nothing new to write
    assert loop.step([tie], B + 4 * W)  # two windows with no request or naming: withdrawn
    assert files() == base


def test_a_lab_run_record_starts_empty_and_owns_its_lists():
    from bench.lab_accuracy import LabAccuracyRun

    a, b = LabAccuracyRun(), LabAccuracyRun()
    a.runs.append(1)
    a.loop_log.append({"how": "split"})
    assert b.runs == [] and b.loop_log == [] and b.loop_writes == 0


def test_first_and_var_are_refused_for_the_simulator():
    """``--first`` and ``--var`` pick and keep a lab run; with the simulator they would be ignored, so
    the command says so instead of running without them."""
    from typer.testing import CliRunner

    from fabricscope.cli import app, register_all

    register_all()
    for extra in (["--first", "3"], ["--var", "/tmp/x"]):
        res = CliRunner().invoke(app, ["bench", "accuracy", "--scenarios", "1", *extra])
        assert res.exit_code == 2, res.output
        assert "--first and --var are for --source lab" in res.output
