"""Pipeline commands: kafka, topics, worker, sink, source, up, query."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import typer
from rich.console import Console
from rich.table import Table

from fabricscope.settings import Settings, load

console = Console(stderr=True)
REPO_ROOT = Path(__file__).resolve().parents[1]
KAFKA_SH = REPO_ROOT / "infra" / "kafka" / "kafka.sh"


def _kafka(action: str, settings: Settings) -> int:
    env = {**os.environ, "FABRICSCOPE_VAR": str(settings.fabricscope_var.resolve())}
    return subprocess.call(["bash", str(KAFKA_SH), action], env=env)


def register(app: typer.Typer) -> None:
    """Add the pipeline commands to ``app``."""
    kafka_app = typer.Typer(help="The local Apache Kafka broker (KRaft, 127.0.0.1, data under ./var/kafka).")
    app.add_typer(kafka_app, name="kafka")

    @kafka_app.command("start")
    def kafka_start() -> None:
        """Install (Maven Central) and start the local broker; reuse one that already runs."""
        raise typer.Exit(_kafka("start", load()))

    @kafka_app.command("stop")
    def kafka_stop() -> None:
        """Stop the local broker."""
        raise typer.Exit(_kafka("stop", load()))

    @kafka_app.command("status")
    def kafka_status() -> None:
        """Say whether the local broker answers."""
        raise typer.Exit(_kafka("status", load()))

    @app.command("topics")
    def topics(prefix: str = typer.Option(None, help="topic name prefix (default FABRICSCOPE_TOPIC_PREFIX)")) -> None:
        """Create every topic of the pipeline with its partitions and retention (idempotent)."""
        from fabricscope.kafka_admin import create_topics

        s = load()
        for name, state in sorted(create_topics(s.kafka_bootstrap, prefix if prefix is not None
                                                 else s.fabricscope_topic_prefix, s.kafka_client_config()).items()):
            console.print(f"{name}: {state}")

    @app.command("worker")
    def worker(loglevel: str = "warn",
               metrics_port: int = typer.Option(0, help="serve Prometheus metrics on 127.0.0.1:PORT (0 = off)"),
               ) -> None:
        """Run one Faust stream worker (RTT decomposition, window partials, the reducer, Hostping).
        Start more for more partitions."""
        s = load()
        from streams.runtime.config import RuntimeConfig
        from streams.runtime.worker import run_worker

        try:
            config = RuntimeConfig.from_env(s.kafka_bootstrap, s.fabricscope_topic_prefix, s.kafka_client_config(),
                                            os.environ.get("FABRICSCOPE_VAR", "var"))
        except ValueError as e:
            typer.echo(f"fabricscope: {e}", err=True)
            raise typer.Exit(2) from None
        _serve_metrics(metrics_port)
        run_worker(config, loglevel)

    @app.command("sink")
    def sink(metrics_port: int = typer.Option(0, help="serve Prometheus metrics on 127.0.0.1:PORT (0 = off)")
             ) -> None:
        """Write result topics into ClickHouse (embedded chdb by default) and serve local queries."""
        _serve_metrics(metrics_port)
        run_sink(load())

    @app.command("source")
    def source(
        kind: str = typer.Argument("sim", help="sim (Clos fabric model with faults) | synthetic (minimal prober)"),
        scenario: str = typer.Option("healthy", help="sim: the fault scenario (see `fabricscope sim --help`)"),
        inventory: str = typer.Option("panel1", help="sim: an inventory YAML, or panel1"),
        hosts: int = typer.Option(4, help="synthetic: hosts"),
        rnics: int = typer.Option(2, help="synthetic: RNICs per host"),
        seed: int = 1,
        probes_per_batch: int = typer.Option(100, help="synthetic: probes per upload"),
        batches: int = typer.Option(0, help="stop after this many 5 s uploads (0 = run until stopped)"),
        realtime: bool = typer.Option(True, help="pace uploads every 5 s of wall time"),
        start_ns: int = typer.Option(0, help="event time of the first upload (0 = now, aligned to 5 s)"),
    ) -> None:
        """Publish agent uploads from a source: probes.raw, paths.traced, registry."""
        s = load()
        if kind == "sim":
            run_sim_source(s, scenario, inventory, seed, batches or None, realtime, start_ns or None)
        else:
            run_source(s, kind, hosts, rnics, seed, probes_per_batch, batches, realtime)

    @app.command("up")
    def up(
        source: str = typer.Option("auto", help="probe source: lab (netns fabric, root) | sim | synthetic; "
                                    "auto = lab where root and network namespaces work, else sim"),
        workers: int = typer.Option(1, help="Faust workers in the consumer group"),
        duration: float = typer.Option(0, help="stop after this many seconds (0 = until Ctrl-C)"),
        alerts: bool = typer.Option(False, help="also start Alertmanager (infra/alertmanager) and the alert sink"),
    ) -> None:
        """Start (or reuse) Kafka, create topics, run the worker, the sink and the source; Ctrl-C stops all."""
        run_up(load(), source, workers, duration, alerts)

    @app.command("query")
    def query(
        sql: str = typer.Argument(..., help="SQL, or the name of a saved query (`fabricscope queries` lists them)"),
        as_json: bool = typer.Option(False, "--json", help="JSON lines for machines"),
        as_csv: bool = typer.Option(False, "--csv", help="CSV"),
        since: str = typer.Option(None, "--since", help="saved queries: how far back, e.g. 90d, 12h"),
        param: list[str] = typer.Option([], "--param", "-p", help="saved queries: NAME=VALUE, repeatable"),
    ) -> None:
        """Run SQL on the store: through the running sink if there is one, else directly."""
        from fabricscope.store_access import run_query
        from schemas.saved_queries import SavedQueryError, is_saved_query, render_named

        try:
            if is_saved_query(sql):
                values = dict(p.split("=", 1) if "=" in p else (p, "") for p in param)
                if since is not None:
                    values["since"] = since
                sql = render_named(sql, values)
            elif since is not None or param:
                raise SavedQueryError("--since and -p apply to saved queries only; `fabricscope queries` lists them")
            result = run_query(load(), sql)
        except Exception as err:
            console.print(f"[red]query failed:[/red] {err}")
            raise typer.Exit(1) from None
        print_table(result, as_json, as_csv)


def _serve_metrics(port: int) -> None:
    if port:
        from prometheus_client import start_http_server

        start_http_server(port, addr="127.0.0.1")


def print_table(result: pa.Table, as_json: bool = False, as_csv: bool = False) -> None:
    """Print a result table as a rich table, JSON lines or CSV on stdout."""
    if as_json:
        for row in result.to_pylist():
            print(json.dumps(row, default=str))
        return
    if as_csv:
        import pyarrow.csv as pacsv

        sink = pa.BufferOutputStream()
        pacsv.write_csv(result, sink)
        sys.stdout.write(sink.getvalue().to_pybytes().decode())
        return
    t = Table(*result.column_names)
    for row in result.to_pylist():
        t.add_row(*(str(v) for v in row.values()))
    Console().print(t)


def run_sink(s: Settings) -> None:
    """The store writer process: migrate, serve queries, consume result topics until SIGTERM/SIGINT."""
    from sinks.clickhouse import migrate, open_store
    from sinks.kafka_sink import StoreWriter
    from sinks.query_endpoint import serve, stop_serving

    logging.basicConfig(level=logging.INFO, format="%(asctime)s sink %(levelname)s %(message)s")
    os.umask(0o077)  # the store's files, the token and the endpoint file: the owner's only
    store = open_store(s.store_path, s.clickhouse_dsn(), s.query_limits())
    migrate(store)
    server = serve(store, s.store_path) if not s.clickhouse_dsn() else None
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    writer = StoreWriter(store, s.kafka_bootstrap, s.fabricscope_topic_prefix, kafka_config=s.kafka_client_config())
    try:
        writer.run(lambda: stopping)
    finally:
        writer.close()
        if server:
            stop_serving(server, s.store_path)
        store.close()


def run_source(s: Settings, kind: str, hosts: int, rnics: int, seed: int, probes_per_batch: int,
               batches: int, realtime: bool) -> None:
    """Publish uploads of one source until stopped or ``batches`` uploads were sent."""
    from producers.kafka_producer import AgentProducer
    from producers.synthetic import synthetic_stream
    from schemas.topics import PROBES_RAW, topic_name

    if kind != "synthetic":
        raise typer.BadParameter(f"unknown source {kind!r}; available: synthetic", param_hint="KIND")
    producer = AgentProducer(s.kafka_bootstrap, kafka_config=s.kafka_client_config())
    topic = topic_name(PROBES_RAW, s.fabricscope_topic_prefix)
    start = (time.time_ns() // 5_000_000_000) * 5_000_000_000
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    for sent, (agent, payload) in enumerate(synthetic_stream(hosts, rnics, start, seed, probes_per_batch), 1):
        if stopping:
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
    producer = AgentProducer(s.kafka_bootstrap, kafka_config=s.kafka_client_config())
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    return publish_sim(sim, producer, s.fabricscope_topic_prefix, start, batches, realtime, lambda: stopping)


def lab_available() -> bool:
    """Root and working network namespaces: what the netns fabric lab needs."""
    if os.geteuid() != 0:
        return False
    return subprocess.run(["ip", "netns", "list"], capture_output=True).returncode == 0


def run_up(s: Settings, source: str, workers: int, duration: float, alerts: bool = False) -> None:
    """Start everything as child processes, show rows arriving, stop all on Ctrl-C or after ``duration``."""
    from fabricscope.kafka_admin import create_topics
    from sinks.query_endpoint import find_endpoint, query_remote

    # A remote cluster (KAFKA_BOOTSTRAP elsewhere) is used as it is; the local one is started or reused.
    if s.kafka_bootstrap.startswith("127.0.0.1") and _kafka("start", s) != 0:
        raise typer.Exit(1)
    create_topics(s.kafka_bootstrap, s.fabricscope_topic_prefix, s.kafka_client_config())
    if source == "auto":
        source = "lab" if lab_available() else "sim"
    exe = [sys.executable, "-m", "fabricscope.cli"]
    children = [subprocess.Popen([*exe, "sink"])]
    children += [subprocess.Popen([*exe, "worker"]) for _ in range(workers)]
    if alerts:
        if subprocess.call([*exe, "alertmanager", "start"]) != 0:
            raise typer.Exit(1)
        children.append(subprocess.Popen([*exe, "alerts"]))
    lab = None
    if source == "lab":
        from fabricscope.cmd_lab import start_lab_source

        lab = start_lab_source(s.kafka_bootstrap, s.fabricscope_topic_prefix,
                               directory=s.fabricscope_var / "lab", kafka_config=s.kafka_client_config() or None)
    else:
        children.append(subprocess.Popen([*exe, "source", source]))
    # Hostping on this host: inventory, topology and the 1 s monitor; loopback only where there is an RNIC.
    children.append(subprocess.Popen([*exe, "hostping", "agent"]))
    console.print(f"[green]fabricscope up[/green]: source={source}, workers={workers}; Ctrl-C stops"
                  + ("; inject faults with `fabricscope lab fault ...`" if lab else ""))
    t0 = time.time()
    try:
        with console.status("waiting for rows…") as status:
            while not duration or time.time() - t0 < duration:
                time.sleep(2)
                # Only through the sink: opening the embedded store here would take its lock.
                url = find_endpoint(s.store_path)
                try:
                    n = query_remote(url, "SELECT count() AS n, countIf(status='timeout') AS timeouts FROM probes")
                    row = n.to_pylist()[0]
                    v = query_remote(url, "SELECT count() AS n FROM verdicts")["n"][0].as_py()
                    status.update(f"{int(time.time() - t0)} s: {row['n']} probe rows in the store, "
                                  f"{row['timeouts']} timeouts, {v} verdicts")
                except Exception:
                    pass
                if any(c.poll() is not None for c in children):
                    console.print("[red]a child process exited; stopping[/red]")
                    break
    except KeyboardInterrupt:
        pass
    finally:
        if lab is not None:
            lab.stop()
        for c in reversed(children):
            if c.poll() is None:
                c.send_signal(signal.SIGTERM)
        for c in children:
            try:
                c.wait(timeout=20)
            except subprocess.TimeoutExpired:
                c.kill()
        console.print("stopped")
