"""``fabricscope inventory check|write|lldp``: the cluster inventory file (``schemas/inventory_yaml.py``)."""

from __future__ import annotations

from pathlib import Path

import typer

inventory_app = typer.Typer(
    name="inventory", help="The cluster inventory: write, validate, import LLDP ports.", no_args_is_help=True
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
