"""``fabricscope diagnose`` exits like a linter: 0 nothing above info, 1 findings above info, 2 usage error."""

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
    assert [(d["kind"], d["severity"]) for d in json.loads(as_json.output)] == [("gpu_pcie_link_failure", "critical")]


def test_only_info_or_nothing_exits_0(run, tmp_path):
    clean = tmp_path / "dmesg.txt"
    clean.write_text("[    0.000000] Linux version 6.1.0 (debian-kernel@lists.debian.org)\n")
    for args in ([str(clean)], [str(clean), "--json"]):
        r = run(*args)
        assert r.exit_code == 0, r.output


def test_a_missing_file_is_a_usage_error(run):
    assert run("/nonexistent/lspci.txt").exit_code == 2

