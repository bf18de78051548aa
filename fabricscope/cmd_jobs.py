"""``fabricscope jobs ...``: the scheduler's jobs (Slurm), their placement on the fabric, and node actions.

Only wiring and printing: jobs come from :mod:`producers.scheduler.slurm`, placement and the service
pinglist sample from :mod:`producers.scheduler.jobs`, the drain/resume decisions and the blast-radius
guard from :mod:`sinks.remediate`. docs/scheduler.md is the user's page.

Which Slurm: ``--slurm-conf`` or ``$SLURM_CONF`` (``bash infra/slurm/slurm.sh env`` prints the test
cluster's), else the system's. Which inventory: ``--inventory`` or ``$FABRICSCOPE_INVENTORY``, else the
lab's ``var/lab/inventory.yaml``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import typer

jobs_app = typer.Typer(name="jobs", no_args_is_help=True,
                       help="Scheduler jobs (Slurm): list, store, service-pinglist connections, node actions.")

EXIT_REFUSED = 4  # the blast-radius guard refused at least one action: an alert's cue

_SLURM_CONF = typer.Option(None, "--slurm-conf", envvar="SLURM_CONF", help="slurm.conf of the cluster")
_INVENTORY = typer.Option(None, "--inventory", envvar="FABRICSCOPE_INVENTORY",
                          help="inventory YAML (default: the lab's var/lab/inventory.yaml)")
_NODE_MAP = typer.Option(None, "--node-map", help="YAML 'slurm_node: inventory_host' where names differ")
_SINCE = typer.Option("1d", "--since", help="finished jobs that ended this long ago or later (1d, 12h, 30m)")
_FROM = typer.Option("slurm", "--from", help="scheduler backend (slurm; kubernetes is not built yet)")


def _fail(msg: str, code: int = 1) -> typer.Exit:
    typer.echo(f"fabricscope jobs: {msg}", err=True)
    return typer.Exit(code)


def _client(slurm_conf: Path | None, backend: str) -> Any:  # noqa: ANN401 - the backend's client
    if backend != "slurm":
        raise _fail(f"--from {backend!r}: only 'slurm' is built (Kubernetes pods' placement comes later)", 2)
    from producers.scheduler.slurm import SlurmClient

    if slurm_conf is not None and not slurm_conf.is_file():
        raise _fail(f"--slurm-conf {slurm_conf}: no such file; `bash infra/slurm/slurm.sh env` prints the "
                    "test cluster's", 2)
    return SlurmClient(conf=str(slurm_conf) if slurm_conf else None)


def _inventory(path: Path | None) -> Any:  # noqa: ANN401 - schemas.inventory.Inventory
    from schemas.inventory import InventoryError
    from schemas.inventory_yaml import load

    p = path or Path(os.environ.get("FABRICSCOPE_VAR", "var")) / "lab" / "inventory.yaml"
    try:
        return load(p)
    except FileNotFoundError:
        raise _fail(f"inventory {p}: no such file; give --inventory FILE (or start the lab: fabricscope lab up)",
                    2) from None
    except InventoryError as e:
        raise _fail(str(e), 2) from None


def _node_map(path: Path | None) -> Any:  # noqa: ANN401 - producers.scheduler.jobs.NodeMap
    from producers.scheduler.jobs import NodeMap, load_node_map

    if path is None:
        return NodeMap()
    try:
        return load_node_map(path)
    except ValueError as e:
        raise _fail(str(e), 2) from None


def _since_ns(since: str) -> int:
    from schemas.saved_queries import SavedQueryError, parse_duration

    try:
        return time.time_ns() - parse_duration(since) * 1_000_000_000
    except SavedQueryError as e:
        raise _fail(str(e), 2) from None


def read_placements(slurm_conf: Path | None, inventory: Path | None, node_map: Path | None, since: str,
                    backend: str = "slurm") -> tuple[list[Any], Any]:
    """(placements of the scheduler's jobs since ``since``, the inventory); exits 1 on a Slurm error."""
    from producers.scheduler.jobs import place
    from producers.scheduler.slurm import SlurmError

    client = _client(slurm_conf, backend)
    inv, nm = _inventory(inventory), _node_map(node_map)
    try:
        jobs = client.jobs(_since_ns(since))
    except SlurmError as e:
        raise _fail(str(e)) from None
    return [place(j, inv, nm) for j in jobs], inv


def _fmt_ns(ns: int | None) -> str:
    if not ns:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns / 1e9))


