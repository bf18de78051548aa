"""`fabricscope up --source lab` leaves something to see after one run: ToR names in the rollups (the lab's
inventory is in the store), and coverage for job-lab on the service pinglist, so `blame` answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = [pytest.mark.lab, pytest.mark.kafka, pytest.mark.slow]
if os.geteuid() != 0 or subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
    pytest.skip("the lab needs root and network namespaces", allow_module_level=True)



def test_up_lab_loads_the_inventory_and_runs_a_job_blame_can_answer_for(tmp_path, topic_prefix, kafka_bootstrap):
    env = {**os.environ, "PYTHONPATH": str(REPO), "KAFKA_BOOTSTRAP": kafka_bootstrap,
           "FABRICSCOPE_TOPIC_PREFIX": topic_prefix, "FABRICSCOPE_VAR": str(tmp_path / "var")}

    def fs(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fabricscope", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=timeout)

    up = fs("up", "--source", "lab", "--duration", "75", timeout=400)
    assert up.returncode == 0, up.stderr
    assert up.stdout == "" and "job job-lab on the service pinglist" in up.stderr
    # the heatmap reads the hourly tier (hour >= now - since): 2 h holds the run's hours at any minute of the hour
    heat = [json.loads(x) for x in fs("query", "loss_heatmap", "--since", "2h", "--json").stdout.splitlines()]
    assert {r["prober_tor"] for r in heat} == {r["responder_tor"] for r in heat} == {"A", "B", "C"}
    cov = [json.loads(x) for x in fs("query", "SELECT window_start_ns, job_id, connections_expected, "
                                             "connections_probed, sufficient FROM coverage ORDER BY window_start_ns",
                                     "--json").stdout.splitlines()]
    assert cov and all(c["job_id"] == "job-lab" and c["connections_expected"] == 2 for c in cov)
    good = [c for c in cov if c["sufficient"]]
    assert good, cov
    at = str(good[-1]["window_start_ns"] + 5 * 10**9)
    plain, as_json = fs("blame", "--job", "job-lab", "--at", at), fs("blame", "--job", "job-lab", "--at", at, "--json")
    assert plain.returncode == as_json.returncode == 0, plain.stdout + plain.stderr
    assert json.loads(as_json.stdout)["answer"] == "innocent" and "INNOCENT" in plain.stdout
    assert not (tmp_path / "var" / "lab" / "state.json").exists()  # the lab it made is gone
