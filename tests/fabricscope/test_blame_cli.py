"""``fabricscope blame`` over verdict and coverage files."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from analyzer_fabric import Faults, Job, S, last_uploads, panel1, window
from typer.testing import CliRunner

from fabricscope.cli import app, register_all
from fabricscope.cmd_blame import parse_time
from streams.pingmesh.analyzer import AnalyzerState, analyze_window
from streams.pingmesh.partial import summarize

START = 1_000 * 20 * S
JOB = Job("J", [("A2", "B2", "S3"), ("A1", "B1", "S1")])


def _files(tmp_path, faults):
    fab = panel1()
    probes, paths, reg = window(fab, faults, start_ns=START, jobs=[JOB])
    res = analyze_window(summarize(START, probes, paths), registry=reg,
                         host_last_upload=last_uploads(fab, faults, START), state=AnalyzerState())
    out = []
    for name, t in (("v.arrow", res.verdicts), ("c.arrow", res.coverage)):
        with pa.OSFile(str(tmp_path / name), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
            w.write_table(t)
        out.append(str(tmp_path / name))
    return out


@pytest.fixture(scope="module")
def cli():
    register_all()
    return CliRunner()


def test_parse_time_takes_ns_and_iso():
    assert parse_time("1764451800000000000") == 1764451800000000000
    assert parse_time("2026-11-29T21:30:00Z") == 1_795_987_800 * S
    assert parse_time("2026-11-29T21:30:00.5+00:00") == 1_795_987_800 * S + S // 2


def test_blame_names_the_switch_problem_on_the_jobs_path(cli, tmp_path):
    v, c = _files(tmp_path, Faults(dead_links={"A->S3"}, dead_rnics={"C3"}))
    r = cli.invoke(app, ["blame", "--job", "J", "--at", str(START + 5 * S), "--verdicts", v, "--coverage", c,
                         "--json"])
    assert r.exit_code == 0, r.output
    ans = json.loads(r.output)
    assert ans["answer"] == "network"
    assert [(p["kind"], p["location"], p["impact"]) for p in ans["problems"]] == [("switch", "A->S3", "P1")]
    assert ans["coverage"]["connections_probed"] == 2


def test_blame_innocent_and_unknown(cli, tmp_path):
    v, c = _files(tmp_path, Faults(dead_rnics={"C3"}))
    r = cli.invoke(app, ["blame", "--job", "J", "--at", str(START + 5 * S), "--verdicts", v, "--coverage", c])
    assert r.exit_code == 0, r.output
    assert "INNOCENT" in r.output and "2/2 connections probed" in r.output
    r = cli.invoke(app, ["blame", "--job", "J", "--at", str(START + 5 * S), "--verdicts", v])
    assert r.exit_code == 3
    assert "UNKNOWN" in r.output


def test_blame_exit_code_is_the_same_with_and_without_json(cli, tmp_path):
    v, c = _files(tmp_path, Faults(dead_links={"A->S3"}))
    (tmp_path / "quiet").mkdir()
    v_quiet, _ = _files(tmp_path / "quiet", Faults(dead_rnics={"C3"}))  # nothing on the job's paths
    at = str(START + 5 * S)
    for files, code, answer in (([v, "--coverage", c], 0, "network"), ([v_quiet], 3, "unknown")):
        plain = cli.invoke(app, ["blame", "--job", "J", "--at", at, "--verdicts", *files])
        as_json = cli.invoke(app, ["blame", "--job", "J", "--at", at, "--verdicts", *files, "--json"])
        assert plain.exit_code == as_json.exit_code == code, (plain.output, as_json.output)
        assert json.loads(as_json.output)["answer"] == answer


def test_unknown_names_the_jobs_that_have_coverage_and_an_open_window(cli, tmp_path):
    import time

    v, c = _files(tmp_path, Faults(dead_rnics={"C3"}))
    r = cli.invoke(app, ["blame", "--job", "j", "--at", str(START + 5 * S), "--verdicts", v, "--coverage", c])
    assert r.exit_code == 3, r.output
    assert "no coverage row names job 'j' in this window; jobs with coverage then: J" in r.output
    r = cli.invoke(app, ["blame", "--job", "J", "--at", str(time.time_ns() + 60 * S), "--verdicts", v])
    assert r.exit_code == 3 and "this window has not closed yet" in r.output, r.output
