"""``fabricscope sim bench|run``: the seeded Clos-fabric simulator, without Kafka."""

from __future__ import annotations

import json
from pathlib import Path

import typer

sim_app = typer.Typer(
    name="sim", help="The seeded Clos-fabric simulator (the sim probe backend).", no_args_is_help=True
)


@sim_app.command("bench")
def bench(
    rnics: int = typer.Option(10_000, help="fabric size"),
    batches: int = typer.Option(2, help="5 s batches to time"),
) -> None:
    """Probe rows per second the simulator produces at the paper's rates."""
    from producers.sim.bench import bench as run

    typer.echo(json.dumps(run(rnics, batches)))


@sim_app.command("run")
def run(
    scenario: str = typer.Option("healthy", help="fault scenario (see producers/sim/scenarios.py)"),
    seed: int = typer.Option(0),
    seconds: int = typer.Option(20, help="event time to simulate, in 5 s batches"),
    inventory_file: Path | None = typer.Option(None, "--inventory", exists=True, dir_okay=False,
                                              help="inventory YAML (default Panel 1)"),
) -> None:
    """Simulate without Kafka; print the truth and a JSON line per batch (uploads, probes, timeouts)."""
    from producers.sim.engine import Simulator
    from producers.sim.fabrics import panel1
    from producers.sim.scenarios import scenario_faults
    from schemas.inventory_yaml import load

    inv = load(inventory_file) if inventory_file else panel1()
    start = 1_800_000_000_000_000_000
    try:
        faults = scenario_faults(scenario, inv, seed, start_ns=start)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--scenario") from None
    s = Simulator(inv, seed=seed, faults=faults)
    typer.echo(json.dumps({"truth": s.truth()}))
    for i in range(max(1, seconds // 5)):
        t0 = start + i * 5_000_000_000
        ups = s.upload_batches(t0)
        probes = sum(len(p["seq"]) for _, p, _ in ups)
        lost = sum(int((p["status"] == "timeout").sum()) for _, p, _ in ups)
        typer.echo(json.dumps({"start_ns": t0, "uploads": len(ups), "probes": probes, "timeouts": lost}))
