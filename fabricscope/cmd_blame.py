"""``fabricscope blame --job J --at TIME``: is the network to blame for job J at that time?

Only wiring and printing; the answer is :func:`streams.pingmesh.blame.blame` over the verdicts
(``verdict.v1``) and per-job coverage rows of the window holding TIME. They come from
Arrow/Parquet files given with ``--verdicts``/``--coverage``, else from the store
(table ``verdicts``; coverage from table ``coverage`` once the store has one). A Slurm job id is
answered with the job's scheduler row (table ``jobs``, written by ``fabricscope jobs sync``): its name,
user, nodes and RNICs, and whether it ran at TIME.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import typer

from fabricscope.times import format_window, typer_time, tz_option
from sinks.origin import OriginError
from streams.pingmesh.blame import COVERAGE_SCHEMA, blame
from streams.pingmesh.windows import WINDOW_NS, window_start

EXIT_UNKNOWN = 3  # no coverage for the job then: neither "network" nor "innocent" can be said


def parse_time(text: str, tz: str = "utc") -> int:
    """TIME as ns since the epoch (:func:`fabricscope.times.parse_time`: ``now``, ``-5m``, ``10 min ago``,
    ISO 8601, ns).

    Raises:
        typer.BadParameter: not a time; the message shows the forms.
    """
    return typer_time(text, tz, "--at")


def read_table(path: Path) -> pa.Table:
    """An Arrow IPC stream/file or a Parquet file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    with pa.OSFile(str(path), "rb") as f:
        data = f.read()
    try:
        return pa.ipc.open_stream(data).read_all()
    except pa.ArrowInvalid:
        return pa.ipc.open_file(pa.BufferReader(data)).read_all()


def _from_store(ws: int, origin: str | None = None) -> tuple[pa.Table, pa.Table, str]:
    from fabricscope.settings import load
    from fabricscope.store_access import run_query, selected_origin
    from schemas.arrow_pa import arrow_schema

    s = load()
    chosen = selected_origin(s, origin)
    # only the chosen origin's rows: a demo's or simulator's verdicts never blame the lab's job (or production's)
    where = f"window_start_ns = {int(ws)}" + (f" AND origin = '{chosen}'" if chosen else "")
    names = ", ".join(arrow_schema("verdict.v1").names)
    verdicts = run_query(s, f"SELECT {names} FROM verdicts FINAL WHERE {where}")
    note = f"verdicts and coverage of origin {chosen} (--origin all for every origin)" if chosen else ""
    try:
        coverage = run_query(s, f"SELECT * EXCEPT (origin) FROM coverage WHERE {where}")
    except Exception as e:  # the store has no coverage table yet: answer 'unknown', say why
        coverage = COVERAGE_SCHEMA.empty_table()
        note = f"coverage not in the store ({type(e).__name__}); without coverage the answer cannot be 'innocent'"
    return verdicts, coverage, note


