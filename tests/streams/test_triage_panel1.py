"""The digest's Panel 1 checks (R-Pingmesh §4.3, §5) on the hand-built fabric."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from analyzer_fabric import Faults, Job, S, last_uploads, panel1, window

from streams.pingmesh.analyzer import AnalyzerConfig, AnalyzerState, WindowResult, analyze_window
from streams.pingmesh.blame import blame
from streams.pingmesh.impact import JobThreshold
from streams.pingmesh.links import probe_links
from streams.pingmesh.partial import summarize
from streams.pingmesh.triage_config import TriageConfig
from streams.pingmesh.windows import WINDOW_NS

START = 1_000 * 20 * S
FAB = panel1()
JOB = Job("J", [("A2", "B2", "S3"), ("A1", "B1", "S1")])


def analyze(faults: Faults, *, start: int = START, state: AnalyzerState | None = None, seed: int = 0,
            config: AnalyzerConfig = AnalyzerConfig(), metrics: pa.Table | None = None,
            thresholds: dict | None = None, **kw) -> WindowResult:
    probes, paths, reg = window(FAB, faults, start_ns=start, seed=seed, **kw)
    part = summarize(start, probes, paths)
    return analyze_window(part, registry=reg, host_last_upload=last_uploads(FAB, faults, start),
                          state=state or AnalyzerState(), config=config, job_metrics=metrics,
                          thresholds=thresholds)


def kinds(res: WindowResult) -> list[tuple[str, str]]:
    return sorted({(r["kind"], r["location"]) for r in res.verdicts.to_pylist()})


def test_healthy_fabric_gives_no_verdict():
    assert kinds(analyze(Faults())) == []


def test_dead_a_s3_fails_8_paths_on_it_and_4_on_s3_b_and_s3_c():
    probes, paths, _ = window(FAB, Faults(dead_links={"A->S3"}), start_ns=START)
    part = summarize(START, probes, paths)
    f = part.failing
    pl = probe_links(f["fwd_hops"], f["rev_hops"])
    per_link = pl.group_by("link").aggregate([("row", "count_distinct")])
    counts = dict(zip(per_link["link"].to_pylist(), per_link["row_count_distinct"].to_pylist(), strict=True))
    assert counts["A->S3"] == 8
    assert counts["B->S3"] == 4
    assert counts["C->S3"] == 4
    assert set(f["pinglist"].to_pylist()) == {"inter_tor"}


@pytest.mark.parametrize("asym", [False, True])
def test_dead_a_s3_is_a_switch_verdict_at_a_s3_only(asym):
    res = analyze(Faults(dead_links={"A->S3"}), asym=asym)
    assert kinds(res) == [("switch", "A->S3")]
    v = res.verdicts.to_pylist()[0]
    assert v["votes"] == 1.0  # every probe crossing A–S3 failed
    assert v["failed_probes"] == v["total_probes"] == (160 if asym else 80)
    assert v["confidence"] >= 0.9


def test_dead_a3_is_an_rnic_problem_kept_out_of_the_vote():
    res = analyze(Faults(dead_rnics={"A3"}))
    assert kinds(res) == [("rnic", "A3")]
    v = res.verdicts.to_pylist()[0]
    assert json.loads(v["evidence"])["probers"] == ["A1", "A2", "A4"]
    assert v["failed_probes"] == v["total_probes"] > 190
    assert res.stats["voted"] == 0


def test_a3_failing_as_prober_flags_no_peer():
    res = analyze(Faults(bad_probers={"A3"}))
    assert not [k for k in kinds(res) if k[0] == "rnic"]


def test_two_dead_rnics_under_one_tor_are_both_found():
    res = analyze(Faults(dead_rnics={"A2", "A3"}))  # H1's and H2's, both under ToR A
    assert kinds(res) == [("rnic", "A2"), ("rnic", "A3")]


def test_every_rnic_of_a_host_failing_is_one_claim_about_the_host():
    res = analyze(Faults(dead_rnics={"A3", "A4"}))  # both RNICs of H2, its agent still uploading
    assert kinds(res) == [("host_unreachable", "H2")]
    ev = json.loads(res.verdicts.to_pylist()[0]["evidence"])
    assert ev["rnics"] == ["A3", "A4"] and ev["rnics_of_host"] == 2


def test_a_host_failing_below_the_rule_on_its_other_rnics_is_one_claim_about_the_host():
    # H2 stops answering late in the window: A3 crosses the RNIC rule's 10 %, A4 fails 7 % (below it)
    res = analyze(Faults(flaky_rnics={"A3": 0.15, "A4": 0.07}))
    assert kinds(res) == [("host_unreachable", "H2")]
    ev = json.loads(res.verdicts.to_pylist()[0]["evidence"])
    assert ev["rnics"] == ["A3", "A4"] and ev["below_rnic_rule"] == ["A4"]
    # the same RNIC failing alone stays an RNIC claim
    assert kinds(analyze(Faults(flaky_rnics={"A3": 0.15}))) == [("rnic", "A3")]


@pytest.mark.parametrize("veto", [True, False])
def test_busy_h1_is_busy_host_with_the_veto_and_false_rnic_without(veto):
    cfg = AnalyzerConfig(triage=TriageConfig(busy_host_veto=veto))
    res = analyze(Faults(busy_hosts={"H1"}), config=cfg)
    if veto:
        assert kinds(res) == [("busy_host", "H1")]
        ev = json.loads(res.verdicts.to_pylist()[0]["evidence"])
        assert ev["rnics"] == ["A1", "A2"]
        assert ev["delay_p50_ns"] > 1000 * ev["baseline_ns"]
    else:
        # without the veto the host's RNICs all fail together: one claim about the host, no rnic verdicts
        assert kinds(res) == [("host_unreachable", "H1")]
        assert not [k for k in kinds(res) if k[0] == "busy_host"]


def test_busy_host_with_one_rnic_over_the_rule_charges_every_timeout_to_the_host():
    # 10 % of the busy host's probes time out: only A1 passes the RNIC rule (the veto wants both of
    # H1's RNICs), and A3 looks faulty to its two probers, A1 and A2, which are H1's own. The lab hit
    # this under load: `busy_host` plus an `rnic` verdict in one window.
    res = analyze(Faults(busy_hosts={"H1"}, busy_timeout_p=0.1), seed=1)
    assert kinds(res) == [("busy_host", "H1")]
    v = res.verdicts.to_pylist()[0]
    ev = json.loads(v["evidence"])
    assert ev["rnics"] == ["A1", "A2"] and ev["flagged_rnics"] == ["A1"] and not ev["below_rnic_rule"]
    assert v["failed_probes"] == res.stats["timeouts"] == res.stats["rnic_charged"] > 0
    assert res.stats["voted"] == 0


def test_a_charged_rnic_stays_named_when_its_tor_peer_host_turns_busy():
    # A2 (H1) drops a quarter of its probes; in the next window H2 (A3, A4, A2's other ToR peers) turns busy,
    # so only A1 is left of the rule's probers. A1 still sees A2 fail: it stays an RNIC claim, beside the busy
    # host, and its timeouts are not hidden under the earlier charge.
    state = AnalyzerState()
    first = analyze(Faults(flaky_rnics={"A2": 0.25}), state=state, seed=2)
    assert kinds(first) == [("rnic", "A2")]
    nxt = analyze(Faults(flaky_rnics={"A2": 0.25}, busy_hosts={"H2"}, busy_timeout_p=0.1), state=state,
                  start=START + WINDOW_NS, seed=3)
    assert kinds(nxt) == [("busy_host", "H2"), ("rnic", "A2")]
    # without the earlier claim, the busy probers' view and a sibling failing alike are no RNIC fault
    alone = analyze(Faults(flaky_rnics={"A2": 0.25, "A1": 0.25}, busy_hosts={"H2"}, busy_timeout_p=0.1),
                    start=START + WINDOW_NS, seed=3)
    assert ("rnic", "A2") not in kinds(alone)


def test_a_charged_rnic_that_recovered_is_not_named_again_beside_a_busy_host():
    state = AnalyzerState()
    assert kinds(analyze(Faults(flaky_rnics={"A2": 0.25}), state=state, seed=2)) == [("rnic", "A2")]
    nxt = analyze(Faults(busy_hosts={"H2"}, busy_timeout_p=0.1), state=state, start=START + WINDOW_NS, seed=3)
    assert ("rnic", "A2") not in kinds(nxt)


def test_a_charged_rnic_stays_named_when_its_tor_peer_host_is_down():
    # A1 (H1) drops a quarter of its probes; then H2 (A3, A4) goes silent and only A2 is left to probe A1
    # across the ToR: the rule cannot judge it. Its access link still fails from every pinglist, and the
    # RNIC was claimed within its charge: still an RNIC claim; without the earlier claim, undetermined.
    state = AnalyzerState()
    assert kinds(analyze(Faults(flaky_rnics={"A1": 0.25}), state=state, seed=2)) == [("rnic", "A1")]
    faults = Faults(flaky_rnics={"A1": 0.25}, silent_hosts={"H2"})
    nxt = analyze(faults, state=state, start=START + WINDOW_NS, seed=3)
    assert kinds(nxt) == [("host_down", "H2"), ("rnic", "A1")]
    assert "charge" in json.loads(next(v for v in nxt.verdicts.to_pylist() if v["kind"] == "rnic")["evidence"])["why"]
    # without the earlier claim, and with A1's sibling A2 failing too, nothing names A1
    both = Faults(flaky_rnics={"A1": 0.25, "A2": 0.25}, silent_hosts={"H2"})
    assert ("rnic", "A1") not in kinds(analyze(both, start=START + WINDOW_NS, seed=3))


def test_an_rnic_failing_beside_a_clean_sibling_is_named_when_its_tor_peers_are_down():
    # H2 (A3, A4) is silent and A1 drops a quarter of its probes: only A2, on A1's own host, is left to
    # probe A1 across the ToR, and the rule cannot judge it. Probes from every other ToR fail through A1's
    # access link while A2's are clean: A1 (its RNIC, cable or ToR port), with no earlier claim needed.
    res = analyze(Faults(flaky_rnics={"A1": 0.25}, silent_hosts={"H2"}), seed=3)
    assert kinds(res) == [("host_down", "H2"), ("rnic", "A1")]
    # both of H1's RNICs failing alike is no RNIC claim (a host cause is as likely)
    res = analyze(Faults(flaky_rnics={"A1": 0.25, "A2": 0.25}, silent_hosts={"H2"}), seed=3)
    assert ("rnic", "A1") not in kinds(res) and ("rnic", "A2") not in kinds(res)


def test_silent_agent_is_host_down_not_rnic():
    res = analyze(Faults(silent_hosts={"H3"}))
    assert kinds(res) == [("host_down", "H3")]
    v = res.verdicts.to_pylist()[0]
    assert json.loads(v["evidence"])["silent_ns"] == 30 * S
    assert v["failed_probes"] == v["total_probes"] > 0


def test_restarted_target_is_stale_qpn_not_rnic():
    res = analyze(Faults(restarted={"B1"}))
    assert kinds(res) == [("stale_qpn", "B1")]
    v = res.verdicts.to_pylist()[0]
    assert 0 < v["failed_probes"] < v["total_probes"]


def test_two_simultaneous_switch_faults_are_both_named():
    res = analyze(Faults(dead_links={"A->S3", "C->S1"}))
    assert kinds(res) == [("switch", "A->S3"), ("switch", "C->S1")]


def test_lossy_link_is_named():
    res = analyze(Faults(lossy_links={"B->S2": 0.3}), inter_n=40)
    assert kinds(res) == [("switch", "B->S2")]


def test_fault_below_the_rnic_rule_is_undetermined_not_guessed():
    res = analyze(Faults(flaky_rnics={"A3": 0.05}), seed=3)
    ks = kinds(res)
    assert ("rnic", "A3") not in ks
    assert not [k for k in ks if k[0] == "switch"]
    assert ("undetermined", "A3") in ks


def test_latency_only_fault_is_switch_latency_at_that_link():
    state = AnalyzerState()
    for k in range(2):  # a tail is anomalous against the flow's own history: two healthy windows first
        assert kinds(analyze(Faults(), start=START - (2 - k) * WINDOW_NS, state=state, seed=k)) == []
    res = analyze(Faults(slow_links={"B->S2": 200_000}), state=state)
    assert kinds(res) == [("switch_latency", "B->S2")]
    v = res.verdicts.to_pylist()[0]
    assert v["failed_probes"] == v["total_probes"] == 8  # slow flows / flows crossing B–S2


def test_host_delay_with_flat_network_rtt_is_not_a_network_problem():
    res = analyze(Faults(busy_hosts={"H2"}, busy_timeout_p=0.0))
    assert kinds(res) == []


def test_impact_job_on_a_s3_is_p0_or_p1_and_unrelated_rnic_is_p2():
    faults = Faults(dead_links={"A->S3"}, dead_rnics={"C3"})
    low = pa.table({"job_id": ["J", "J"], "sample_ns": [START + S, START + 10 * S], "value": [40.0, 60.0]})
    th = {"J": JobThreshold(80.0)}
    res = analyze(faults, jobs=[JOB], metrics=low, thresholds=th)
    rows = {(r["kind"], r["location"]): r for r in res.verdicts.to_pylist()}
    assert rows[("switch", "A->S3")]["impact"] == "P0"
    assert rows[("switch", "A->S3")]["job_id"] == "J"
    assert json.loads(rows[("switch", "A->S3")]["evidence"])["job_metric"] == 50.0
    assert rows[("rnic", "C3")]["impact"] == "P2"
    assert rows[("rnic", "C3")]["job_id"] is None
    high = pa.table({"job_id": ["J"], "sample_ns": [START + S], "value": [95.0]})
    res = analyze(faults, jobs=[JOB], metrics=high, thresholds=th)
    rows = {(r["kind"], r["location"]): r for r in res.verdicts.to_pylist()}
    assert rows[("switch", "A->S3")]["impact"] == "P1"

    ans = blame("J", START + 7 * S, res.verdicts, res.coverage)
    assert ans.answer == "network"
    assert [(p["kind"], p["location"], p["impact"]) for p in ans.problems] == [("switch", "A->S3", "P1")]
    assert ans.coverage["connections_probed"] == ans.coverage["connections_expected"] == 2
    assert ans.coverage["links_covered"] == ans.coverage["links_total"] == 8  # 2 paths x 4 links


def test_blame_innocent_needs_coverage_and_unknown_without():
    res = analyze(Faults(dead_rnics={"C3"}), jobs=[JOB])
    ans = blame("J", START + 1, res.verdicts, res.coverage)
    assert ans.answer == "innocent"
    assert ans.coverage["sufficient"] is True
    assert blame("other", START + 1, res.verdicts, res.coverage).answer == "unknown"
    # H3 (the job's responder host) silent: its connections' answers are missing -> unknown, not innocent
    state = AnalyzerState()
    analyze(Faults(), jobs=[JOB], state=state)
    res2 = analyze(Faults(silent_hosts={"H3"}), jobs=[JOB], state=state, start=START + 20 * S)
    ans2 = blame("J", START + 21 * S, res2.verdicts, res2.coverage)
    assert ans2.answer == "unknown"
    assert ans2.coverage["agents_silent"] == "H3"


def test_rnic_is_charged_for_60_s_and_kept_out_of_the_vote():
    state = AnalyzerState()
    r1 = analyze(Faults(dead_rnics={"A3"}), state=state)
    assert kinds(r1) == [("rnic", "A3")]
    # next window A3 loses only 5 %: below the rule, but still charged -> nothing voted, no undetermined
    r2 = analyze(Faults(flaky_rnics={"A3": 0.05}), state=state, start=START + 20 * S, seed=3)
    assert kinds(r2) == []
    assert r2.stats["voted"] == 0
    # after 60 s the charge has lapsed and the same loss is undetermined again
    r3 = analyze(Faults(flaky_rnics={"A3": 0.05}), state=state, start=START + 80 * S, seed=3)
    assert ("undetermined", "A3") in kinds(r3)


def test_a_charged_rnic_the_rule_cannot_judge_is_named_by_its_access_link():
    state = AnalyzerState()
    assert kinds(analyze(Faults(dead_rnics={"A3"}), state=state)) == [("rnic", "A3")]
    # next window H1 (A1, A2) is down too: A3's ToR peers cannot probe it, so the rule cannot judge it,
    # and its charge must not hide it; the vote names its access link, which every probe failed on
    res = analyze(Faults(dead_rnics={"A3"}, silent_hosts={"H1"}), state=state, start=START + 20 * S)
    assert ("rnic", "A3") in kinds(res) and ("host_down", "H1") in kinds(res)
    v = next(v for v in res.verdicts.to_pylist() if v["kind"] == "rnic")
    assert json.loads(v["evidence"])["link"] == "A3->A"


@pytest.mark.parametrize(("dead", "revised"), [({"B1"}, "B1"), ({"B1", "B2"}, "H3")],
                         ids=["rnic", "host_unreachable"])
def test_earlier_verdict_is_revised_to_host_down_when_the_host_goes_silent(dead, revised):
    state = AnalyzerState()
    r1 = analyze(Faults(dead_rnics=dead), state=state, config=AnalyzerConfig(
        triage=TriageConfig(busy_host_veto=False)))
    ids = {r["location"]: r["verdict_id"] for r in r1.verdicts.to_pylist()}
    assert list(ids) == [revised]
    faults = Faults(silent_hosts={"H3"})
    probes, paths, reg = window(FAB, faults, start_ns=START + 20 * S)
    uploads = last_uploads(FAB, faults, START + 20 * S)
    r2 = analyze_window(summarize(START + 20 * S, probes, paths), registry=reg, host_last_upload=uploads,
                        state=state)
    rev = r2.verdicts.filter(pc.is_valid(r2.verdicts["revision_of"])).to_pylist()
    assert [r["revision_of"] for r in rev] == [ids[revised]]
    assert {r["kind"] for r in rev} == {"host_down"}
    assert {r["window_start_ns"] for r in rev} == {START}
    assert ("host_down", "H3") in kinds(r2)


def test_verdicts_are_deterministic_and_valid_verdict_v1():
    a = analyze(Faults(dead_links={"A->S3"}, dead_rnics={"C3"}), jobs=[JOB]).verdicts
    b = analyze(Faults(dead_links={"A->S3"}, dead_rnics={"C3"}), jobs=[JOB]).verdicts
    assert a.equals(b)
    assert a.schema.metadata[b"fabricscope.schema"] == b"verdict.v1"
    assert np.all(a["emitted_ns"].to_numpy() == START + 20 * S)


def test_a_lossy_claim_whose_failures_also_crossed_a_dead_claim_asks_to_be_probed_itself():
    """Dead A-S3 and lossy B-S2 (30 %), ACKs one spine on (out over S2, back over S3): the probes from A to B
    that go out over S2 fail on both. The lossy claim's evidence names the dead one (``verify_self``: the loop
    probes B-S2 off A-S3); the dead one asks nothing of the kind (every probe through it shows it)."""
    res = analyze(Faults(dead_links={"A->S3"}, lossy_links={"B->S2": 0.3}), inter_n=40, asym=True)
    assert kinds(res) == [("switch", "A->S3"), ("switch", "B->S2")]
    ev = {r["location"]: json.loads(r["evidence"]) for r in res.verdicts.to_pylist()}
    assert ev["B->S2"]["verify_self"] == ["A->S3"] and ev["B->S2"]["ratio"] < 0.95
    assert "verify_self" not in ev["A->S3"]
    # the same lossy link beside no other claim: nothing shared, nothing asked
    alone = analyze(Faults(lossy_links={"B->S2": 0.3}), inter_n=40, asym=True)
    assert [json.loads(r["evidence"]).get("verify_self") for r in alone.verdicts.to_pylist()] == [None]
