"""`fabricscope demo`: run one fault scenario through the whole pipeline and print the verdicts."""

from __future__ import annotations

import json

import typer
from rich.console import Console

from fabricscope.settings import load

commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""


@commands.command("demo")
def demo(
    source: str = typer.Option("sim", help="lab (netns fabric, needs root) | sim"),
    scenario: str = typer.Option("switch-link-down", help="healthy | switch-link-down | switch-link-lossy | "
                                 "partial-5tuple | rnic-down | host-down | host-restart | busy-host"),
    seed: int = typer.Option(1, help="draws the faulted link, RNIC or host"),
    windows: int = typer.Option(1, help="complete 20 s windows to wait for after the fault"),
    workers: int = typer.Option(1, help="Faust workers in the consumer group"),
    as_json: bool = typer.Option(False, "--json", help="verdicts as JSON lines on stdout"),
) -> None:
    """Inject a fault, run Kafka + Faust + ClickHouse over it, print the verdicts of each window."""
    from fabricscope.demo import run_demo

    err = Console(stderr=True)
    s = load()
    if s.kafka_bootstrap.startswith("127.0.0.1"):
        from fabricscope.cmd_pipeline import kafka_script

        if kafka_script("start", s) != 0:
            raise typer.Exit(1)

    def show(v: dict) -> None:
        if as_json:
            print(json.dumps(v, default=str), flush=True)
        else:
            Console().print(f"window {v['window_start_ns']}: [bold]{v['kind']}[/bold] at {v['location']} "
                            f"(impact {v['impact']}, confidence {v['confidence']:.2f})")

    with err.status(f"{scenario} on {source}: waiting for {windows} complete window(s)…"):
        r = run_demo(s, source, scenario, seed, windows, workers, on_verdict=show)
    err.print(f"injected: {json.dumps(r.truth)}")
    err.print(f"windows closed after the fault: {len(r.complete_windows())}, verdicts: {len(r.verdicts)}")
