"""Impact and blame through the real pipeline: the digest's job H1+H3 on Panel 1 with A–S3 dead
(its A2→B2 flow crosses S3) -> P0 when the job's metric is below its threshold, P1 above it, and
`fabricscope blame` says "network" from the store, with coverage (the digest's Panel 1 checks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fabricscope.demo import JOB_ID, run_demo
from fabricscope.settings import Settings

from probe_rows import recent

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

START = recent(1_795_000_000_000_000_000)
SEED_A_S3 = 10  # scenario_faults("switch-link-down", panel1(), 10) is A–S3


@pytest.mark.parametrize(("metric", "impact"), [(50.0, "P0"), (150.0, "P1")])
def test_dead_link_on_the_jobs_path_is_graded_by_the_job_metric(kafka_bootstrap, tmp_path, metric, impact):
    r = run_demo(Settings(kafka_bootstrap=kafka_bootstrap), "sim", "switch-link-down", seed=SEED_A_S3,
                 windows=1, var=tmp_path, start_ns=START, job=(metric, 100.0))
    assert r.truth["faults"][0]["location"] == "A->S3"
    first = r.verdicts_in(r.complete_windows()[0]["window_start_ns"])
    on_job = [v for v in first if v["job_id"] == JOB_ID]
    assert [(v["kind"], v["location"], v["impact"]) for v in on_job] == [("switch", "A->S3", impact)]
    if impact != "P0":
        return
    env = {"FABRICSCOPE_VAR": str(tmp_path), "KAFKA_BOOTSTRAP": kafka_bootstrap}
    out = subprocess.run([sys.executable, "-m", "fabricscope", "blame", "--job", JOB_ID,
                          "--at", str(START + 25_000_000_000), "--json"],
                         capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
    assert out.returncode == 0, out.stderr
    ans = json.loads(out.stdout)
    assert ans["answer"] == "network"
    assert [(p["kind"], p["location"]) for p in ans["problems"]] == [("switch", "A->S3")]
    assert ans["coverage"]["connections_probed"] == ans["coverage"]["connections_expected"] == 2
