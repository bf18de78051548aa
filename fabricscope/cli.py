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


# Modules only the `pipeline` extra installs: an agent-only host has none of them, and the command
# groups that need them are left out of its `fabricscope` (pip install 'fabricscope[pipeline]' adds them).
PIPELINE_ONLY = {"pyarrow", "faust", "aiokafka", "chdb", "clickhouse_connect", "matplotlib", "numpy", "cramjam",
                 "httpx", "pyroute2", "mode"}
GROUPS = ("cmd_pipeline", "cmd_bench", "cmd_demo", "cmd_diagnose", "cmd_history", "cmd_lab", "cmd_sim", "cmd_store",
          "cmd_blame", "cmd_hostping")  # cmd_hostping after cmd_pipeline: it extends `source`


def _register() -> None:
    # Imported here so `fabricscope --help` stays fast and one broken group names itself.
    import importlib

    for name in GROUPS:
        try:
            module = importlib.import_module(f"fabricscope.{name}")
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] in PIPELINE_ONLY:
                continue  # an agent-only install: this group needs the pipeline extra
            raise
        module.register(app)


def _click_error(name: str) -> type[Exception]:
    # typer vendors click; its usage-error classes are the bases of typer.BadParameter.
    return next(k for k in typer.BadParameter.__mro__ if k.__name__ == name)


def main() -> None:
    """Entry point of the console script.

    A usage error (unknown option, a value not among the choices) prints one line naming the
    command, the option and the valid values, and exits 2, before the command starts anything.
    """
    import sys

    usage_error, click_exception = _click_error("UsageError"), _click_error("ClickException")
    _register()
    command = typer.main.get_command(app)
    try:
        rv = command.main(prog_name="fabricscope", standalone_mode=False)
    except usage_error as e:
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError":
            print(ctx.get_help() if ctx else str(e), file=sys.stderr)
            sys.exit(2)
        where = ctx.command_path if ctx else "fabricscope"
        msg = e.format_message().replace("Value error, ", "")  # type: ignore[attr-defined]
        print(f"{where}: {msg} (see `{where} --help`)", file=sys.stderr)
        sys.exit(2)
    except click_exception as e:
        e.show()  # type: ignore[attr-defined]
        sys.exit(e.exit_code)  # type: ignore[attr-defined]
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
