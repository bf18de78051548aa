"""``fabricscope report ...``: reports over the history (``tail-rtt``, drawn by
:mod:`fabricscope.report_tail_rtt`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fabricscope.settings import load
from fabricscope.times import NS, format_span, typer_since, tz_option

console = Console(stderr=True)
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
