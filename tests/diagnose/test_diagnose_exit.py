"""``fabricscope diagnose`` exits like a linter: 0 nothing above info and all read, 1 findings above info,
2 usage error, 4 part of the input not read (and nothing above info)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from fabricscope import cmd_diagnose


@pytest.fixture(scope="module")
def run():
    app = typer.Typer()
    app.add_typer(cmd_diagnose.commands)
    app.command("noop")(lambda: None)
    return lambda *args: CliRunner().invoke(app, ["diagnose", *args])


def test_findings_above_info_exit_1_with_and_without_json(run, tmp_path):
    dmesg = tmp_path / "dmesg.txt"
    dmesg.write_text("[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n")
    plain, as_json = run(str(dmesg)), run(str(dmesg), "--json")
    assert plain.exit_code == as_json.exit_code == 1, (plain.output, as_json.output)
    doc = json.loads(as_json.stdout)
    assert [(d["kind"], d["severity"]) for d in doc["findings"]] == [("gpu_pcie_link_failure", "critical")]


def test_only_info_or_nothing_exits_0(run, tmp_path):
    clean = tmp_path / "rdma_link.txt"  # read, and healthy
    clean.write_text("link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev p1p1\n")
    for args in ([str(clean)], [str(clean), "--json"]):
        r = run(*args)
        assert r.exit_code == 0, r.output


def test_a_missing_file_is_a_usage_error(run):
    assert run("/nonexistent/lspci.txt").exit_code == 2


def test_a_file_no_parser_reads_is_named_not_passed_off_as_clean(run, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("the job was slow on Tuesday\n")
    plain, as_json = run(str(notes)), run(str(notes), "--json")
    assert plain.exit_code == as_json.exit_code == 4  # not 0: a script must not read "healthy"
    assert f"warning: {notes}: nothing in it is an input these parsers read" in plain.stderr
    assert f"UNREAD   {notes}:1-1 (1 line): no collector recognised this" in plain.stdout
    doc = json.loads(as_json.stdout)  # stdout stays JSON only
    assert doc["findings"] == [] and doc["exit_code"] == 4 and "warning" in as_json.stderr
    assert doc["unread"] == [{"source": str(notes), "first_line": 1, "last_line": 1, "lines": 1,
                              "looked_like": "", "reason": "no collector recognised this"}]
