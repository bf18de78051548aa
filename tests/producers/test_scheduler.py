"""The jobs source's pure parts, on hand-computed cases and Slurm 22.05's own output captured from the
real cluster (tests/producers/fixtures/slurm): hostlists, job ids, squeue JSON and the job completion log,
placement on Panel 1, the node-pair sample, and the blast-radius guard of node actions."""

from __future__ import annotations

import json

import pytest

from producers.scheduler.hostlist import HostlistError, expand
from producers.scheduler.jobs import (
    Job,
    JobIdError,
    NodeMap,
    base_job_id,
    job_connections,
    load_node_map,
    matches,
    place,
    sample_pairs,
)
from producers.scheduler.slurm import job_from_squeue, parse_jobcomp_line, read_jobcomp
from producers.sim.fabrics import panel1
from sinks.remediate import REASON_PREFIX, GuardConfig, History, apply, drain_reason, plan

from conftest import REPO

FIX = REPO / "tests" / "producers" / "fixtures" / "slurm"
S = 1_000_000_000


@pytest.mark.parametrize(("text", "hosts"), [
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("H[1-2]", ["H1", "H2"]),
    ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
    ("a[1-2]b[0-1]", ["a1b0", "a1b1", "a2b0", "a2b1"]),
    ("login1,cn[3,5],login1", ["login1", "cn3", "cn5"]),
    ("", []),
    ("(null)", []),
])
def test_hostlists_expand_as_slurm_does(text, hosts):
    assert expand(text) == hosts


@pytest.mark.parametrize(("text", "why"), [
    ("node[1-", "'[' without ']'"), ("node1]", "']' without '['"), ("n[[1]]", "nested"),
    ("n[a-b]", "not N or N-M"), ("n[5-3]", "backwards"), ("n[1-999999]", "more than"),
])
def test_bad_hostlists_are_refused_with_the_reason(text, why):
    with pytest.raises(HostlistError, match=why.replace("[", r"\[").replace("]", r"\]")):
        expand(text)


@pytest.mark.parametrize(("given", "job"), [
    ("1234", "1234"), ("1234.0", "1234"), ("1234.batch", "1234"), ("1234_7", "1234_7"), ("1234+1", "1234+1"),
    ("1234_7.2", "1234_7"),
])
def test_step_ids_name_their_job(given, job):
    assert base_job_id(given) == job


def test_a_job_id_that_is_not_slurms_is_refused():
    with pytest.raises(JobIdError, match="1234_7"):
        base_job_id("job-lab")


def test_an_array_parent_matches_its_tasks_and_steps_match_their_job():
    task = Job("12_3", "12", "n", "u", "p", "RUNNING", ("H1",), 0, 5, None)
    assert matches(task, "12") and matches(task, "12_3") and matches(task, "12_3.0")
    assert not matches(task, "12_4") and not matches(task, "1")


def test_squeue_json_of_slurm_22_05_becomes_jobs():
    data = json.loads((FIX / "squeue-22.05.json").read_text())
    jobs = {j.job_id: j for j in map(job_from_squeue, data["jobs"])}
    assert jobs["1"].nodes == ("H1", "H2") and jobs["1"].state == "CANCELLED"
    assert (jobs["1"].start_ns, jobs["1"].end_ns) == (1796154266 * S, 1796154274 * S)
    assert jobs["2_0"].parent_id == "2" and jobs["2_0"].nodes == ("H3",)   # array task 0 is job 4
    assert jobs["2_1"].nodes == ("H4",)


def test_squeue_json_of_slurm_23_shapes_is_read_too():
    j = job_from_squeue({"job_id": 9, "name": "x", "user_name": "u", "partition": "p",
                         "job_state": ["RUNNING"], "nodes": "H[5-6]",
                         "submit_time": {"set": True, "infinite": False, "number": 100},
                         "start_time": {"set": True, "infinite": False, "number": 110},
                         "end_time": {"set": True, "infinite": False, "number": 999},
                         "array_job_id": {"set": True, "number": 0}, "array_task_id": {"set": False, "number": 0},
                         "het_job_id": {"set": True, "number": 9}, "het_job_offset": {"set": True, "number": 1}})
    assert (j.job_id, j.parent_id, j.nodes, j.start_ns, j.end_ns) == ("9+1", "9", ("H5", "H6"), 110 * S, None)


def test_a_pending_job_has_no_nodes_and_no_start():
    j = job_from_squeue({"job_id": 3, "job_state": "PENDING", "nodes": "", "start_time": 1796154999,
                         "end_time": 1796155999, "submit_time": 1796154000})
    assert (j.nodes, j.start_ns, j.end_ns) == ((), 0, None)
    assert not j.running_at(1796155000 * S)


