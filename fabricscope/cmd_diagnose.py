"""``fabricscope diagnose FILE...``: Hostping parsers and rules over captured outputs.

Only wiring and printing here; the parsers and rules are in :mod:`producers.hostping`.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.padding import Padding

from producers.hostping.collectors import COLLECTORS
from producers.hostping.correlate import correlate
from producers.hostping.diagnose import collect_paths

_STYLE = {"info": "dim", "warning": "yellow", "error": "red", "critical": "bold red"}


def diagnose(
    files: list[Path] = typer.Argument(
        ...,
        help="Captured outputs or a sysfs root directory; read by: "
        + ", ".join(c.NAME for c in COLLECTORS)
        + " (docs/diagnose.md). Files given together are correlated.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print findings as a JSON list."),
) -> None:
    """Diagnose intra-host and RDMA faults from captured command outputs and logs.
    Exit like a linter: 0 when nothing above info was found, 1 with findings above info, 2 on a usage error
    (a file that does not exist or cannot be read); the same with --json."""
    try:
        arts = collect_paths(files)
    except (FileNotFoundError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    found = correlate(arts)
    read = {a.source for a in arts}
    for p in files:  # a wrong file must not pass for a clean one
        if str(p) not in read:
            typer.echo(f"warning: {p}: nothing in it is an input these parsers read "
                       "(see `fabricscope diagnose --help`); it was not diagnosed", err=True)
    problems = sum(f.is_problem for f in found)
    code = 1 if problems else 0
    if as_json:
        typer.echo(json.dumps([f.to_dict() for f in found], indent=2, sort_keys=True))
        raise typer.Exit(code)
    console = Console()
    if not found:
        console.print("No findings: nothing these parsers recognise is wrong.")
        return
    for f in found:
        style = _STYLE[f.severity]
        console.print(
            f"[{style}]{f.severity.upper():<8}[/] [bold]{f.kind}[/] at [cyan]{f.location}[/]  [dim]{f.source}[/]"
        )
        console.print(Padding(f.explanation, (0, 0, 1, 9)))
    console.print(f"{problems} problem(s), {len(found) - problems} informational.")
    raise typer.Exit(code)


commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""
commands.command("diagnose")(diagnose)
