"""``fabricscope diagnose FILE...``: Hostping parsers and rules over captured outputs.

Only wiring and printing here; the collectors and rules are in the :mod:`diagnose` room.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.padding import Padding

from diagnose.correlate import correlate
from diagnose.registry import COLLECTORS
from diagnose.run import read_paths

_STYLE = {"info": "dim", "warning": "yellow", "error": "red", "critical": "bold red"}

#: Exit codes, like a linter's; 3 is left to ``blame`` ("unknown").
EXIT_CLEAN, EXIT_PROBLEMS, EXIT_USAGE, EXIT_UNREAD = 0, 1, 2, 4


def exit_code(problems: int, unread: int) -> int:
    """1 with problems above info; else 4 when part of the input was not read; else 0."""
    return EXIT_PROBLEMS if problems else EXIT_UNREAD if unread else EXIT_CLEAN


def diagnose(
    files: list[Path] = typer.Argument(
        ...,
        help="Captured outputs, gzip logs, a sysfs root or a directory of logs; read by: "
        + ", ".join(c.NAME for c in COLLECTORS)
        + " (docs/diagnose.md). Files given together are correlated.",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON document: findings, unread parts, inputs, exit code."
    ),
) -> None:
    """Diagnose intra-host and RDMA faults from captured command outputs and logs.
    Exit like a linter: 0 when nothing above info was found and everything was read, 1 with findings
    above info, 2 on a usage error (a path that does not exist), 4 when no finding is above info but
    part of the input was not read (named on stderr and under "unread" in --json)."""
    try:
        reading = read_paths(files)
    except (FileNotFoundError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    found = correlate(reading.artifacts)
    read = {a.source for a in reading.artifacts}
    for u in reading.unread:  # a wrong file must not pass for a clean one
        if u.source not in read:
            typer.echo(f"warning: {u.source}: nothing in it is an input these parsers read "
                       "(see `fabricscope diagnose --help`); it was not diagnosed", err=True)
    problems = sum(f.is_problem for f in found)
    code = exit_code(problems, len(reading.unread))
    if as_json:
        doc = {
            "findings": [f.to_dict() for f in found],
            "unread": [u.to_dict() for u in reading.unread],
            "inputs": [i.to_dict() for i in reading.inputs],
            "problems": problems,
            "exit_code": code,
        }
        typer.echo(json.dumps(doc, indent=2, sort_keys=True))
        raise typer.Exit(code)
    console = Console()
    if not found and not reading.unread:
        console.print("No findings: nothing these parsers recognise is wrong.")
        return
    for f in found:
        style = _STYLE[f.severity]
        console.print(
            f"[{style}]{f.severity.upper():<8}[/] [bold]{f.kind}[/] at [cyan]{f.location}[/]  [dim]{f.source}[/]"
        )
        console.print(Padding(f.explanation, (0, 0, 1, 9)))
    for u in reading.unread:
        console.print(f"[yellow]UNREAD  [/] {u.describe()}", highlight=False, soft_wrap=True)
    console.print(f"{problems} problem(s), {len(found) - problems} informational"
                  + (f", {len(reading.unread)} part(s) not read." if reading.unread else "."))
    raise typer.Exit(code)


commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""
commands.command("diagnose")(diagnose)
