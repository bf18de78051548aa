"""The ``fabricscope`` console script. Each module ``fabricscope/cmd_*.py`` holds its commands
as module-level typer apps (``commands`` for top-level commands, ``<group>_app`` for a command
group); this file only adds them to the one :data:`app`."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="fabricscope",
    help="RoCE fabric and intra-host monitoring (R-Pingmesh + Hostping) over Kafka, Faust and ClickHouse.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


_registered = False


def register_all() -> None:
    """Add every module's commands and command groups to :data:`app` (once)."""
    global _registered
    if _registered:
        return
    # Imported here so `fabricscope --help` stays fast and one broken module names itself.
    from fabricscope import (
        cmd_bench,
        cmd_blame,
        cmd_demo,
        cmd_diagnose,
        cmd_history,
        cmd_hostping,
        cmd_lab,
        cmd_pipeline,
        cmd_sim,
        cmd_store,
    )

    cmd_hostping.register(cmd_pipeline.commands)  # extends `source` with the hostping-sim kind
    # Top-level commands first, then the command groups, in the order `fabricscope --help` lists them.
    for sub in (
        cmd_pipeline.commands,
        cmd_demo.commands,
        cmd_diagnose.commands,
        cmd_history.commands,
        cmd_blame.commands,
        cmd_pipeline.kafka_app,
        cmd_bench.bench_app,
        cmd_history.alertmanager_app,
        cmd_history.verdict_app,
        cmd_history.history_app,
        cmd_history.report_app,
        cmd_lab.lab_app,
        cmd_sim.inventory_app,
        cmd_sim.sim_app,
        cmd_store.store_app,
        cmd_hostping.hostping_app,
    ):
        app.add_typer(sub)
    _registered = True


def main() -> None:
    """Entry point of the console script."""
    register_all()
    app()


if __name__ == "__main__":
    main()
