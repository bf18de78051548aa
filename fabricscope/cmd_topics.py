"""``fabricscope topics``: create the pipeline's topics, or with ``--describe`` compare those on the cluster
with the expected ones."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from fabricscope.settings import Settings, load

if TYPE_CHECKING:
    from fabricscope.kafka_admin import TopicState

# confluent_kafka and the topic admin load when the command runs, so `fabricscope --help` stays fast.
console = Console(stderr=True)


def _cell(have: object, want: object) -> str:
    if want is None:
        return "-" if have is None else str(have)
    if have == want:
        return str(have)
    return f"[red]{'-' if have is None else have}[/red] (want {want})"


def _days(ms: str | None) -> str | None:
    return None if ms is None else f"{int(ms) / 86_400_000:g} d"


def topics_table(brokers: int, states: list[TopicState]) -> Table:
    """A rich table: one row per topic, each cell ``have`` or ``have (want N)`` in red where it differs."""
    table = Table(title=f"topics on a cluster of {brokers} broker(s)")
    for col in ("topic", "partitions", "replication", "min ISR", "retention", "leaders (broker: n)", "state"):
        table.add_column(col)
    for s in states:
        leaders = ", ".join(f"{b}: {n}" for b, n in sorted((s.leaders or {}).items()))
        diff = s.differences
        table.add_row(s.topic, _cell(s.partitions, s.want_partitions), _cell(s.replication, s.want_replication),
                      _cell(s.min_insync, s.want_min_insync),
                      _cell(_days(s.retention_ms), _days(s.want_retention_ms)), leaders,
                      "[green]ok[/green]" if not diff else f"[red]{'; '.join(diff)}[/red]")
    return table


def describe_command(s: Settings, prefix: str, as_json: bool) -> int:
    """Print the comparison (a table, or JSON with ``--json``); returns the exit code: 0 all as expected,
    1 some topic differs or is missing, 2 the settings do not fit the cluster or it did not answer."""
    from confluent_kafka import KafkaException

    from fabricscope.kafka_admin import describe_topics

    try:
        brokers, states = describe_topics(s.kafka_bootstrap, prefix, s.kafka_client_config(),
                                          replication=s.kafka_replication_factor,
                                          min_insync=s.kafka_min_insync_replicas)
    except (ValueError, KafkaException) as err:
        console.print(f"[red]topics --describe:[/red] {err}")
        return 2
    if as_json:
        print(json.dumps({"brokers": brokers, "topics": [t.as_dict() for t in states]}, indent=2))
    else:
        Console().print(topics_table(brokers, states))
    return 0 if all(not t.differences for t in states) else 1


commands = typer.Typer()
"""The top-level commands of this module (`fabricscope <command>`)."""


@commands.command("topics")
def topics(
    prefix: str = typer.Option(None, help="topic name prefix (default FABRICSCOPE_TOPIC_PREFIX)"),
    describe: bool = typer.Option(False, "--describe", help="compare existing topics with the expected ones; "
                                  "creates nothing; exit 1 if any differs"),
    as_json: bool = typer.Option(False, "--json", help="with --describe: JSON for machines"),
) -> None:
    """Create every topic of the pipeline with its partitions, replication (KAFKA_REPLICATION_FACTOR,
    default min(3, brokers)), min.insync.replicas and retention (idempotent)."""
    from fabricscope.kafka_admin import create_topics

    s = load()
    pre = prefix if prefix is not None else s.fabricscope_topic_prefix
    if describe:
        raise typer.Exit(describe_command(s, pre, as_json))
    try:
        created = create_topics(s.kafka_bootstrap, pre, s.kafka_client_config(),
                                replication=s.kafka_replication_factor, min_insync=s.kafka_min_insync_replicas)
    except ValueError as err:
        console.print(f"[red]topics:[/red] {err}")
        raise typer.Exit(2) from None
    for name, state in sorted(created.items()):
        console.print(f"{name}: {state}")