def blame_cmd(
    job: str = typer.Option(..., "--job", help="job id: Slurm's (1234, 1234_7, 1234+1; step 1234.0 names its job) "
                                              "or the service pinglist's name"),
    at: str = typer.Option(..., "--at", help="time: now, -5m, '10 min ago', ISO 8601 (2026-12-01T18:29:00Z; "
                           "no zone = --tz) or ns since the epoch"),
    verdicts_file: Path = typer.Option(None, "--verdicts", exists=True, dir_okay=False,
                                       help="verdict.v1 rows (Arrow IPC or Parquet)"),
    coverage_file: Path = typer.Option(None, "--coverage", exists=True, dir_okay=False,
                                       help="coverage rows (Arrow IPC or Parquet)"),
    as_json: bool = typer.Option(False, "--json", help="print the answer as JSON"),
    tz: str = tz_option(),
    ns: bool = typer.Option(False, "--ns", help="print the window as ns since the epoch"),
    origin: str = typer.Option(None, help="verdicts of this origin: production, lab, sim, demo or all "
                               "(default: the running pipeline's)"),
) -> None:
    """Say whether the network is to blame for a job at a time, with the coverage behind the answer.
    Exit 0 with an answer (network or innocent), 3 for unknown (no coverage), 2 on a usage error;
    the same with --json."""
    at_ns = parse_time(at, tz)
    ws = window_start(at_ns, WINDOW_NS)
    note = ""
    job = _slurm_job_id(job)
    if verdicts_file is not None:
        verdicts = read_table(verdicts_file)
        coverage = read_table(coverage_file) if coverage_file else COVERAGE_SCHEMA.empty_table()
    else:
        try:
            verdicts, coverage, note = _from_store(ws, origin)
        except OriginError as e:
            raise typer.BadParameter(str(e), param_hint="'--origin'") from None
    ans = blame(job, at_ns, verdicts, coverage)
    sched = _scheduler_job(job, at_ns) if verdicts_file is None else None
    if as_json:
        out = json.loads(ans.to_json())
        if sched is not None:
            out["scheduler_job"] = sched
        typer.echo(json.dumps(out, sort_keys=True, default=str))
        raise typer.Exit(EXIT_UNKNOWN if ans.answer == "unknown" else 0)
    window = f"{ws}–{ws + WINDOW_NS} ns" if ns else format_window(ws, ws + WINDOW_NS, tz)
    typer.echo(f"job {job}, window {window}: {ans.answer.upper()} — {ans.reason}")
    if sched is not None:
        typer.echo(f"  scheduler: {sched['name']!r} of {sched['user']}, {sched['state']}, on "
                   f"{','.join(sched['nodes']) or '-'} (RNICs {','.join(sched['rnics']) or '-'})"
                   + ("" if sched["running_at"] else "; NOT running at that time"))
    for p in ans.problems:
        typer.echo(f"  {p['impact']} {p['kind']} at {p['location']} (confidence {p['confidence']:.2f})")
    for p in ans.other:
        typer.echo(f"  not network: {p['kind']} at {p['location']}")
    if ans.coverage:
        c = ans.coverage
        typer.echo(f"  coverage: {c['connections_probed']}/{c['connections_expected']} connections probed, "
                   f"{c['links_covered']}/{c['links_total']} links with enough probes, "
                   f"silent agents: {c['agents_silent'] or 'none'}")
    if note:
        typer.echo(f"  note: {note}")
    if ans.answer == "unknown":
        hint = _unknown_hint(job, ws, coverage)
        if hint:
            typer.echo(f"  note: {hint}")
        raise typer.Exit(EXIT_UNKNOWN)


def _slurm_job_id(job: str) -> str:
    """A Slurm step id names its job (``1234.0`` -> ``1234``); any other id is left as it is."""
    from producers.scheduler.jobs import JobIdError, base_job_id

    try:
        return base_job_id(job)
    except JobIdError:
        return job  # not a Slurm id: the lab's job-lab, a connections file's names


def _scheduler_job(job: str, at_ns: int) -> dict | None:
    """The job's row in the store's ``jobs`` table (``fabricscope jobs sync``), or None when it has none."""
    from fabricscope.settings import load
    from fabricscope.store_access import run_query
    from sinks.readonly_sql import sql_string

    try:
        t = run_query(load(), "SELECT job_id, name, user, state, nodes, rnics, start_ns, end_ns FROM jobs FINAL "
                              f"WHERE job_id = {sql_string(job)} LIMIT 1")
    except Exception:  # no jobs table (an older store) or no store: blame answers without it
        return None
    if t.num_rows == 0:
        return None
    row = t.to_pylist()[0]
    row["running_at"] = bool(row["start_ns"] and row["start_ns"] <= at_ns
                             and (row["end_ns"] is None or at_ns < row["end_ns"]))
    return row


def _unknown_hint(job: str, ws: int, coverage: pa.Table) -> str:
    """Why there may be no coverage for ``job`` at ``ws``: a window still open, or a job id no row has."""
    import time

    if ws + WINDOW_NS > time.time_ns():
        return "this window has not closed yet (it is open or in the future); ask after it ends, plus 10 s grace"
    jobs = sorted({j for j in coverage.column("job_id").to_pylist() if j}) if "job_id" in coverage.schema.names \
        else []
    if jobs and job not in jobs:
        return f"no coverage row names job {job!r} in this window; jobs with coverage then: {', '.join(jobs)}"
    return ""


commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""
commands.command("blame")(blame_cmd)

