"""``fabricscope kafka start|stop|status``: the local Apache Kafka broker (``infra/kafka``)."""

from __future__ import annotations

import typer

from fabricscope.local_services import kafka_script
from fabricscope.settings import load

kafka_app = typer.Typer(name="kafka", help="The local Apache Kafka broker (KRaft, 127.0.0.1, data under ./var/kafka).")


@kafka_app.command("start")
def kafka_start() -> None:
    """Install (Maven Central) and start the local broker; reuse one that already runs."""
    raise typer.Exit(kafka_script("start", load()))


@kafka_app.command("stop")
def kafka_stop() -> None:
    """Stop the local broker."""
    raise typer.Exit(kafka_script("stop", load()))


@kafka_app.command("status")
def kafka_status() -> None:
    """Say whether the local broker answers."""
    raise typer.Exit(kafka_script("status", load()))
