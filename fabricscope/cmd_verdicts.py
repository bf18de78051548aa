"""Verdicts: ``fabricscope verdicts [--follow]``, the verdicts of a pipeline as problems that appear and
clear, and ``fabricscope verdict confirm|reject``, an operator's feedback on one.

Without ``--follow`` it prints the problems of the last ``--since`` and exits; with it, it keeps printing
each new problem and each one that clears until Ctrl-C, for a pipeline running here or elsewhere (through
the store writer's endpoint, or ``CLICKHOUSE_URL``). The feed is :mod:`fabricscope.live_feed`, the one
``fabricscope up`` shows.
"""

from __future__ import annotations

import signal
import threading

import typer
from rich.console import Console

from fabricscope.settings import load
from fabricscope.stopping import stop_requested
from fabricscope.times import NS, typer_since, tz_option

console = Console(stderr=True)
commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""


@commands.command("verdicts")
def verdicts(
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new and cleared problems until Ctrl-C"),
    since: str = typer.Option("10m", help="start from verdicts emitted this far back: 10m, 1h, -30m, or a time"),
    origin: str = typer.Option(None, help="production, lab, sim, demo or all (default: the running pipeline's)"),
    interval: float = typer.Option(2.0, min=0.2, max=60.0, help="--follow: seconds between polls"),
    clear_windows: int = typer.Option(3, min=1, help="closed windows without a verdict before a problem clears"),
    tz: str = tz_option(),
) -> None:
    """Print each problem the pipeline found (NEW P1 switch A->S3 (job job-lab)) and when it clears.
    Exit 0; 1 when the store cannot be read."""
    import time

    from fabricscope.live_feed import VerdictFeed, format_event
    from fabricscope.store_access import run_query, selected_origin
    from sinks.origin import OriginError

    seconds = typer_since(since, tz)
    s = load()
    try:
        chosen = selected_origin(s, origin)
    except OriginError as e:
        raise typer.BadParameter(str(e), param_hint="'--origin'") from None
    feed = VerdictFeed(time.time_ns() - seconds * NS, chosen, clear_windows)
    console.print(f"verdicts of origin {chosen or 'all'} emitted since {since} ago"
                  + ("; Ctrl-C stops" if follow else ""), style="dim", highlight=False, soft_wrap=True)
    stopping = stop_requested(signal.SIGTERM, signal.SIGINT) if follow else (lambda: True)
    wake = threading.Event()
    while True:
        try:
            events = feed.poll(lambda sql: run_query(s, sql))
        except Exception as err:
            console.print(f"[red]cannot read the verdicts:[/red] {err}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        for ev in events:
            typer.echo(format_event(ev, tz))
        if stopping():
            break
        wake.wait(interval)  # a timed poll of the store, not a synchronisation
    console.print(feed.counts(), style="dim", highlight=False)


def _feedback(verdict_id: str, decision: str, note: str, operator: str) -> None:
    from fabricscope.store_access import record_feedback

    try:
        record_feedback(load(), verdict_id, decision, note, operator)
    except Exception as err:
        console.print(f"[red]feedback not recorded:[/red] {err}")
        raise typer.Exit(1) from None
    console.print(f"verdict {verdict_id}: {decision}ed")


verdict_app = typer.Typer(
    name="verdict", help="Operator feedback on verdicts; `fabricscope query precision` sums it up."
)


@verdict_app.command("confirm")
def confirm(verdict_id: str, note: str = typer.Option("", help="what you found"),
            operator: str = typer.Option("", help="who decided")) -> None:
    """Record that verdict ID was right: the fault was real and where it said."""
    _feedback(verdict_id, "confirm", note, operator)


@verdict_app.command("reject")
def reject(verdict_id: str, note: str = typer.Option("", help="what you found"),
           operator: str = typer.Option("", help="who decided")) -> None:
    """Record that verdict ID was wrong."""
    _feedback(verdict_id, "reject", note, operator)
