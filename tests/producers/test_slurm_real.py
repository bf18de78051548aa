"""The jobs source and node actions on a real Slurm (Debian's slurmctld, slurmd and munge, started by
``infra/slurm/slurm.sh start``; six nodes H1..H6 named like Panel 1's and the lab's hosts).

Real jobs are submitted with ``sbatch --wrap 'sleep ...'``; the source reads them back with their nodes
expanded and mapped to RNICs; a fault on one job's path (the ``sim`` backend, with the job's own
service-pinglist connections) is graded P0 against the Slurm job id, ``blame`` says network, and
``fabricscope jobs remediate --apply --production`` drains the node in Slurm and resumes it; the
blast-radius guard refuses past half the partition, leaves an operator's drain alone, and keeps its
hourly count across runs through the store. When Slurm cannot be started here the module is skipped
with the script's reason (in CI it fails instead, as the Kafka tests do).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from producers.scheduler.jobs import job_connections, matches, place
from producers.scheduler.slurm import SlurmClient, read_jobcomp
from producers.sim.fabrics import panel1
from schemas.arrow_pa import arrow_schema
from sinks.remediate import REASON_PREFIX

from conftest import REPO, wait_for

pytestmark = [pytest.mark.slow]

SCRIPT = REPO / "infra" / "slurm" / "slurm.sh"
S = 1_000_000_000
WINDOW = 20 * S


@pytest.fixture(scope="module")
def slurm():
    """A SlurmClient on the running test cluster (started here if it was not running; stopped again then)."""
    was_up = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True).returncode == 0
    if not was_up:
        r = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            msg = f"Slurm could not be started by infra/slurm/slurm.sh start: {(r.stderr or r.stdout).strip()[-600:]}"
            if os.environ.get("CI"):
                pytest.fail(msg)
            pytest.skip(msg)
    conf = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True, check=True).stdout
    client = SlurmClient(conf=conf.strip().split("=", 1)[1])
    yield client
    client.run(["scancel", "--name=fs-test"])
    for n in client.nodes():
        if n.drain and (n.reason.startswith(REASON_PREFIX) or n.reason.startswith("operator: fs-test")):
            client.resume(n.name)
    if not was_up:
        subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, text=True, timeout=120, check=True)


def sbatch(client: SlurmClient, *args: str) -> str:
    out = client.run(["sbatch", "--parsable", "--job-name=fs-test", "--output=/dev/null", *args])
    return out.strip().split(";")[0]


def job_in(client: SlurmClient, job_id: str, state: str = "RUNNING"):  # noqa: ANN201
    jobs = [j for j in client.jobs() if j.job_id == job_id]
    return jobs[0] if jobs and jobs[0].state == state else None


def node_reasons(client: SlurmClient) -> dict[str, str]:
    return {n.name: n.reason for n in client.nodes() if n.drain}


def fabricscope(env_var: Path, client: SlurmClient, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FABRICSCOPE_VAR": str(env_var), "SLURM_CONF": client.conf or ""}
    return subprocess.run([sys.executable, "-m", "fabricscope", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)


def verdict_file(path: Path, rows: list[dict]) -> Path:
    schema = arrow_schema("verdict.v1")
    full = [{**{f.name: None for f in schema}, "votes": 1.0, "confidence": 0.9, "failed_probes": 10,
             "total_probes": 10, "evidence": "{}", "emitted_ns": r["window_end_ns"], **r} for r in rows]
    pq.write_table(pa.Table.from_pylist(full, schema=schema), path)
    return path


def test_a_submitted_job_is_read_with_its_nodes_rnics_and_end(slurm, tmp_path):
    jid = sbatch(slurm, "-N", "2", "-w", "H1,H3", "--wrap", "sleep 30")
    job = wait_for(lambda: job_in(slurm, jid), 120, what=f"job {jid} RUNNING")
    assert (job.nodes, job.user, job.name, job.end_ns) == (("H1", "H3"), "root", "fs-test", None)
    p = place(job, panel1())
    assert p.rnics == ("A1", "A2", "B1", "B2") and p.unmapped == ()
    inv = tmp_path / "inv.yaml"
    panel1().dump(inv)
    out = fabricscope(tmp_path, slurm, "jobs", "list", "--inventory", str(inv), "--json")
    assert out.returncode == 0, out.stderr
    mine = [json.loads(line) for line in out.stdout.splitlines() if json.loads(line)["job_id"] == jid]
    assert [(m["state"], m["nodes"], m["rnics"]) for m in mine] == [("RUNNING", ["H1", "H3"], ["A1", "A2", "B1", "B2"])]
    slurm.run(["scancel", jid])
    done = wait_for(lambda: job_in(slurm, jid, "CANCELLED"), 60, what=f"job {jid} CANCELLED")
    assert done.end_ns is not None and done.start_ns <= done.end_ns <= time.time_ns()
    # the completion log has it too, for when it ages out of slurmctld (MinJobAge)
    logged = wait_for(lambda: [j for j in read_jobcomp(slurm.jobcomp_path()) if j.job_id == jid], 60,
                      what="the job in the completion log")
    assert (logged[0].nodes, logged[0].state) == (("H1", "H3"), "CANCELLED")
    assert abs(logged[0].end_ns - done.end_ns) <= S  # whole seconds in both


def test_array_tasks_are_jobs_of_their_own_that_the_parent_id_finds(slurm):
    jid = sbatch(slurm, "-a", "0-1", "--wrap", "sleep 30")
    tasks = wait_for(lambda: [j for j in slurm.jobs() if j.parent_id == jid and j.state == "RUNNING"
                              and len(j.nodes) == 1] if len([j for j in slurm.jobs() if j.parent_id == jid
                                                             and j.state == "RUNNING"]) == 2 else None,
                     120, what=f"both tasks of array {jid} RUNNING")
    assert sorted(t.job_id for t in tasks) == [f"{jid}_0", f"{jid}_1"]
    assert all(matches(t, jid) for t in tasks) and matches(tasks[0], f"{tasks[0].job_id}.batch")
    slurm.run(["scancel", jid])


def test_a_fault_on_a_slurm_jobs_path_is_p0_for_that_job_blamed_on_the_network_and_drains_its_node(slurm, tmp_path):
    from bench.sim_reducer import SimPipeline
    from producers.sim import Simulator
    from producers.sim.faults import RnicDown
    from streams.pingmesh.blame import blame
    from streams.pingmesh.impact import JobThreshold

    jid = sbatch(slurm, "-N", "2", "-w", "H1,H3", "--wrap", "sleep 120")
    job = wait_for(lambda: job_in(slurm, jid), 120, what=f"job {jid} RUNNING")
    inv = panel1()
    conns = job_connections(place(job, inv), inv)
    # the sim runs the job's own service connections, from the first window after it started; RNIC A1 (on H1) dies
    t0 = (job.start_ns // WINDOW + 1) * WINDOW
    sim = Simulator(inv, seed=1, faults=[RnicDown(rnic="A1")])
    sim.set_connections(conns)
    pipe = SimPipeline(sim, workers=1)
    pipe.reducer.thresholds = {jid: JobThreshold(100.0)}  # its throughput metric: 50 < 100 is a breach
    pipe.reducer.on_job_metrics(pa.table({"job_id": [jid] * 4, "sample_ns": [t0 + k * 10 * S for k in range(4)],
                                          "value": [50.0] * 4}))
    results = pipe.run(t0, 40, tag="slurm")
    verdicts = pa.concat_tables([r.verdicts for _, r in results])
    coverage = pa.concat_tables([r.coverage for _, r in results])
    graded = {(v["kind"], v["location"], v["impact"], v["job_id"]) for v in verdicts.to_pylist()}
    assert graded == {("rnic", "A1", "P0", jid)}
    assert job.running_at(t0 + 5 * S)
    ans = blame(jid, t0 + 5 * S, verdicts, coverage)
    assert ans.answer == "network" and [(p["kind"], p["location"]) for p in ans.problems] == [("rnic", "A1")]
    assert ans.coverage["connections_probed"] == ans.coverage["connections_expected"] == 4

    vfile = tmp_path / "verdicts.parquet"
    pq.write_table(verdicts, vfile)
    inv_file = tmp_path / "inv.yaml"
    inv.dump(inv_file)
    # the store: the job from Slurm (jobs sync), the verdicts and coverage as the sink writes them
    sync = fabricscope(tmp_path, slurm, "jobs", "sync", "--inventory", str(inv_file))
    assert sync.returncode == 0, sync.stderr
    from sinks.clickhouse import migrate, open_store

    store = open_store(tmp_path / "clickhouse")
    try:
        migrate(store)
        store.insert_arrow("verdicts", verdicts)
        store.insert_arrow("coverage", coverage)
    finally:
        store.close()
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((t0 + 5 * S) // S))
    out = fabricscope(tmp_path, slurm, "blame", "--job", f"{jid}.batch", "--at", at, "--json")
    assert out.returncode == 0, out.stderr
    said = json.loads(out.stdout)
    assert (said["job_id"], said["answer"]) == (jid, "network")
    assert [(p["impact"], p["kind"], p["location"]) for p in said["problems"]][0] == ("P0", "rnic", "A1")
    sj = said["scheduler_job"]
    assert (sj["nodes"], sj["rnics"], sj["running_at"]) == (["H1", "H3"], ["A1", "A2", "B1", "B2"], True)
    hit = fabricscope(tmp_path, slurm, "query", "jobs_hit", "--json")
    assert hit.returncode == 0, hit.stderr
    rows = {r["job_id"]: r for r in map(json.loads, hit.stdout.splitlines()) if r.get("job_id")}
    assert rows[jid]["worst_impact"] == "P0" and rows[jid]["problems"] == ["rnic A1"]
    dry = fabricscope(tmp_path, slurm, "jobs", "remediate", "--verdicts", str(vfile), "--inventory", str(inv_file))
    assert dry.returncode == 0, dry.stderr
    assert "drain    H1       dry-run" in dry.stdout and "H1" not in node_reasons(slurm)
    refused = fabricscope(tmp_path, slurm, "jobs", "remediate", "--verdicts", str(vfile), "--inventory",
                          str(inv_file), "--apply")
    assert refused.returncode == 2 and "--production" in refused.stderr
    done = fabricscope(tmp_path, slurm, "jobs", "remediate", "--verdicts", str(vfile), "--inventory", str(inv_file),
                       "--apply", "--production")
    assert done.returncode == 0, done.stderr
    first = verdicts.to_pylist()[0]["verdict_id"]
    reasons = node_reasons(slurm)
    assert list(reasons) == ["H1"] and reasons["H1"].startswith("fabricscope: rnic A1 verdict ")
    assert reasons["H1"].split()[-1] in {v["verdict_id"] for v in verdicts.to_pylist()} and first
    # the problem clears: no verdicts -> the node fabricscope drained is resumed
    clear = fabricscope(tmp_path, slurm, "jobs", "remediate", "--verdicts", str(verdict_file(tmp_path / "none.parquet",
                        [])), "--inventory", str(inv_file), "--apply", "--production")
    assert clear.returncode == 0, clear.stderr
    assert "resume   H1       done" in clear.stdout and node_reasons(slurm) == {}
    log = fabricscope(tmp_path, slurm, "query", "--json", "SELECT action, node, outcome, dry_run FROM node_actions "
                      "FINAL WHERE action IN ('drain', 'resume') ORDER BY at_ns")
    assert log.returncode == 0, log.stderr
    rows = [json.loads(line) for line in log.stdout.splitlines() if line.startswith("{")]
    assert [(r["action"], r["node"], r["outcome"], r["dry_run"]) for r in rows] == [
        ("drain", "H1", "dry-run", True), ("drain", "H1", "done", False), ("resume", "H1", "done", False)]
    slurm.run(["scancel", jid])


def test_the_guard_refuses_past_half_the_partition_and_keeps_its_hourly_count_across_runs(slurm, tmp_path):
    now = time.time_ns()
    ws = now // WINDOW * WINDOW - WINDOW

    def v(kind, loc):  # noqa: ANN001, ANN202
        return {"verdict_id": f"t-{loc}", "window_start_ns": ws, "window_end_ns": ws + WINDOW, "kind": kind,
                "location": loc, "impact": "P1"}

    inv_file = tmp_path / "inv.yaml"
    panel1().dump(inv_file)
    slurm.drain("H6", "operator: fs-test bad DIMM")
    four = verdict_file(tmp_path / "four.parquet", [v("rnic", "A1"), v("rnic", "A3"), v("host_down", "H3"),
                                                    v("busy_host", "H4")])
    r = fabricscope(tmp_path, slurm, "jobs", "remediate", "--verdicts", str(four), "--inventory", str(inv_file),
                    "--apply", "--production")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "would hold 4 of partition lab's 6 nodes drained (max_fraction 0.5)" in r.stdout
    reasons = node_reasons(slurm)
    assert sorted(reasons) == ["H1", "H2", "H3", "H6"] and reasons["H6"] == "operator: fs-test bad DIMM"
    assert reasons["H3"] == "fabricscope: host_down H3 verdict t-H3"
    empty = verdict_file(tmp_path / "none.parquet", [])
    r = fabricscope(tmp_path, slurm, "jobs", "remediate", "--verdicts", str(empty), "--inventory", str(inv_file),
                    "--apply", "--production")
    assert r.returncode == 0, r.stderr
    assert node_reasons(slurm) == {"H6": "operator: fs-test bad DIMM"}  # ours resumed, the operator's kept
    # a new run (a restart) still knows the 3 drains of this hour from the store
    r = fabricscope(tmp_path, slurm, "jobs", "remediate", "--verdicts", str(verdict_file(
        tmp_path / "h4.parquet", [v("busy_host", "H4")])), "--inventory", str(inv_file), "--apply", "--production",
        "--max-per-hour", "3")
    assert r.returncode == 4 and "3 drains in the last hour already (max_per_hour 3)" in r.stdout
    assert "H4" not in node_reasons(slurm)
    slurm.resume("H6")


def _conf_pids(conf: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                env = (d / "environ").read_bytes().split(b"\0")
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if f"SLURM_CONF={conf}".encode() in env or conf.encode() in cmd:
                out.append(int(d.name))
    return [p for p in out if p != os.getpid()]


def test_the_script_starts_idempotently_and_stops_leaving_no_process(slurm, tmp_path):
    # a second, two-node cluster of its own (own var, ports), so the shared one keeps running
    env = {**os.environ, "FABRICSCOPE_VAR": str(tmp_path), "SLURM_NODES": "T1 T2", "SLURMCTLD_PORT": "26917",
           "SLURMD_PORT": "26918"}
    conf = str(tmp_path / "slurm" / "etc" / "slurm.conf")

    def script(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)

    try:
        assert script("start").returncode == 0
        pids = sorted((tmp_path / "slurm" / "run").glob("*.pid"))
        first = {p.name: p.read_text() for p in pids}
        assert sorted(first) == ["munged.pid", "slurmctld.pid", "slurmd-T1.pid", "slurmd-T2.pid"]
        assert script("start").returncode == 0          # reuses what runs
        assert {p.name: p.read_text() for p in pids} == first
        other = SlurmClient(conf=conf)
        jid = other.run(["sbatch", "--parsable", "--output=/dev/null", "-N", "2", "--wrap", "sleep 300"]).strip()
        wait_for(lambda: job_in(other, jid), 120, what="the job RUNNING on the second cluster")
        stop = script("stop")
        assert stop.returncode == 0, stop.stderr
        assert _conf_pids(conf) == []                   # daemons, slurmstepd and the job's sleep are gone
        assert script("status").returncode == 1
    finally:
        script("stop", "--purge")
    assert not (tmp_path / "slurm").exists()


def test_a_drain_names_one_node_and_text_in_the_reason_cannot_widen_it(slurm):
    from producers.scheduler.slurm import SlurmError

    # scontrol itself would drain every node for NodeName=ALL (tried: it does), or a list for a hostlist
    for bad in ("H5,H6", "H[1-6]", "H5 State=RESUME", "ALL", "all", ""):
        with pytest.raises(SlurmError, match="one node name"):
            slurm.drain(bad, "fabricscope: x")
        with pytest.raises(SlurmError, match="one node name"):
            slurm.resume(bad)
    assert node_reasons(slurm) == {}
    reason = "fabricscope: rnic X NodeName=H6 State=RESUME verdict 1"
    slurm.drain("H5", reason)
    try:
        assert node_reasons(slurm) == {"H5": reason}  # H6 untouched, the text kept as the reason
    finally:
        slurm.resume("H5")
    assert node_reasons(slurm) == {}


def test_up_follows_running_slurm_jobs_on_the_service_pinglist(slurm, monkeypatch):
    from fabricscope.up import SchedulerJobs

    monkeypatch.delenv("SLURM_CONF", raising=False)
    assert {c["job_id"] for c in SchedulerJobs(panel1()).connections()} == {"job-lab"}  # no scheduler: the lab's
    jid = sbatch(slurm, "-N", "2", "-w", "H1,H3", "--wrap", "sleep 60")
    wait_for(lambda: job_in(slurm, jid), 120, what=f"job {jid} RUNNING")
    monkeypatch.setenv("SLURM_CONF", slurm.conf)
    jobs = SchedulerJobs(panel1())
    conns = jobs.connections()
    mine = [c for c in conns if c["job_id"] == jid]
    assert mine and {c["src_rnic"][0] for c in mine} | {c["dst_rnic"][0] for c in mine} == {"A", "B"}  # H1, H3
    assert jid in jobs.followed and "job-lab" in {c["job_id"] for c in conns}
    slurm.run(["scancel", jid])
    wait_for(lambda: job_in(slurm, jid, "CANCELLED"), 60, what=f"job {jid} CANCELLED")
    assert jid not in {c["job_id"] for c in jobs.connections()}
