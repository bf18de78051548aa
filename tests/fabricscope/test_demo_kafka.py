"""`fabricscope demo --json` on the real broker: stdout is JSON lines only, and the verdicts reach the
store `fabricscope query` reads (here through the main topics, since a store writer owns the store)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _query(env: dict[str, str], sql: str) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "fabricscope", "query", sql, "--json"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines()]


def test_demo_json_is_pure_and_its_verdicts_reach_the_running_pipelines_store(pipeline_env, tmp_path):
    env, procs = pipeline_env
    env = {**env, "PYTHONPATH": str(REPO)}
    procs.env = env
    procs.start("sink")  # the main pipeline's store writer owns FABRICSCOPE_VAR's store
    from sinks.query_endpoint import find_endpoint

    wait_for(lambda: find_endpoint(Path(env["FABRICSCOPE_VAR"]) / "clickhouse"), timeout=120, what="the sink")
    r = subprocess.run([sys.executable, "-m", "fabricscope", "demo", "--source", "sim", "--scenario",
                        "switch-link-down", "--json"], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=400)
    assert r.returncode == 0, r.stderr
    verdicts = [json.loads(line) for line in r.stdout.splitlines()]  # every stdout line is JSON
    assert verdicts and all(v["kind"] == "switch" for v in verdicts)
    assert "verdicts sent to the running pipeline's" in r.stderr and "kafka:" not in r.stdout
    ids = sorted(v["verdict_id"] for v in verdicts)
    got = wait_for(lambda: sorted(x["verdict_id"] for x in _query(env, "SELECT verdict_id FROM verdicts FINAL"))
                   == ids and ids, timeout=120, what="the demo's verdicts in the main store")
    assert got
