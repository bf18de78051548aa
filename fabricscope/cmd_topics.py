"""`fabricscope topics --describe`: the pipeline's topics on the cluster, existing against expected."""

from __future__ import annotations

import json

from confluent_kafka import KafkaException
from rich.console import Console
from rich.table import Table

from fabricscope.kafka_admin import TopicState, describe_topics
from fabricscope.settings import Settings


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
    err_console = Console(stderr=True)
    try:
        brokers, states = describe_topics(s.kafka_bootstrap, prefix, s.kafka_client_config(),
                                          replication=s.kafka_replication_factor,
                                          min_insync=s.kafka_min_insync_replicas)
    except (ValueError, KafkaException) as err:
        err_console.print(f"[red]topics --describe:[/red] {err}")
        return 2
    if as_json:
        print(json.dumps({"brokers": brokers, "topics": [t.as_dict() for t in states]}, indent=2))
    else:
        Console().print(topics_table(brokers, states))
    return 0 if all(not t.differences for t in states) else 1
