"""Alerting: ``fabricscope alerts`` (the alert sink: verdicts to Alertmanager, with hysteresis) and
``fabricscope alertmanager start|stop|status`` (the local Prometheus Alertmanager it pushes to)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import typer

from fabricscope.settings import load
from fabricscope.stopping import stop_requested

commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""


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
