"""Probe noise stays noise: a restarted target's stale QPNs are graded ``noise`` (not P0-P2), on a job's
paths or off them, and raise no alert (R-Pingmesh §5: "probe noise: drop the timeout")."""

from __future__ import annotations

from analyzer_fabric import Faults, Job, S, last_uploads, panel1, window

from sinks.alerts import Hysteresis
from streams.pingmesh.analyzer import AnalyzerState, analyze_window
from streams.pingmesh.impact import NOISE_NOTE, Footprint, grade
from streams.pingmesh.partial import summarize

START = 1_000 * 20 * S
FAB = panel1()
JOB = Job("J", [("A2", "B2", "S3"), ("A1", "B1", "S1")])  # B1 lies on the job's paths


def test_grade_keeps_p0_p1_p2_and_calls_stale_qpn_noise():
    fps = {"J": Footprint(links={"A->S1"}, rnics={"A1", "B1"}, hosts={"H1", "H3"})}
    crossed = {"J": (0.4, True)}
    assert grade("rnic", "B1", fps, crossed, {}) == [("P0", "J", 0.4)]
    assert grade("rnic", "B1", fps, {}, {}) == [("P1", "J", None)]
    assert grade("rnic", "C3", fps, crossed, {}) == [("P2", None, None)]
    assert grade("stale_qpn", "B1", fps, crossed, {}) == [("noise", None, None)]  # on the job's paths
    assert grade("stale_qpn", "C3", fps, crossed, {}) == [("noise", None, None)]
    assert "not the network" in NOISE_NOTE and "pinglist is stale" in NOISE_NOTE


def test_analyzer_grades_a_restarted_target_on_the_jobs_path_as_noise():
    faults = Faults(restarted={"B1"})
    probes, paths, reg = window(FAB, faults, start_ns=START, jobs=[JOB])
    res = analyze_window(summarize(START, probes, paths), registry=reg,
                         host_last_upload=last_uploads(FAB, faults, START), state=AnalyzerState())
    rows = res.verdicts.to_pylist()
    assert [(v["kind"], v["location"], v["impact"], v["job_id"]) for v in rows] == [
        ("stale_qpn", "B1", "noise", None)]


def test_probe_noise_raises_no_alert():
    v = {"verdict_id": "v", "window_start_ns": 0, "window_end_ns": 20 * S, "kind": "stale_qpn",
         "location": "B1", "failed_probes": 9, "total_probes": 200, "confidence": 1.0, "impact": "noise",
         "job_id": None}
    h = Hysteresis("c1")
    assert h.observe([v]) == [] and h.active == {}
