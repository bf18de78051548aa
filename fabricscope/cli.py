"""The ``fabricscope`` console script. Each module ``fabricscope/cmd_*.py`` holds its commands
as module-level typer apps (``commands`` for top-level commands, ``<group>_app`` for a command
group); this file only adds them to the one :data:`app`."""

from __future__ import annotations

import importlib
from types import ModuleType

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
# Every command module, in the order `fabricscope --help` lists what each adds: its top-level commands
# (`commands`) and its command groups (`<group>_app`); one module per group (docs/ARCHITECTURE.md).
SUBAPPS = (("cmd_topics", "commands"), ("cmd_pipeline", "commands"), ("cmd_demo", "commands"),
           ("cmd_diagnose", "commands"), ("cmd_alerts", "commands"), ("cmd_history", "commands"),
           ("cmd_blame", "commands"), ("cmd_verdicts", "commands"), ("cmd_kafka", "kafka_app"),
           ("cmd_bench", "bench_app"), ("cmd_alerts", "alertmanager_app"), ("cmd_verdicts", "verdict_app"),
           ("cmd_history", "history_app"), ("cmd_report", "report_app"), ("cmd_lab", "lab_app"),
           ("cmd_inventory", "inventory_app"), ("cmd_sim", "sim_app"), ("cmd_store", "store_app"),
           ("cmd_hostping", "hostping_app"), ("cmd_jobs", "jobs_app"), ("cmd_pinglist", "pinglist_app"))
# Modules that load without the pipeline extra but serve only the pipeline (its local broker and its
# topics): an agent-only install leaves them out together with cmd_pipeline.
WITH_PIPELINE = {"cmd_topics", "cmd_kafka"}

_registered = False


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"fabricscope.{name}")
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in PIPELINE_ONLY:
            return None  # an agent-only install: this module needs the pipeline extra
        raise


def register_all() -> None:
    """Add every module's commands and command groups to :data:`app` (once); on an agent-only
    install, those whose modules need the ``pipeline`` extra are left out."""
    global _registered
    if _registered:
        return
    # Imported here so `fabricscope --help` stays fast and one broken module names itself.
    modules = {name: _module(name) for name in dict.fromkeys(n for n, _ in SUBAPPS)}
    if modules["cmd_pipeline"] is None:
        modules.update(dict.fromkeys(WITH_PIPELINE))
        if modules["cmd_hostping"] is not None:
            # an agent-only install: no pipeline `source`, so the one that knows only hostping-sim
            app.add_typer(modules["cmd_hostping"].commands)
    for name, attr in SUBAPPS:
        if modules[name] is not None:
            app.add_typer(getattr(modules[name], attr))
    _registered = True


def _click_error(name: str) -> type[Exception]:
    # typer vendors click; its usage-error classes are the bases of typer.BadParameter.
    return next(k for k in typer.BadParameter.__mro__ if k.__name__ == name)


def command_path(command: object, argv: list[str]) -> str:
    """``fabricscope lab fault`` for ``argv`` ``["lab", "fault", "nic-down", ...]``: the command words of a
    command line, found by walking the command groups."""
    words = ["fabricscope"]
    for word in argv:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        words.append(word)
        command = sub
    return " ".join(words)


def main() -> None:
    """Entry point of the console script.

    A usage error (unknown option, a value not among the choices) prints one line naming the
    command, the option and the valid values, and exits 2, before the command starts anything.
    """
    import signal
    import sys

    # A shell without job control starts `fabricscope worker &` with SIGINT ignored, and the process would
    # then ignore `kill -INT PID` too: every command stops on SIGINT as on SIGTERM, however it was started.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    usage_error, click_exception = _click_error("UsageError"), _click_error("ClickException")
    register_all()
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
        msg = " ".join(msg.split())  # click lists choices one per line: keep the one-line promise
        print(f"{where}: {msg} (see `{where} --help`)", file=sys.stderr)
        sys.exit(2)
    except click_exception as e:
        e.show()  # type: ignore[attr-defined]
        sys.exit(e.exit_code)  # type: ignore[attr-defined]
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except OSError as e:
        if not e.filename:
            raise
        # A path the command could not open or write (a typo, /proc, no permission): one line, not a traceback.
        print(f"{command_path(command, sys.argv[1:])}: {e.filename}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
