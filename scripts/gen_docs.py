"""Generate the reference pages that must not drift: docs/configuration.md, docs/cli.md and the module tree.

    .venv/bin/python scripts/gen_docs.py            # rewrite both pages
    .venv/bin/python scripts/gen_docs.py --check    # exit 1 and name the stale pages, write nothing

docs/configuration.md comes from ``fabricscope.settings.Settings`` (the one settings definition) plus
the variables one process reads by itself, found by scanning the code (each needs a line in
``OTHER_VARIABLES``, or generation fails naming it). docs/cli.md is the typer CLI's ``--help`` for every
command and group, rendered without colour at a fixed width. The tree at the end of docs/ARCHITECTURE.md
names every module of every room with the first line of its docstring (a module without one fails the
generation, naming it). ``tests/fabricscope/test_docs.py`` fails when a page differs from what this script writes.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Read outside Settings, by the one process that needs it: (default, meaning).
OTHER_VARIABLES: dict[str, tuple[str, str]] = {
    "FABRICSCOPE_AGENT_SOCKETS": (
        "unset", "`python`: the udp agent uses its pure-Python socket path (one system call per datagram) even "
        "where the compiled batch calls (`producers._udpbatch`, `recvmmsg`/`sendmmsg`) are built"),
    "FABRICSCOPE_RAW_RETENTION": (
        "`full`", "raw probe rows stored: `full`, or `anomalies` (every timeout, every service probe, every probe "
        "over its flow's latency baseline, plus a seeded sample); the tiers count every probe either way (worker)"),
    "FABRICSCOPE_RAW_SAMPLE": ("`0.01`", "`anomalies`: the uniform sample of the other rows (worker)"),
    "FABRICSCOPE_RAW_SAMPLE_SEED": ("`0`", "seed of that sample (a hash of agent, seq and seed: a replay keeps "
                                    "the same rows)"),
    "KAFKA_CLUSTER_PORT": ("`19092`", "`kafka.sh cluster`: node k listens on this port + k - 1"),
    "KAFKA_CLUSTER_CONTROLLER_PORT": ("`19192`", "`kafka.sh cluster`: node k's controller on this port + k - 1"),
    "KAFKA_SASL_PLAIN_USER": ("unset", "`kafka.sh`: with the password, the broker's client listener is "
                              "SASL_PLAINTEXT with PLAIN and this one user (the client side: `KAFKA_SASL_*`)"),
    "KAFKA_SASL_PLAIN_PASSWORD": ("unset", "`kafka.sh`: that user's password (written to server.properties, "
                                  "mode 600)"),
    "FABRICSCOPE_DIE_WITH_PARENT": ("unset", "set by `up` and `demo` for their children (the parent's pid): the "
                                    "child stops when that process dies (internal; never set it by hand)"),
    "FABRICSCOPE_STEP_MESSAGES": ("`64`", "a worker step: up to this many probe messages (worker)"),
    "FABRICSCOPE_STEP_S": ("`0.5`", "a worker step: or what came within this many seconds (worker)"),
    "FABRICSCOPE_PARTITION_IDLE_S": (
        "`30`", "a `probes.raw` partition silent this long while others go on stops holding the watermark "
        "(reducer); keep it above a broker's leader move time"),
    "FABRICSCOPE_JOB_THRESHOLDS": ("`{}`", "JSON `{\"job\": {\"value\": 100.0, \"higher_is_worse\": false}}`: "
                                   "per-job performance thresholds for impact grading (reducer)"),
    "FABRICSCOPE_HOSTPING_IMPACT": ("`P2`", "impact class of Hostping verdicts (worker)"),
    "FABRICSCOPE_HOSTPING_BUS_LOOKBACK_S": ("`600`", "seconds of `hostmetrics.raw` a starting worker reads"),
    "FABRICSCOPE_LAB_DIR": ("`$FABRICSCOPE_VAR/lab`", "the netns lab's state directory"),
    "FABRICSCOPE_CLUSTER": ("`default`", "the cluster label of `fabricscope history inventory`"),
    "KAFKA_PORT": ("`9092`", "port of the local broker `fabricscope kafka start` runs"),
    "KAFKA_CONTROLLER_PORT": ("`9093`", "KRaft controller port of that broker"),
}
SCAN_DIRS = ("fabricscope", "streams", "sinks", "producers", "schemas", "infra")
ENV_NAME = re.compile(r"[\"'`]((?:FABRICSCOPE|KAFKA|CLICKHOUSE)_[A-Z0-9_]+)[\"'`]")
# Names the scan finds that are not variables a user sets (file names, test hooks, templates).
NOT_VARIABLES = {"FABRICSCOPE_FAILURE_SEED", "FABRICSCOPE_UPDATE_GOLDEN"}
WIDTH = 100


def _type_name(annotation: object) -> str:
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = len(args) < len(typing.get_args(annotation))
    if typing.get_origin(annotation) is typing.Literal:
        text = " or ".join(f"`{a}`" for a in args)
    elif args and len(args) == 1:
        text = _type_name(args[0])
    else:
        text = getattr(annotation, "__name__", None) or str(annotation)
    return f"{text} (optional)" if optional else text


def _default(field: object) -> str:
    from pydantic_core import PydanticUndefined

    if getattr(field, "default_factory", None) is not None:
        return "computed"
    value = field.default  # type: ignore[attr-defined]
    if value is None or value is PydanticUndefined:
        return "unset"
    if value == "":
        return "empty"
    return f"`{value}`"


def code_variables() -> set[str]:
    """Environment variable names written as string literals in the product's code.

    Returns:
        Upper-case names starting with FABRICSCOPE_, KAFKA_ or CLICKHOUSE_.
    """
    found: set[str] = set()
    for d in SCAN_DIRS:
        for path in (ROOT / d).rglob("*.py"):
            found.update(ENV_NAME.findall(path.read_text(encoding="utf-8")))
    return found


def configuration_page() -> str:
    """The text of docs/configuration.md.

    Raises:
        SystemExit: a variable the code reads has no line in Settings or OTHER_VARIABLES.
    """
    from fabricscope.settings import Settings

    rows = []
    names = set()
    for name, field in Settings.model_fields.items():
        env = name.upper()
        names.add(env)
        meaning = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{env}` | {_type_name(field.annotation)} | {_default(field)} | {meaning} |")
    missing = sorted(code_variables() - names - set(OTHER_VARIABLES) - NOT_VARIABLES)
    missing = [m for m in missing if not m.endswith("_")]
    if missing:
        raise SystemExit(f"gen_docs: variables read by the code with no description: {', '.join(missing)}; "
                         "add them to OTHER_VARIABLES in scripts/gen_docs.py")
    other = [f"| `{k}` | {d} | {m} |" for k, (d, m) in sorted(OTHER_VARIABLES.items())]
    return "\n".join([
        "# Configuration",
        "",
        "<!-- generated by scripts/gen_docs.py from fabricscope/settings.py; do not edit -->",
        "",
        "Environment variables, or a `.env` file in the working directory (keep it `chmod 600`). Every",
        "command validates them at start and exits 2 naming a wrong value or an unknown name in `.env`",
        "(`KAFKA_BOOTSTRAPP in .env is not a setting; did you mean KAFKA_BOOTSTRAP?`). Secret values",
        "(`SecretStr`) appear in no log line or error.",
        "",
        "## Settings (`fabricscope/settings.py`)",
        "",
        "| variable | type | default | meaning |",
        "|---|---|---|---|",
        *rows,
        "",
        "`computed` defaults: `FABRICSCOPE_QUERY_MAX_THREADS` is half the machine's cores.",
        "",
        "## Read by one process",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
        *other,
        "",
        "Alertmanager receivers: `FABRICSCOPE_CHAT_WEBHOOK_URL`, `FABRICSCOPE_SLACK_WEBHOOK_URL`,",
        "`FABRICSCOPE_DIGEST_WEBHOOK_URL` (or `*_FILE` naming a file that holds the URL), read by",
        "`fabricscope alertmanager start` ([storage.md](storage.md#alerts-prometheus-alertmanager)).",
        "",
    ])


def _commands(group: object, path: list[str]) -> list[tuple[list[str], object]]:
    out = [(path, group)]
    if hasattr(group, "list_commands"):  # a group (typer vendors click: no isinstance on click.Group)
        for name in sorted(group.list_commands(None)):  # type: ignore[arg-type]
            sub = group.get_command(None, name)  # type: ignore[arg-type]
            if sub is not None and not getattr(sub, "hidden", False):
                out.extend(_commands(sub, [*path, name]))
    return out


def cli_page() -> str:
    """The text of docs/cli.md: ``--help`` of every command, deepest groups included."""
    import typer
    from typer.testing import CliRunner

    from fabricscope.cli import app, register_all

    register_all()
    os.environ.update({"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb", "_TYPER_FORCE_DISABLE_TERMINAL": "1"})
    command = typer.main.get_command(app)
    runner = CliRunner()
    parts = ["# Command reference", "",
             "<!-- generated by scripts/gen_docs.py from `fabricscope ... --help`; do not edit -->", "",
             "Every command of `fabricscope`, as its `--help` prints it. Exit codes, signals and logs:",
             "[operations.md](operations.md).", ""]
    for path, _cmd in _commands(command, []):
        result = runner.invoke(app, [*path, "--help"], prog_name="fabricscope", terminal_width=WIDTH,
                               env={"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"})
        if result.exit_code != 0:
            raise SystemExit(f"gen_docs: fabricscope {' '.join(path)} --help exited {result.exit_code}")
        title = " ".join(["fabricscope", *path])
        text = "\n".join(line.rstrip() for line in result.output.strip("\n").splitlines())
        parts += [f"## {title}", "", "```", text, "```", ""]
    return "\n".join(parts)


ROOMS = ("schemas", "producers", "diagnose", "streams", "sinks", "fabricscope", "bench", "infra")
TREE_START = "<!-- module tree: generated by scripts/gen_docs.py from each module's docstring; do not edit below -->"


def _summary(path: Path) -> str:
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc and path.name == "__init__.py":
        return ""
    if not doc:
        raise SystemExit(f"gen_docs: {path.relative_to(ROOT)} has no module docstring: say what it holds")
    return " ".join(doc.split("\n\n", 1)[0].split())


def _tree(folder: Path, depth: int) -> list[str]:
    init = folder / "__init__.py"
    summary = _summary(init) if init.exists() else ""
    lines = [f"{'  ' * depth}- **`{folder.relative_to(ROOT).as_posix()}/`**" + (f" — {summary}" if summary else "")]
    for path in sorted(folder.glob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            lines.append(f"{'  ' * (depth + 1)}- `{path.name}` — {_summary(path)}")
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if any(sub.rglob("*.py")):
            lines += _tree(sub, depth + 1)
    return lines


def architecture_page() -> str:
    """docs/ARCHITECTURE.md: its hand-written part, then the tree of every module of every room."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    head = text.split(TREE_START, 1)[0].rstrip("\n")
    lines = [head, "", TREE_START, "", "## Every module", ""]
    for room in ROOMS:
        lines += _tree(ROOT / room, 0)
    return "\n".join(lines) + "\n"


PAGES = {"docs/configuration.md": configuration_page, "docs/cli.md": cli_page,
         "docs/ARCHITECTURE.md": architecture_page}


def main(argv: list[str]) -> int:
    """Write the pages, or with ``--check`` report the stale ones (exit 1)."""
    check = "--check" in argv
    stale = []
    for rel, make in PAGES.items():
        text = make()
        path = ROOT / rel
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(rel)
        if not check:
            path.write_text(text, encoding="utf-8")
    if check and stale:
        print(f"stale: {', '.join(stale)}; run .venv/bin/python scripts/gen_docs.py", file=sys.stderr)
        return 1
    for rel in stale:
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
