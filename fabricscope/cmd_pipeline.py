"""The pipeline's processes and its store: worker, sink, source, up, query."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import time
from pathlib import Path

import typer
from rich.console import Console

from fabricscope import cmd_hostping as hostping
from fabricscope.choices import Scenario, SourceKind, UpSource, WorkerRole, positive_seconds, value
from fabricscope.local_services import lab_available  # noqa: F401 - re-exported
from fabricscope.result_output import DEFAULT_LIMIT, column_types, print_result
from fabricscope.settings import Settings, load
from fabricscope.stopping import stop_requested
from fabricscope.times import typer_since, tz_option

console = Console(stderr=True)


def _replication(s: Settings) -> int | None:
    """Replicas for Faust's own topics: ``KAFKA_REPLICATION_FACTOR``, else min(3, brokers) of the cluster;
    None (Faust's 1) when the cluster does not answer in 10 s (the worker still starts and waits for it).

    Raises:
        ValueError: ``KAFKA_REPLICATION_FACTOR`` exceeds the brokers.
    """
    from confluent_kafka import KafkaException

    from fabricscope.kafka_admin import cluster_replication

    try:
        return cluster_replication(s.kafka_bootstrap, s.kafka_client_config(), s.kafka_replication_factor, 10.0)
    except KafkaException as err:
        logging.getLogger("fabricscope.worker").warning(
            "cluster size unknown (%s): topics Faust creates itself would get 1 replica", err)
        return s.kafka_replication_factor


commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""

@commands.command("worker")
def worker(loglevel: str = "warn",
           metrics_port: int = typer.Option(0, help="serve Prometheus metrics on 127.0.0.1:PORT (0 = off)"),
           role: WorkerRole = typer.Option("all", help="all: RTT decomposition, window partials, Hostping and "
                                           "the reducer | stream: all but the reducer | reducer: the window "
                                           "reducer alone (run one; `up` runs N stream workers and one reducer)"),
           nice: int = typer.Option(0, min=0, max=19, help="lower this process's CPU priority by N (as nice(1)): "
                                    "`up` runs stream workers at +5 so the reducer and the store writer, whose "
                                    "work a verdict waits on, get a core first"),
           ) -> None:
    """Run one Faust stream worker (RTT decomposition, window partials, the reducer, Hostping).
    Start more for more partitions; with --role, the reducer runs in a process of its own."""
    s = load()
    from streams.runtime.config import RuntimeConfig
    from streams.runtime.worker import run_worker

    try:
        config = RuntimeConfig.from_env(s.kafka_bootstrap, s.fabricscope_topic_prefix, s.kafka_client_config(),
                                        os.environ.get("FABRICSCOPE_VAR", "var"))
        config = dataclasses.replace(config, acks=s.kafka_acks, idempotence=s.kafka_idempotence,
                                     replication=_replication(s), role=value(role))
    except ValueError as e:
        typer.echo(f"fabricscope: {e}", err=True)
        raise typer.Exit(2) from None
    if nice:
        os.nice(nice)
    _serve_metrics(metrics_port)
    run_worker(config, loglevel)


@commands.command("sink")
def sink(metrics_port: int = typer.Option(0, help="serve Prometheus metrics on 127.0.0.1:PORT (0 = off)")
         ) -> None:
    """Write result topics into ClickHouse (embedded chdb by default) and serve local queries."""
    _serve_metrics(metrics_port)
    run_sink(load())


@commands.command("source", help="Publish agent uploads from a source: probes.raw, paths.traced, registry. "
                  f"{hostping.SOURCE_HELP}")
def source(
    kind: SourceKind = typer.Argument("sim", help="sim (Clos fabric model with faults) | synthetic (minimal "
                                      "prober) | hostping-sim (Hostping sim hosts)"),
    scenario: Scenario = typer.Option("healthy", help="sim: the fault scenario"),
    inventory: str = typer.Option("panel1", help="sim: an inventory YAML, or panel1"),
    hosts: int = typer.Option(4, min=1, help="synthetic: hosts"),
    rnics: int = typer.Option(2, min=1, help="synthetic: RNICs per host"),
    seed: int = 1,
    probes_per_batch: int = typer.Option(100, min=1, help="synthetic: probes per upload"),
    batches: int = typer.Option(0, min=0, help="stop after this many 5 s uploads (0 = run until stopped)"),
    realtime: bool = typer.Option(True, help="pace uploads every 5 s of wall time"),
    start_ns: int = typer.Option(0, help="event time of the first upload (0 = now, aligned to 5 s)"),
    pattern: hostping.Patterns = None,
    rounds: hostping.Rounds = 3,
    round_interval: hostping.RoundInterval = 30.0,
    host_prefix: hostping.HostPrefix = "sim",
) -> None:
    kind_s, scenario_s = value(kind), value(scenario)
    if hostping.hostping_source(kind_s, pattern, rounds, round_interval, host_prefix, seed, realtime, start_ns):
        return
    if inventory != "panel1" and not Path(inventory).is_file():
        raise typer.BadParameter(f"{inventory!r} is neither panel1 nor an inventory file", param_hint="'--inventory'")
    s = load()
    if kind_s == "sim":
        run_sim_source(s, scenario_s, inventory, seed, batches or None, realtime, start_ns or None)
    else:
        run_source(s, kind_s, hosts, rnics, seed, probes_per_batch, batches, realtime)


@commands.command("up")
def up(
    source: UpSource = typer.Option("auto", help="probe source: lab (netns fabric, root) | sim | synthetic; "
                                    "auto = lab where root and network namespaces work, else sim"),
    workers: int = typer.Option(0, min=0, max=64,
                                help="Faust worker processes in the consumer group (0 = one per core)"),
    duration: float = typer.Option(0, callback=positive_seconds,
                                   help="stop after this many seconds (0 = until Ctrl-C)"),
    alerts: bool = typer.Option(False, help="also start Alertmanager (infra/alertmanager) and the alert sink"),
    keep_kafka: bool = typer.Option(False, "--keep-kafka", help="leave a broker this run started running"),
) -> None:
    """Start (or reuse) Kafka, create topics, run the worker, the sink and the source; Ctrl-C stops all.
    Exit 0 after Ctrl-C or --duration; 1 when a child failed for good (5 restarts in 5 min) or another
    `up` uses this FABRICSCOPE_VAR or the lab."""
    s = load()
    if value(source) == "lab" and not lab_available():
        raise typer.BadParameter("the netns lab needs root and network namespaces; use --source sim",
                                 param_hint="'--source'")
    raise typer.Exit(run_up(s, value(source), workers, duration, alerts, keep_kafka))


@commands.command("query")
def query(
    sql: str = typer.Argument(..., help="SQL, or the name of a saved query (`fabricscope queries` lists them)"),
    as_json: bool = typer.Option(False, "--json", help="JSON lines for machines (every row)"),
    as_csv: bool = typer.Option(False, "--csv", help="CSV (every row)"),
    since: str = typer.Option(None, "--since", help="saved queries: how far back: 90d, 12h, '10 min', "
                              "-2h, or a time (2026-12-01T18:00:00Z)"),
    param: list[str] = typer.Option([], "--param", "-p", help="saved queries: NAME=VALUE, repeatable"),
    limit: int = typer.Option(DEFAULT_LIMIT, "--limit", min=1, help="table: show at most N rows"),
    show_all: bool = typer.Option(False, "--all", help="table: show every row"),
    vertical: bool = typer.Option(False, "--vertical", "-G", help="table: one field per line (like \\G)"),
    tz: str = tz_option(),
    ns: bool = typer.Option(False, "--ns", help="times as raw numbers (seconds or ns), as stored"),
) -> None:
    """Run SQL on the store: through the running sink if there is one, else directly. Table mode shows
    at most --limit rows and says how many there are; --csv and --json print every row."""
    from fabricscope.store_access import run_query, selected_origin
    from schemas.saved_queries import SavedQueryError, check_query_text, is_saved_query, render_named
    from schemas.saved_queries import load as load_saved
    from sinks.origin import OriginError

    if as_json and as_csv:
        raise typer.BadParameter("choose one of --json and --csv", param_hint="'--json'")
    values: dict[str, str] = {}
    for p in param:
        name, eq, val = p.partition("=")
        if not eq or not name:
            raise typer.BadParameter(f"{p!r}: write NAME=VALUE (e.g. -p rnic=A3)", param_hint="'-p'")
        values[name] = val
    if since is not None:
        values["since"] = str(typer_since(since, tz))
    s = load()
    try:
        check_query_text(sql)
        if is_saved_query(sql):
            if any(p.name == "origin" for p in load_saved(sql).params):
                asked = values.get("origin")
                values["origin"] = origin = selected_origin(s, asked)
                if asked is None:  # on stderr in every mode: an empty CSV must not look like "nothing happened"
                    why = "the running pipeline's" if origin else "no pipeline running: every origin"
                    console.print(f"origin {origin or 'all'} ({why}); -p origin=all|production|lab|sim|demo chooses",
                                  style="dim", highlight=False, soft_wrap=True)
            sql = render_named(sql, values)
        elif since is not None or param:
            raise SavedQueryError("--since and -p apply to saved queries only; `fabricscope queries` lists them")
        result = run_query(s, sql)
        types = {} if ns else column_types(lambda q: run_query(s, q), sql, result)
    except (SavedQueryError, OriginError) as err:
        console.print(f"fabricscope query: {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except Exception as err:
        console.print(f"[red]query failed:[/red] {err}")
        raise typer.Exit(1) from None
    mode = "json" if as_json else "csv" if as_csv else "table"
    try:
        print_result(result, mode, types, tz, ns, None if show_all else limit, vertical)
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        sys.stderr.close()
        raise typer.Exit(0) from None


def _serve_metrics(port: int) -> None:
    if port:
        from prometheus_client import start_http_server

        start_http_server(port, addr="127.0.0.1")


def run_sink(s: Settings) -> None:
    """The store writer process: migrate, serve queries, consume result topics until SIGTERM/SIGINT."""
    from schemas.probe_rows.retention import RetentionPolicy
    from sinks.clickhouse import migrate, open_store
    from sinks.kafka_sink import StoreWriter
    from sinks.origin import clear_running as clear_running_origin
    from sinks.origin import write_running as write_running_origin
    from sinks.query_endpoint import serve, stop_serving

    logging.basicConfig(level=logging.INFO, format="%(asctime)s sink %(levelname)s %(message)s")
    os.umask(0o077)  # the store's files, the token and the endpoint file: the owner's only
    store = open_store(s.store_path, s.clickhouse_dsn(), s.query_limits())
    migrate(store)
    if s.fabricscope_inventory:
        from schemas.inventory_yaml import load as load_inventory_file
        from sinks.history import load_inventory

        inv = load_inventory_file(s.fabricscope_inventory)
        n = load_inventory(store, ((r.id, r.host, r.tor) for r in inv.rnics.values()))
        logging.info("loaded %d RNICs (ToR names) from %s into rnic_inventory", n, s.fabricscope_inventory)
    server = serve(store, s.store_path, s.endpoint_limits()) if not s.clickhouse_dsn() else None
    stopping = stop_requested(signal.SIGTERM, signal.SIGINT)
    writer = StoreWriter(store, s.kafka_bootstrap, s.fabricscope_topic_prefix, kafka_config=s.kafka_client_config(),
                         block_rows=s.fabricscope_sink_block_rows, block_s=s.fabricscope_sink_block_s,
                         block_min_rows=s.fabricscope_sink_block_min_rows,
                         block_slow_max_s=s.fabricscope_sink_block_slow_max_s, origin=s.fabricscope_origin,
                         retention=RetentionPolicy.from_environ(os.environ))
    if server:  # `fabricscope query` in another shell shows this writer's origin by default
        write_running_origin(s.store_path, s.fabricscope_origin)
    try:
        writer.run(stopping)
    finally:
        if server:
            clear_running_origin(s.store_path)
        writer.close()
        if server:
            stop_serving(server, s.store_path)
        store.close()


def run_source(s: Settings, kind: str, hosts: int, rnics: int, seed: int, probes_per_batch: int,
               batches: int, realtime: bool) -> None:
    """Publish uploads of one source until stopped or ``batches`` uploads were sent."""
    from producers.kafka_producer import AgentProducer
    from producers.synthetic import synthetic_registry, synthetic_stream
    from schemas.arrow_nano import encode_columns
    from schemas.topics import PROBES_RAW, REGISTRY, topic_name

    if kind != "synthetic":
        raise typer.BadParameter(f"unknown source {kind!r}; available: synthetic", param_hint="KIND")
    producer = AgentProducer(s.kafka_bootstrap, kafka_config=s.kafka_producer_config())
    topic = topic_name(PROBES_RAW, s.fabricscope_topic_prefix)
    start = (time.time_ns() // 5_000_000_000) * 5_000_000_000
    # Register before probing: the registry topic may list only another source's RNICs (a lab run).
    reg = synthetic_registry(hosts, rnics, time.time_ns())
    for host in sorted(set(reg["host"])):
        mine = {k: [v for v, h in zip(col, reg["host"], strict=True) if h == host] for k, col in reg.items()}
        producer.publish(topic_name(REGISTRY, s.fabricscope_topic_prefix), encode_columns("registry.v1", mine),
                         "registry.v1", key=host)
    if producer.flush():
        raise RuntimeError(f"the registry did not reach {s.kafka_bootstrap}; not probing unregistered RNICs")
    stopping = stop_requested(signal.SIGTERM)
    for sent, (agent, payload) in enumerate(synthetic_stream(hosts, rnics, start, seed, probes_per_batch), 1):
        if stopping():
            break
        producer.publish(topic, payload, "probe.v1", key=agent)
        if batches and sent >= batches:
            break
        if realtime and sent % hosts == 0:
            time.sleep(5.0)
    producer.flush()


def load_inventory(spec: str):  # noqa: ANN201 - schemas.inventory.Inventory
    """``panel1`` or a path to an inventory YAML."""
    from producers.sim.fabrics import panel1
    from schemas.inventory_yaml import load

    return panel1() if spec == "panel1" else load(spec)


def run_sim_source(s: Settings, scenario: str, inventory_spec: str, seed: int, batches: int | None,
                   realtime: bool, start_ns: int | None) -> int:
    """Publish the simulator's uploads for ``scenario`` (faults drawn from ``seed``)."""
    from producers.kafka_producer import AgentProducer
    from producers.sim import Simulator
    from producers.sim.scenarios import scenario_faults
    from producers.sim_publish import publish_sim

    inv = load_inventory(inventory_spec)
    start = start_ns or (time.time_ns() // 5_000_000_000) * 5_000_000_000
    try:
        faults = scenario_faults(scenario, inv, seed, start)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--scenario") from None
    sim = Simulator(inv, seed=seed, faults=faults, inter_tor="even")
    producer = AgentProducer(s.kafka_bootstrap, kafka_config=s.kafka_producer_config())
    stopping = stop_requested(signal.SIGTERM)
    return publish_sim(sim, producer, s.fabricscope_topic_prefix, start, batches, realtime, stopping)


def run_up(s: Settings, source: str, workers: int, duration: float, alerts: bool = False,
           keep_kafka: bool = False) -> int:
    """See :func:`fabricscope.up.run_up`."""
    from fabricscope.up import run_up as _run_up

    return _run_up(s, source, workers, duration, alerts, keep_kafka)
