"""The ``fabricscope`` console script. Each command group lives in its own module
under :mod:`fabricscope`; this file only registers them."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="fabricscope",
    help="RoCE fabric and intra-host monitoring (R-Pingmesh + Hostping) over Kafka, Faust and ClickHouse.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _register() -> None:
    # Imported here so `fabricscope --help` stays fast and one broken group names itself.
    from fabricscope import cmd_pipeline

    cmd_pipeline.register(app)
    __import__("fabricscope.cmd_bench", fromlist=["register"]).register(app)
    __import__("fabricscope.cmd_demo", fromlist=["register"]).register(app)
    __import__("fabricscope.cmd_diagnose", fromlist=["register"]).register(app)
    __import__("fabricscope.cmd_history", fromlist=["register"]).register(app)
    __import__("fabricscope.cmd_lab", fromlist=["register"]).register(app)
    __import__("fabricscope.cmd_sim", fromlist=["register"]).register(app)
    __import__("fabricscope.cmd_store", fromlist=["register"]).register(app)
    __import__("fabricscope.cmd_blame", fromlist=["register"]).register(app)
    __import__("fabricscope.cmd_hostping", fromlist=["register"]).register(app)  # after cmd_pipeline: extends `source`


def main() -> None:
    """Entry point of the console script."""
    _register()
    app()


if __name__ == "__main__":
    main()
