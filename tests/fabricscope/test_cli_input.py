"""Wrong input is refused before anything starts: one line with the valid choices, exit 2, no traceback.

Every command here runs as a user would run it (``python -m fabricscope``), pointed at a broker
address where nothing listens and an empty FABRICSCOPE_VAR: a command that started anything
would leave files there or take seconds to time out.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fabricscope.choices import ALL_SCENARIOS, LAB_SCENARIOS, UP_SOURCES

from conftest import REPO


def fs(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FABRICSCOPE_VAR": str(tmp_path / "var"),
           "KAFKA_BOOTSTRAP": "127.0.0.1:1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "fabricscope", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def _one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def _nothing_started(tmp_path: Path) -> None:
    assert not (tmp_path / "var").exists() or not any((tmp_path / "var").iterdir())


def test_misspelt_source_lists_the_same_choices_as_help(tmp_path: Path) -> None:
    line = _one_line_error(fs(tmp_path, "up", "--source", "simm"))
    assert line.startswith("fabricscope up: Invalid value for '--source': 'simm' is not one of ")
    assert re.findall(r"'(\w+)'", line.split("is not one of", 1)[1]) == list(UP_SOURCES)
    help_text = fs(tmp_path, "up", "--help").stdout
    assert "<" + "|".join(UP_SOURCES) + ">" in help_text.replace("\n", "").replace(" ", "").replace("│", "")
    _nothing_started(tmp_path)


@pytest.mark.parametrize("args", [["demo", "--scenario", "switch-link-dwn"],
                                  ["source", "sim", "--scenario", "switch-link-dwn"]])
def test_misspelt_scenario_lists_every_scenario(tmp_path: Path, args: list[str]) -> None:
    line = _one_line_error(fs(tmp_path, *args))
    assert "'switch-link-dwn' is not one of" in line
    assert re.findall(r"'([\w-]+)'", line.split("is not one of", 1)[1]) == list(ALL_SCENARIOS)
    _nothing_started(tmp_path)


def test_a_sim_only_scenario_on_the_lab_names_the_lab_scenarios(tmp_path: Path) -> None:
    line = _one_line_error(fs(tmp_path, "demo", "--source", "lab", "--scenario", "flapping-link"))
    assert "'flapping-link' runs on the sim only; on the lab choose one of " + ", ".join(LAB_SCENARIOS) in line
    _nothing_started(tmp_path)


@pytest.mark.parametrize(("args", "expect"), [
    (["up", "--duration", "-5"], "a duration cannot be negative"),
    (["up", "--workers", "-1"], "'--workers'"),
    (["demo", "--windows", "0"], "'--windows'"),
    (["source", "synthetic", "--hosts", "0"], "'--hosts'"),
    (["source", "sim", "--inventory", "nope.yaml"], "'nope.yaml' is neither panel1 nor an inventory file"),
    (["up", "--sorce", "sim"], "No such option: --sorce"),
])
def test_bad_values_are_refused_before_anything_starts(tmp_path: Path, args: list[str], expect: str) -> None:
    assert expect in _one_line_error(fs(tmp_path, *args))
    _nothing_started(tmp_path)


def test_a_misspelt_saved_query_suggests_the_name_and_is_never_run_as_sql(tmp_path: Path) -> None:
    line = _one_line_error(fs(tmp_path, "query", "top_suspect"))
    assert line == ("fabricscope query: no saved query named 'top_suspect'; did you mean top_suspects? "
                    "`fabricscope queries` lists them (SQL has spaces: SELECT ...)")
    _nothing_started(tmp_path)  # no store was opened: the word never reached the engine
    line = _one_line_error(fs(tmp_path, "query", "zzzz"))
    assert "no saved query named 'zzzz'; `fabricscope queries`" in line


def test_since_units_are_checked(tmp_path: Path) -> None:
    line = _one_line_error(fs(tmp_path, "query", "top_suspects", "--since", "5x"))
    assert "--since '5x': give a duration (1h, 30d, '10 min'), a relative time (-1h" in line
    _nothing_started(tmp_path)


def test_sql_with_spaces_still_runs(tmp_path: Path) -> None:
    r = fs(tmp_path, "query", "SELECT 1 + 1 AS two", "--json")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x) for x in r.stdout.splitlines()] == [{"two": 2}]


def test_a_misspelt_lab_fault_lists_the_faults(tmp_path: Path) -> None:
    from fabricscope.choices import LAB_FAULT_ACTIONS

    line = _one_line_error(fs(tmp_path, "lab", "fault", "link-dwn"))
    assert re.findall(r"'([\w-]+)'", line.split("is not one of", 1)[1]) == list(LAB_FAULT_ACTIONS)
