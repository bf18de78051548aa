"""The probe history: ``fabricscope queries`` (the saved queries over it) and ``fabricscope history
inventory`` (RNIC -> host, ToR, for its ToR rollups)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fabricscope.settings import load

console = Console(stderr=True)
commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""


@commands.command("queries")
def queries() -> None:
    """List the saved queries (schemas/queries/*.sql) with their parameters."""
    from schemas.saved_queries import load as load_query
    from schemas.saved_queries import names

    t = Table("name", "what it answers", "parameters")
    for name in names():
        q = load_query(name)
        t.add_row(name, q.description, ", ".join(f"{p.name} ({p.doc})" for p in q.params))
    Console().print(t)


history_app = typer.Typer(name="history", help="The tiered probe history (minute and hourly rollups).")


@history_app.command("inventory")
def inventory(path: Path = typer.Argument(..., exists=True, dir_okay=False,
                                          help="cluster inventory YAML (schemas/inventory_yaml.py)")) -> None:
    """Load RNIC -> host, ToR from an inventory file, so new probes roll up per ToR pair."""
    from fabricscope.store_access import load_inventory
    from schemas.inventory_yaml import load as load_inventory_file

    inv = load_inventory_file(path)
    load_inventory(load(), [(r.id, r.host, r.tor) for r in inv.rnics.values()])
    console.print(f"{len(inv.rnics)} RNICs loaded from {path}")
