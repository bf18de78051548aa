"""Benchmark commands: they print figures; they are not timed tests."""

from __future__ import annotations

import typer

from fabricscope.settings import load


def register(app: typer.Typer) -> None:
    """Add `fabricscope bench ...` to ``app``."""
    bench = typer.Typer(help="Benchmarks that print figures (see BENCHMARKS.md).")
    app.add_typer(bench, name="bench")

    @bench.command("throughput")
    def throughput(
        rows: int = typer.Option(1_000_000, help="probe rows in all"),
        batch_rows: int = typer.Option(20_000, help="rows per Kafka message (one agent upload)"),
        seed: int = 7,
    ) -> None:
        """Same batches through a bare consumer, the Faust pipeline into chdb, and a bare chdb insert."""
        from fabricscope import bench_throughput

        s = load()
        print(bench_throughput.report(bench_throughput.run(s.kafka_bootstrap, rows, batch_rows, seed)))