def list_cmd(slurm_conf: Path = _SLURM_CONF, inventory: Path = _INVENTORY, node_map: Path = _NODE_MAP,
             since: str = _SINCE, backend: str = _FROM,
             as_json: bool = typer.Option(False, "--json", help="one JSON object per job")) -> None:
    """The scheduler's active jobs and those finished since --since, with their hosts and RNICs."""
    placements, _ = read_placements(slurm_conf, inventory, node_map, since, backend)
    for p in placements:
        j = p.job
        if as_json:
            typer.echo(json.dumps({**j.to_dict(), "hosts": list(p.hosts), "rnics": list(p.rnics),
                                   "unmapped": list(p.unmapped)}, sort_keys=True))
            continue
        typer.echo(f"{j.job_id:>10} {j.state:<10} {j.user:<8} {j.name[:20]:<20} {_fmt_ns(j.start_ns)} → "
                   f"{_fmt_ns(j.end_ns) if j.end_ns else 'running'}  nodes {','.join(j.nodes) or '-'}  "
                   f"rnics {','.join(p.rnics) or '-'}"
                   + (f"  UNMAPPED {','.join(p.unmapped)} (not in the inventory or --node-map)" if p.unmapped else ""))
    if not placements and not as_json:
        typer.echo("no jobs (active or finished since --since)")


def job_rows(placements: list[Any], observed_ns: int) -> Any:  # noqa: ANN401 - pa.Table
    """Table ``jobs`` rows (``schemas/ddl/050_jobs.sql``) of placements."""
    import pyarrow as pa

    strs = pa.list_(pa.string())
    cols: dict[str, list] = {k: [] for k in ("job_id", "parent_id", "name", "user", "partition", "state", "nodes",
                                             "hosts", "rnics", "unmapped", "submit_ns", "start_ns", "end_ns")}
    for p in placements:
        d = p.job.to_dict()
        for k in ("job_id", "parent_id", "name", "user", "partition", "state", "nodes", "submit_ns", "start_ns",
                  "end_ns"):
            cols[k].append(d[k])
        cols["hosts"].append(list(p.hosts))
        cols["rnics"].append(list(p.rnics))
        cols["unmapped"].append(list(p.unmapped))
    n = len(placements)
    types = {"nodes": strs, "hosts": strs, "rnics": strs, "unmapped": strs, "submit_ns": pa.int64(),
             "start_ns": pa.int64(), "end_ns": pa.int64()}
    arrays = {k: pa.array(v, types.get(k, pa.string())) for k, v in cols.items()}
    arrays["source"] = pa.array([p.job.source for p in placements], pa.string())
    arrays["observed_ns"] = pa.array([observed_ns] * n, pa.int64())
    return pa.table(arrays)


def _store() -> Any:  # noqa: ANN401 - an open, migrated sinks.clickhouse.Store
    from fabricscope.settings import load
    from sinks.clickhouse import StoreError, migrate, open_store
    from sinks.query_endpoint import find_endpoint

    s = load()
    if not s.clickhouse_dsn() and find_endpoint(s.store_path):
        raise _fail(f"a running sink owns the embedded store {s.store_path}; set CLICKHOUSE_URL to a server "
                    "or run this while the sink is stopped")
    try:
        store = open_store(s.store_path, s.clickhouse_dsn(), s.query_limits())
        migrate(store)
    except StoreError as e:
        raise _fail(str(e)) from None
    return store


def sync_cmd(slurm_conf: Path = _SLURM_CONF, inventory: Path = _INVENTORY, node_map: Path = _NODE_MAP,
             since: str = _SINCE, backend: str = _FROM) -> None:
    """Write the scheduler's jobs (active and finished since --since) into the store's `jobs` table."""
    placements, _ = read_placements(slurm_conf, inventory, node_map, since, backend)
    store = _store()
    try:
        store.insert_arrow("jobs", job_rows(placements, time.time_ns()))
    finally:
        store.close()
    active = sum(1 for p in placements if p.job.end_ns is None)
    typer.echo(f"jobs: {len(placements)} written ({active} active); query them with "
               "`fabricscope query jobs_hit` or `SELECT * FROM jobs FINAL`")


def connections_cmd(slurm_conf: Path = _SLURM_CONF, inventory: Path = _INVENTORY, node_map: Path = _NODE_MAP,
                    backend: str = _FROM,
                    max_pairs: int = typer.Option(64, "--max-pairs", min=1, help="node pairs sampled per job"),
                    out: Path = typer.Option(None, "--out", help="write JSON lines here (default: stdout)")) -> None:
    """Service-pinglist connections of the running jobs (the controller's connections file): a bounded sample
    of each job's node pairs, rail-aligned RNIC to RNIC, both directions."""
    from producers.scheduler.jobs import running_connections

    placements, inv = read_placements(slurm_conf, inventory, node_map, "0s", backend)
    lines = [json.dumps(c, sort_keys=True)
             for c in running_connections([p.job for p in placements], inv, _node_map(node_map), max_pairs)]
    text = "\n".join(lines) + ("\n" if lines else "")
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        typer.echo(f"jobs: {len(lines)} connections written to {out}", err=True)


