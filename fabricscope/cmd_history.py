"""History and chatops commands: saved queries, operator feedback, inventory for ToR rollups, reports,
the local Alertmanager and the alert sink."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fabricscope.settings import load
from fabricscope.stopping import stop_requested
from fabricscope.times import NS, format_span, typer_since, tz_option

console = Console(stderr=True)


def _feedback(verdict_id: str, decision: str, note: str, operator: str) -> None:
    from fabricscope.store_access import record_feedback

    try:
        record_feedback(load(), verdict_id, decision, note, operator)
    except Exception as err:
        console.print(f"[red]feedback not recorded:[/red] {err}")
        raise typer.Exit(1) from None
    console.print(f"verdict {verdict_id}: {decision}ed")


commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""

ALERTMANAGER_SH = Path(__file__).resolve().parents[1] / "infra" / "alertmanager" / "alertmanager.sh"
alertmanager_app = typer.Typer(
    name="alertmanager", help="The local Prometheus Alertmanager (127.0.0.1:9193, data under ./var/alertmanager)."
)


def _am(action: str) -> int:
    env = {**os.environ, "FABRICSCOPE_VAR": str(load().fabricscope_var.resolve())}
    return subprocess.call(["bash", str(ALERTMANAGER_SH), action], env=env)


@alertmanager_app.command("start")
def am_start() -> None:
    """Render alertmanager.yml with receiver URLs from the environment and start Alertmanager."""
    raise typer.Exit(_am("start"))


@alertmanager_app.command("stop")
def am_stop() -> None:
    """Stop the local Alertmanager."""
    raise typer.Exit(_am("stop"))


@alertmanager_app.command("status")
def am_status() -> None:
    """Say whether the local Alertmanager answers."""
    raise typer.Exit(_am("status"))


@commands.command("alerts")
def alerts(
    alertmanager_url: str = typer.Option("http://127.0.0.1:9193", envvar="ALERTMANAGER_URL",
                                         help="Alertmanager base URL"),
    cluster: str = typer.Option("default", envvar="FABRICSCOPE_CLUSTER", help="the cluster label"),
    clear_windows: int = typer.Option(3, min=1, help="windows a problem must be absent before it resolves"),
    resend: float = typer.Option(30.0, help="re-push firing alerts every this many seconds"),
    idle_advance: bool = typer.Option(True, help="advance time by the wall clock while no verdicts arrive"),
    metrics_port: int = typer.Option(0, help="serve Prometheus metrics on 127.0.0.1:PORT (0 = off)"),
) -> None:
    """Chatops: consume verdicts, apply hysteresis, push alerts to Alertmanager until SIGTERM/SIGINT."""
    import logging
    import signal

    from sinks.alerts import AlertmanagerClient, AlertSink, Hysteresis

    logging.basicConfig(level=logging.INFO, format="%(asctime)s alerts %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if metrics_port:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr="127.0.0.1")
    s = load()
    stopping = stop_requested(signal.SIGTERM, signal.SIGINT)
    sink = AlertSink(s.kafka_bootstrap, AlertmanagerClient(alertmanager_url), Hysteresis(cluster, clear_windows),
                     s.fabricscope_topic_prefix, resend_s=resend, idle_advance=idle_advance,
                     kafka_config=s.kafka_client_config(), origin=s.fabricscope_origin,
                     alert_origins=s.alert_origins())
    try:
        sink.run(stopping)
    finally:
        sink.close()


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

verdict_app = typer.Typer(
    name="verdict", help="Operator feedback on verdicts; `fabricscope query precision` sums it up."
)


@verdict_app.command("confirm")
def confirm(verdict_id: str, note: str = typer.Option("", help="what you found"),
            operator: str = typer.Option("", help="who decided")) -> None:
    """Record that verdict ID was right: the fault was real and where it said."""
    _feedback(verdict_id, "confirm", note, operator)


@verdict_app.command("reject")
def reject(verdict_id: str, note: str = typer.Option("", help="what you found"),
           operator: str = typer.Option("", help="who decided")) -> None:
    """Record that verdict ID was wrong."""
    _feedback(verdict_id, "reject", note, operator)

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

report_app = typer.Typer(name="report", help="Reports over the history.")


@report_app.command("tail-rtt")
def tail_rtt(since: str = typer.Option("30d", help="how far back: 30d, 1h, '10 min', -2h or a time "
                                       "(2026-12-01T18:00:00Z)"),
             out: Path = typer.Option(Path("report"), help="directory for PNGs and CSVs"),
             tz: str = tz_option()) -> None:
    """Tail-RTT capacity study: P50/P99/P999 and loss per pinglist over time, ToR x ToR heatmaps, CSVs, summary."""
    from fabricscope.report_tail_rtt import tail_rtt_report
    from fabricscope.store_access import run_query

    seconds = typer_since(since, tz)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".fabricscope-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise typer.BadParameter(f"cannot write into {str(out)!r}: {e.strerror or e}", param_hint="'--out'") from None
    s = load()
    try:
        with console.status("querying the history and drawing…"):
            result = tail_rtt_report(lambda sql: run_query(s, sql), str(seconds), out, tz=tz)
    except OSError as e:
        console.print(f"[red]report not written:[/red] {e}", highlight=False)
        raise typer.Exit(1) from None
    except Exception as err:
        console.print(f"[red]report failed:[/red] {err}", highlight=False)
        raise typer.Exit(1) from None
    summary = result["summary"]
    t = Table("pinglist", "probes", "timeouts", "loss", "P50 µs", "P99 µs", "P999 µs",
              title=f"network RTT, last {format_span(seconds * NS)}")
    for r in summary.to_pylist():
        t.add_row(r["pinglist"], f"{r['probes']:,}", f"{r['timeouts']:,}", f"{r['loss']:.4%}",
                  *(f"{(r[c] or 0) / 1000:.1f}" for c in ("p50_ns", "p99_ns", "p999_ns")))
    Console().print(t)
    for f in result["files"]:
        console.print(f"wrote {f}")
