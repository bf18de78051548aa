"""Every command, every bad argument: one line naming what is wrong, exit 2 (1 for a path that cannot be
written), never a traceback. The walk covers every command `fabricscope --help` lists, so a new command or
option is checked by itself; the named cases are the ones a new user hit."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest
import typer

from fabricscope.cli import app, main, register_all


def _commands() -> list[tuple[list[str], object]]:
    register_all()
    out: list[tuple[list[str], object]] = []

    def walk(cmd: object, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                walk(sub, [*path, name])
        else:
            out.append((path, cmd))

    walk(typer.main.get_command(app), [])
    return out


COMMANDS = _commands()


def _value_options() -> list[list[str]]:
    """``[*command, --option]`` for every option that takes a value, with the value missing."""
    cases = []
    for path, cmd in COMMANDS:
        for p in cmd.params:
            if p.param_type_name == "option" and not p.is_flag and not p.count:
                cases.append([*path, max(p.opts, key=len)])
    return cases


def run(monkeypatch, capsys, env: dict[str, str] | None = None, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["fabricscope", *args])
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as e:
        main()
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICSCOPE_VAR", str(tmp_path / "var"))
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "127.0.0.1:1")  # nothing listens: a command that started would fail
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)


def _one_line(code: int, out: str, err: str, want: int = 2) -> str:
    assert code == want, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_the_walk_sees_every_command():
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"query", "blame", "lab fault", "lab status", "report tail-rtt", "verdicts", "up"} <= names
    assert len(names) >= 40


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=" ".join)
def test_a_wrong_option_name(monkeypatch, capsys, path):
    line = _one_line(*run(monkeypatch, capsys, None, *path, "--no-such-option"))
    # click adds "(Possible options: --x)" when an option's name is close (`jobs remediate`: --production)
    assert re.fullmatch(rf"fabricscope {re.escape(' '.join(path))}: No such option: --no-such-option "
                        rf"(\(Possible options: [^)]+\) )?\(see `fabricscope {re.escape(' '.join(path))} --help`\)",
                        line), line


@pytest.mark.parametrize("args", _value_options(), ids=" ".join)
def test_an_option_without_its_value(monkeypatch, capsys, args):
    line = _one_line(*run(monkeypatch, capsys, None, *args))
    assert f"Option '{args[-1]}' requires an argument" in line


@pytest.mark.parametrize("path", [p for p, c in COMMANDS if any(q.required for q in c.params)], ids=" ".join)
def test_a_missing_required_argument(monkeypatch, capsys, path):
    line = _one_line(*run(monkeypatch, capsys, None, *path))
    assert line.startswith(f"fabricscope {' '.join(path)}: Missing ")


@pytest.fixture
def lab_dir(tmp_path) -> Path:
    """A lab state file as `lab up` writes it (Panel 1): enough for the fault command to check names."""
    from infra.lab.layout import LabSpec

    d = tmp_path / "lab"
    d.mkdir()
    (d / "state.json").write_text(json.dumps({"ready": True, "spec": dataclasses.asdict(LabSpec(prefix="fsx-"))}))
    return d


@pytest.mark.parametrize(("args", "says"), [
    (["lab", "fault", "nic-down", "ZZ9"], "no RNIC 'ZZ9' in the lab; RNICs are A1, A2"),
    (["lab", "fault", "host-down", "H9"], "no host 'H9' in the lab; hosts are H1, H2, H3, H4, H5, H6"),
    (["lab", "fault", "link-down", "A"], "link-down takes a ToR and a spine (e.g. A S3); got A"),
    (["lab", "fault", "link-loss", "A", "S9"], "A S9 is not a ToR-spine link; ToRs are A, B, C, spines S1"),
    (["lab", "fault", "host-down", "H1", "H2"], "host-down takes one name; got H1 H2"),
    (["lab", "fault", "clear", "f3"], "no active fault 'f3'; active faults: none"),
    (["lab", "fault", "link-loss", "A", "S1", "--loss", "5"], "'--loss': Input should be less than or equal to 1"),
])
def test_lab_fault_names_are_checked(monkeypatch, capsys, lab_dir, args, says):
    line = _one_line(*run(monkeypatch, capsys, None, *args, "--dir", str(lab_dir)))
    assert says in line


@pytest.mark.parametrize(("args", "says", "code"), [
    (["query", "rnic_history", "-p", "rnic"], "'rnic': write NAME=VALUE (e.g. -p rnic=A3)", 2),
    (["query", "top_suspects", "--since", "5x"], "--since '5x': give a duration", 2),
    (["query", "SELECT 1", "--json", "--csv"], "choose one of --json and --csv", 2),
    (["query", "SELECT 1", "--tz", "mars"], "--tz 'mars': choose utc or local", 2),
    (["query", "SELECT 1", "--limit", "0"], "'--limit'", 2),
    (["report", "tail-rtt", "--since", "1h", "--out", "/proc/nope"], "cannot write into '/proc/nope'", 2),
    (["report", "tail-rtt", "--since", "tomorrow"], "--since 'tomorrow'", 2),
    (["blame", "--job", "J", "--at", "yesterday-ish"], "'yesterday-ish' is not a time; give one of now, -5m", 2),
    (["blame", "--job", "J", "--at", "now", "--verdicts", "/nope.arrow"], "'/nope.arrow' does not exist", 2),
    (["history", "inventory", "/nope.yaml"], "'/nope.yaml' does not exist", 2),
    (["inventory", "check", "/nope.yaml"], "'/nope.yaml' does not exist", 2),
    (["inventory", "write", "/proc/nope/x.yaml"], "fabricscope inventory write: /proc/nope/x.yaml: No such file", 1),
    (["verdicts", "--since", "5 parsecs"], "--since '5 parsecs'", 2),
])
def test_named_mistakes(monkeypatch, capsys, args, says, code):
    assert says in _one_line(*run(monkeypatch, capsys, None, *args), want=code)