def _verdict_rows(verdicts_file: Path | None, since_ns: int) -> list[dict]:
    from streams.pingmesh.blame import current_verdicts

    if verdicts_file is not None:
        from fabricscope.cmd_blame import read_table

        t = read_table(verdicts_file)
    else:
        from fabricscope.settings import load
        from fabricscope.store_access import run_query
        from schemas.arrow_pa import arrow_schema

        names = ", ".join(arrow_schema("verdict.v1").names)
        t = run_query(load(), f"SELECT {names} FROM verdicts FINAL WHERE window_end_ns >= {int(since_ns)}")
    return current_verdicts(t).to_pylist()


def remediate_cmd(
    slurm_conf: Path = _SLURM_CONF, inventory: Path = _INVENTORY, node_map: Path = _NODE_MAP,
    verdicts_file: Path = typer.Option(None, "--verdicts", help="verdict.v1 rows (Arrow/Parquet); default: store"),
    apply_: bool = typer.Option(False, "--apply", help="drain and resume for real (default: dry run)"),
    production: bool = typer.Option(False, "--production",
                                    help="these verdicts come from the production pipeline (required with --apply)"),
    max_fraction: float = typer.Option(0.5, "--max-fraction", help="share of a partition drained at once"),
    max_nodes: int = typer.Option(None, "--max-nodes", help="nodes drained by fabricscope at once, in all"),
    max_per_hour: int = typer.Option(10, "--max-per-hour", help="drains in any trailing hour"),
    clear_min: float = typer.Option(30.0, "--clear-min", help="minutes without a verdict before a resume"),
    log: bool = typer.Option(True, "--log/--no-log", help="record every action in the store's node_actions"),
) -> None:
    """Drain the nodes that P0/P1 rnic/host_down/busy_host verdicts blame, resume the ones fabricscope drained
    whose problem cleared (or whose verdict an operator rejected), within the blast-radius guard.
    Dry run unless --apply --production. Exit 4 when the guard refused an action."""
    from producers.scheduler.slurm import SlurmError
    from sinks.remediate import GuardConfig, History, action_rows, apply, plan, summary

    if apply_ and not production:
        raise _fail("--apply acts only on production verdicts: add --production (the lab, sim and demo "
                    "pipelines never do)", 2)
    try:
        cfg = GuardConfig(max_fraction, max_nodes, max_per_hour, int(clear_min * 60e9))
    except ValueError as e:
        raise _fail(str(e), 2) from None
    client = _client(slurm_conf, "slurm")
    inv, nm = _inventory(inventory), _node_map(node_map)
    now = time.time_ns()
    try:
        nodes = client.nodes()
    except SlurmError as e:
        raise _fail(str(e)) from None
    names = {n.name for n in nodes}
    host_node = {nm.host(n, inv): n for n in sorted(names) if nm.host(n, inv)}
    verdicts = _verdict_rows(verdicts_file, now - cfg.clear_ns)
    store = _store() if log else None
    try:
        history = _history(store, now) if store is not None else History()
        actions = apply(plan(verdicts, nodes, inv, host_node, history, now, cfg), client, dry_run=not apply_)
        if store is not None and actions:
            import pyarrow as pa

            store.insert_arrow("node_actions", pa.Table.from_pylist(action_rows(actions, now, not apply_)))
    finally:
        if store is not None:
            store.close()
    for a in actions:
        typer.echo(f"{a.action:<8} {a.node or '-':<8} {a.outcome:<10} {a.why}"
                   + (f"  [reason: {a.reason}]" if a.action == "drain" else ""))
    typer.echo(f"remediate: {summary(actions)}{'' if apply_ else ' (dry run: add --apply --production to act)'}")
    if any(a.action == "refused" for a in actions):
        typer.echo("remediate: the blast-radius guard refused actions; fabricscope stops acting on them", err=True)
        raise typer.Exit(EXIT_REFUSED)


def _history(store: Any, now_ns: int) -> Any:  # noqa: ANN401 - sinks.remediate.History
    from sinks.remediate import HOUR_NS, History

    drains = store.query_arrow(
        "SELECT at_ns FROM node_actions FINAL WHERE action = 'drain' AND outcome = 'done' "
        f"AND at_ns >= {int(now_ns - HOUR_NS)}")["at_ns"].to_pylist()
    rejected = store.query_arrow(
        "SELECT verdict_id FROM verdict_feedback GROUP BY verdict_id "
        "HAVING argMax(decision, at_ns) = 'reject'")["verdict_id"].to_pylist()
    return History(drains, set(rejected))


jobs_app.command("list")(list_cmd)
jobs_app.command("sync")(sync_cmd)
jobs_app.command("connections")(connections_cmd)
jobs_app.command("remediate")(remediate_cmd)
