"""The analyzer's per-job state is bounded: a job whose service probes stopped is forgotten after the
retention, so coverage rows and known connections are kept for running jobs only."""

from __future__ import annotations

from analyzer_fabric import Job, S, last_uploads, panel1, window

from streams.pingmesh.analyzer import AnalyzerConfig, AnalyzerState, analyze_window
from streams.pingmesh.impact import CoverageConfig
from streams.pingmesh.partial import summarize

START = 1_000 * 20 * S
JOB = Job("J", [("A2", "B2", "S3"), ("A1", "B1", "S1")])


def test_an_ended_job_gets_coverage_rows_until_the_retention_then_is_forgotten():
    fab = panel1()
    cfg = AnalyzerConfig(coverage=CoverageConfig(job_retention_ns=60 * S))  # three 20 s windows
    state = AnalyzerState()
    probed, expected = [], []
    for k in range(5):  # the job's probes run in window 0 only
        ws = START + k * 20 * S
        probes, paths, reg = window(fab, start_ns=ws, jobs=[JOB] if k == 0 else [])
        res = analyze_window(summarize(ws, probes, paths), registry=reg, host_last_upload=last_uploads(fab, None, ws),
                             state=state, config=cfg)
        rows = {r["job_id"]: r for r in res.coverage.to_pylist()}
        probed.append(rows["J"]["connections_probed"] if "J" in rows else None)
        expected.append(rows["J"]["connections_expected"] if "J" in rows else None)
    # window 0: both connections probed; windows 1-2 (20 and 40 s after it): an ended job's row, nothing
    # probed of its 2 known connections; window 3 (60 s): past the retention, no row and no state
    assert probed == [2, 0, 0, None, None]
    assert expected == [2, 2, 2, None, None]
    assert state.job_flows == {} and state.job_seen_ns == {}