def test_the_job_completion_log_keeps_finished_jobs(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    import time

    time.tzset()
    jobs = {j.job_id: j for j in read_jobcomp(FIX / "jobcomp.log")}
    assert sorted(jobs) == ["1", "2_0", "2_1"]
    one = jobs["1"]
    assert (one.name, one.user, one.state, one.nodes) == ("probe-test", "root", "CANCELLED", ("H1", "H2"))
    assert (one.start_ns, one.end_ns) == (1796154266 * S, 1796154274 * S)  # 19:44:26..19:44:34 UTC
    assert jobs["2_1"].nodes == ("H4",) and jobs["2_1"].parent_id == "2"
    assert read_jobcomp(FIX / "jobcomp.log", since_ns=1796154275 * S) and \
        {j.job_id for j in read_jobcomp(FIX / "jobcomp.log", since_ns=1796154275 * S)} == {"2_0", "2_1"}
    assert parse_jobcomp_line("   \n") is None


def test_placement_maps_nodes_to_hosts_and_rnics_and_reports_the_unknown(tmp_path):
    inv = panel1()
    job = Job("5", "5", "train", "root", "lab", "RUNNING", ("H1", "gpu03", "gpu99"), 0, 1, None)
    (tmp_path / "map.yaml").write_text("gpu03: H3\ngpu99: H99\n")
    p = place(job, inv, load_node_map(tmp_path / "map.yaml"))
    assert p.hosts == ("H1", "H3") and p.rnics == ("A1", "A2", "B1", "B2") and p.unmapped == ("gpu99",)
    assert place(job, inv, NodeMap()).unmapped == ("gpu03", "gpu99")
    (tmp_path / "bad.yaml").write_text("- H1\n")
    with pytest.raises(ValueError, match="expected a mapping"):
        load_node_map(tmp_path / "bad.yaml")


def test_all_pairs_when_they_fit_else_a_bounded_sample_covering_every_host():
    assert sample_pairs(["a", "b", "c"], 3) == [("a", "b"), ("a", "c"), ("b", "c")]
    hosts = [f"n{i:03d}" for i in range(100)]
    pairs = sample_pairs(hosts, 64, salt="42")
    assert len(pairs) == 64 and len({frozenset(p) for p in pairs}) == 64  # 4950 pairs in all
    assert sample_pairs(hosts, 64, salt="42") == pairs  # the same job gets the same pairs
    ring = sample_pairs(hosts[:10], 10, salt="x")       # 45 pairs > 10: one ring of 10 covers all 10 hosts
    assert {h for p in ring for h in p} == set(hosts[:10])
    even = sample_pairs(hosts[:4], 5, salt="y")           # 6 pairs > 5: ring (4) + 1 of the 2 diagonals
    assert len(even) == 5 and len({frozenset(p) for p in even}) == 5
    assert sample_pairs(["a"], 64) == []


def test_job_connections_are_rail_aligned_both_ways():
    inv = panel1()
    job = Job("5", "5", "t", "u", "p", "RUNNING", ("H1", "H3"), 0, 1, None)
    conns = job_connections(place(job, inv), inv)
    assert sorted((c["src_rnic"], c["dst_rnic"]) for c in conns) == [
        ("A1", "B1"), ("A2", "B2"), ("B1", "A1"), ("B2", "A2")]
    assert {c["job_id"] for c in conns} == {"5"}


# ---- node actions -------------------------------------------------------------------------------

class Node:
    def __init__(self, name, drain=False, reason="", partitions=("lab",)):
        self.name, self.drain, self.reason, self.partitions = name, drain, reason, partitions


HOST_NODE = {f"H{i}": f"H{i}" for i in range(1, 7)}
NOW = 2_000_000 * S


def verdict(kind, location, impact="P1", vid=None, age_s=10):
    end = NOW - age_s * S
    return {"verdict_id": vid or f"v-{kind}-{location}", "window_start_ns": end - 20 * S, "window_end_ns": end,
            "kind": kind, "location": location, "impact": impact}


def test_p0_goes_first_when_the_guard_has_room_for_one():
    vs = [verdict("rnic", "A1", "P1"), verdict("rnic", "B1", "P0")]
    acts = plan(vs, [Node(f"H{i}") for i in range(1, 7)], panel1(), HOST_NODE, History(), NOW, GuardConfig(max_nodes=1))
    assert [(a.action, a.node) for a in acts] == [("drain", "H3"), ("refused", "H1")]


def test_the_guard_holds_at_half_the_partition():
    # RNIC A1 is H1's, B1 H3's, C1 H5's, A3 H2's: four nodes of six; half is three
    vs = [verdict("rnic", r) for r in ("A1", "B1", "C1", "A3")]
    acts = plan(vs, [Node(f"H{i}") for i in range(1, 7)], panel1(), HOST_NODE, History(), NOW)
    assert [(a.action, a.node) for a in acts] == [("drain", "H1"), ("drain", "H2"), ("drain", "H3"),
                                                  ("refused", "H5")]
    assert "would hold 4 of partition lab's 6 nodes drained (max_fraction 0.5)" in acts[-1].why
    assert acts[0].reason == "fabricscope: rnic A1 verdict v-rnic-A1"


def test_nodes_already_drained_by_fabricscope_count_against_the_guard_and_an_operators_do_not():
    nodes = [Node("H1", True, drain_reason("rnic", "A1", "old")), Node("H2", True, drain_reason("rnic", "A3", "o2")),
             Node("H6", True, "operator: bad DIMM")] + [Node(f"H{i}") for i in (3, 4, 5)]
    vs = [verdict("rnic", "A1"), verdict("rnic", "A3"), verdict("host_down", "H3"), verdict("busy_host", "H4"),
          verdict("rnic", "C3")]                                         # C3 is on H6, drained by an operator
    acts = plan(vs, nodes, panel1(), HOST_NODE, History(), NOW)
    assert [(a.action, a.node) for a in acts] == [("drain", "H3"), ("refused", "H4")]


def test_the_hourly_budget_and_the_node_cap_refuse_too():
    nodes = [Node(f"H{i}") for i in range(1, 7)]
    vs = [verdict("rnic", "A1"), verdict("rnic", "B1")]
    hist = History(drains_ns=[NOW - 10 * 60 * S] * 9 + [NOW - 2 * 3600 * S])  # 9 in the last hour, 1 older
    acts = plan(vs, nodes, panel1(), HOST_NODE, hist, NOW)
    assert [(a.action, a.node) for a in acts] == [("drain", "H1"), ("refused", "H3")]
    assert "10 drains in the last hour already (max_per_hour 10)" in acts[1].why
    acts = plan(vs, nodes, panel1(), HOST_NODE, History(), NOW, GuardConfig(max_nodes=1))
    assert [a.action for a in acts] == ["drain", "refused"] and "max_nodes 1" in acts[1].why


def test_switch_p2_and_unknown_hosts_are_never_node_actions():
    vs = [verdict("switch", "A->S3"), verdict("rnic", "A1", impact="P2"), verdict("rnic", "ZZ9"),
          verdict("stale_qpn", "A1")]
    acts = plan(vs, [Node(f"H{i}") for i in range(1, 7)], panel1(), HOST_NODE, History(), NOW)
    why = {a.location: a.why for a in acts}
    assert [a.action for a in acts] == ["skip", "skip"] and set(why) == {"A->S3", "ZZ9"}
    assert "never a node action" in why["A->S3"] and "node map" in why["ZZ9"]


def test_resume_only_our_nodes_when_clear_or_rejected():
    nodes = [Node("H1", True, drain_reason("rnic", "A1", "va")), Node("H2", True, drain_reason("rnic", "A3", "vb")),
             Node("H3", True, drain_reason("rnic", "B1", "vc")), Node("H6", True, "operator: bad DIMM"),
             Node("H4"), Node("H5")]
    vs = [verdict("rnic", "A3", vid="vb"), verdict("rnic", "B1", vid="vc"),
          verdict("rnic", "A1", vid="va", age_s=31 * 60)]               # H1's problem: clear for 31 min
    acts = plan(vs, nodes, panel1(), HOST_NODE, History(rejected={"vc"}), NOW)
    assert [(a.action, a.node) for a in acts] == [("resume", "H1"), ("resume", "H3")]
    assert "operator rejected verdict vc" in acts[1].why and "for 30 min" in acts[0].why
    assert all(REASON_PREFIX in a.reason for a in acts)


def test_dry_run_calls_nothing_and_apply_records_failures():
    calls = []

    class Sched:
        def drain(self, node, reason):
            calls.append(("drain", node))
            if node == "H3":
                raise RuntimeError("slurmctld said no")

        def resume(self, node):
            calls.append(("resume", node))

    vs = [verdict("rnic", "A1"), verdict("rnic", "B1")]
    nodes = [Node(f"H{i}") for i in range(1, 7)]
    acts = apply(plan(vs, nodes, panel1(), HOST_NODE, History(), NOW), Sched(), dry_run=True)
    assert calls == [] and [a.outcome for a in acts] == ["dry-run", "dry-run"]
    acts = apply(plan(vs, nodes, panel1(), HOST_NODE, History(), NOW), Sched(), dry_run=False)
    assert calls == [("drain", "H1"), ("drain", "H3")]
    assert [a.outcome for a in acts] == ["done", "failed: slurmctld said no"]


def test_a_guard_fraction_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="between 0 and 1"):
        GuardConfig(max_fraction=1.5)


def test_the_jobs_commands_name_what_is_wrong(tmp_path):
    from typer.testing import CliRunner

    from fabricscope.cli import app, register_all

    register_all()
    run = CliRunner().invoke
    r = run(app, ["jobs", "list", "--from", "kubernetes"])
    assert r.exit_code == 2 and "only 'slurm' is built" in r.output
    r = run(app, ["jobs", "list", "--inventory", str(tmp_path / "none.yaml")])
    assert r.exit_code == 2 and "none.yaml: no such file" in r.output
    r = run(app, ["jobs", "list", "--slurm-conf", str(tmp_path / "slurm.conf")])
    assert r.exit_code == 2 and "slurm.conf: no such file" in r.output
    r = run(app, ["jobs", "remediate", "--apply"])
    assert r.exit_code == 2 and "--production" in r.output
    panel1().dump(tmp_path / "inv.yaml")
    r = run(app, ["jobs", "remediate", "--max-fraction", "2", "--inventory", str(tmp_path / "inv.yaml")])
    assert r.exit_code == 2 and "between 0 and 1" in r.output
