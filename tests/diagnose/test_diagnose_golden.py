"""The whole ``fabricscope diagnose`` output over every field case, text and ``--json``, kept as golden files.

Each case is run alone, from the cases folder, under its bare file name, so the output names no
machine path. A change that alters any byte must update the golden files on purpose:
``FABRICSCOPE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/diagnose/test_diagnose_golden.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fabricscope import cmd_diagnose

from conftest import REPO

FIXTURES = REPO / "tests" / "diagnose" / "fixtures"
CASES = FIXTURES / "cases"
GOLDEN = FIXTURES / "golden"
CASE_FILES = sorted(p.name for p in CASES.glob("case_*.txt"))


def _app() -> typer.Typer:
    app = typer.Typer()
    app.add_typer(cmd_diagnose.commands)
    app.command("noop")(lambda: None)  # keep a multi-command app so 'diagnose' is a subcommand
    return app


def run_diagnose(args: list[str], cwd: Path) -> tuple[int, str]:
    """Exit code and stdout of ``fabricscope diagnose ARGS`` run in ``cwd`` (a fixed 100-column console)."""
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(_app(), ["diagnose", *args], env={"COLUMNS": "100", "NO_COLOR": "1"})
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout


def test_every_field_case_is_a_fixture():
    assert len(CASE_FILES) == 16


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("name", CASE_FILES)
def test_golden_output(name: str, as_json: bool):
    code, out = run_diagnose([name, *(["--json"] if as_json else [])], CASES)
    golden = GOLDEN / (Path(name).stem + (".json" if as_json else ".txt"))
    got = f"exit {code}\n{out}"
    if os.environ.get("FABRICSCOPE_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(got)
    assert got == golden.read_text(), f"{golden.name} differs; update on purpose (see module docstring)"
    if as_json:
        json.loads(out)  # one well-formed document
