"""Commands ``fabricscope inventory ...`` (cluster file) and ``fabricscope sim ...`` (the simulator)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

inventory_app = typer.Typer(
    name="inventory", help="The cluster inventory: write, validate, import LLDP ports.", no_args_is_help=True
)
sim_app = typer.Typer(
    name="sim", help="The seeded Clos-fabric simulator (the sim probe backend).", no_args_is_help=True
)


@inventory_app.command("check")
def check(path: Path = typer.Argument(..., exists=True, dir_okay=False, help="inventory YAML")) -> None:
    """Validate an inventory file; print its size, or every problem with its fix."""
    from schemas.inventory import InventoryError
    from schemas.inventory_yaml import load

    try:
        inv = load(path)
    except InventoryError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"{path}: ok: {len(inv.hosts)} hosts, {len(inv.rnics)} RNICs, {len(inv.tors)} ToRs, "
        f"{len(inv.switches)} switches, {len(inv.links)} switch links"
    )


@inventory_app.command("write")
def write(
    out: Path = typer.Argument(..., help="where to write the YAML"),
    panel1: bool = typer.Option(False, "--panel1", help="the digest's Panel 1 fabric"),
    seed: int = typer.Option(0),
    tors: int = typer.Option(4),
    spines: int = typer.Option(4),
    hosts_per_tor: int = typer.Option(2),
    rnics_per_host: int = typer.Option(2),
) -> None:
    """Write the Panel 1 fabric or a seeded two-tier Clos as an inventory file."""
    from producers.sim import fabrics

    inv = fabrics.panel1() if panel1 else fabrics.random_clos(seed, tors, spines, hosts_per_tor, rnics_per_host)
    inv.dump(out)
    typer.echo(f"wrote {out}: {len(inv.rnics)} RNICs")


@inventory_app.command("lldp")
def lldp(
    path: Path = typer.Argument(..., exists=True, dir_okay=False, help="inventory YAML, updated in place"),
    lldp_json: Path = typer.Option(..., "--json", exists=True, dir_okay=False,
                                   help="file with the output of `lldpctl -f json`"),
    host: str | None = typer.Option(None, help="the host whose LLDP table this is"),
    switch: str | None = typer.Option(None, help="the ToR or switch whose LLDP table this is"),
) -> None:
    """Fill ToR ports (RNIC cables, and switch links with --switch) from an LLDP table."""
    from schemas.inventory import InventoryError
    from schemas.inventory_yaml import load
    from schemas.lldp import apply_lldp, apply_switch_lldp, parse_lldpctl_json

    if (host is None) == (switch is None):
        raise typer.BadParameter("give exactly one of --host or --switch")
    try:
        nbs = parse_lldpctl_json(lldp_json.read_text())
        inv = load(path)
        inv = apply_lldp(inv, host, nbs) if host else apply_switch_lldp(inv, str(switch), nbs)
    except (InventoryError, ValueError) as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(1) from None
    inv.dump(path)
    shown = inv.rnics_of_host(host) if host else inv.rnics_under_tor(str(switch)) if switch in inv.tors else []
    for r in shown:
        typer.echo(f"{r}: {inv.port_of(r)}")


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
