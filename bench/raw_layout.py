"""`fabricscope bench raw-layout`: the raw ``probes`` table's merges, CPU and query times per layout.

A store writer that runs for months inserts blocks of up to 1,000,000 rows (:data:`sinks.blocks.BLOCK_ROWS`)
and the engine merges its parts again and again; the block size and the layout (sort key, codecs,
partitioning, merge settings) decide what each row costs after its insert. Per layout, in a fresh embedded
store of its own (a child process, so its background merge threads are counted alone):

- ``rows`` simulated ``probe_enriched.v1`` rows (the worker step's output on a 1,024-RNIC fabric, as
  :mod:`bench.storage` makes them) are inserted in ``block_rows`` blocks under a dedup token each, as the
  writer inserts them; each block is the base block shifted on in time, so the day fills as it would;
- the run waits until no merge runs and the part count holds for 3 s (the engine's own settling, not a
  fixed sleep);
- it reports the process's CPU (user + system, insert and merge threads together) per row, the rows merged
  per inserted row (``MergedRows`` from ``system.events``), parts left, bytes on disk per row, and the
  fastest of :data:`QUERY_RUNS` wall times of each documented query that reads raw ``probes`` (the
  fastest, not the median: on a shared machine the median of a 10 ms query moves 3x with the load, the
  fastest is the query's own cost).

The layouts compared live in :data:`LAYOUTS`; ``shipped`` is the table the migrations leave, every other
layout is the ``CREATE TABLE`` of ``schemas/ddl/001_probes.sql`` with text swaps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from sinks.clickhouse import Store

#: The codec lines of the shipped DDL and what the LZ4 layouts put in their place (fresh parts in LZ4;
#: ``TTL ... RECOMPRESS`` moves parts a day old to ZSTD at the merge that TTL triggers).
_ZSTD_TO_LZ4 = (("CODEC(Delta, ZSTD)", "CODEC(Delta, LZ4)"), ("CODEC(T64, ZSTD)", "CODEC(T64, LZ4)"),
                ("batch_id            String CODEC(ZSTD)", "batch_id            String CODEC(LZ4)"))
_KEY = "ORDER BY (pinglist, prober_rnic, responder_rnic, event_time)"
_SETTINGS = "SETTINGS non_replicated_deduplication_window = 10000"
_TTL = "TTL toDateTime(event_time) + INTERVAL 14 DAY"


@dataclass(frozen=True)
class Layout:
    """One candidate: text substitutions applied to the shipped ``probes`` DDL (old, new)."""

    name: str
    swaps: tuple[tuple[str, str], ...]
    what: str


LAYOUTS: dict[str, Layout] = {
    "shipped": Layout("shipped", (), "schemas/ddl as migrated"),
    "lz4": Layout("lz4", _ZSTD_TO_LZ4, "LZ4 codecs instead of ZSTD"),
    "lz4-recompress": Layout("lz4-recompress", (*_ZSTD_TO_LZ4, (
        _TTL, "TTL toDateTime(event_time) + INTERVAL 1 DAY RECOMPRESS CODEC(ZSTD(1)), "
              "toDateTime(event_time) + INTERVAL 14 DAY DELETE")), "LZ4, then ZSTD(1) a day on"),
    "lz4-base-8": Layout("lz4-base-8", (*_ZSTD_TO_LZ4, (_SETTINGS, _SETTINGS + ", merge_selector_base = 8")),
                         "LZ4 codecs and merge_selector_base 8"),
    "base-8": Layout("base-8", ((_SETTINGS, _SETTINGS + ", merge_selector_base = 8"),),
                     "ZSTD codecs and merge_selector_base 8"),
    "base-20": Layout("base-20", ((_SETTINGS, _SETTINGS + ", merge_selector_base = 20"),),
                      "merge_selector_base 20 (default 5)"),
    "lz4-base-10": Layout("lz4-base-10", (*_ZSTD_TO_LZ4, (_SETTINGS, _SETTINGS + ", merge_selector_base = 10")),
                          "LZ4 codecs and merge_selector_base 10"),
    "hour-partition": Layout("hour-partition", (("PARTITION BY toDate(event_time)",
                                                 "PARTITION BY toStartOfHour(event_time)"),),
                             "parts by hour: a part merges only within its hour"),
    "time-key": Layout("time-key", ((_KEY, "ORDER BY (pinglist, toStartOfHour(event_time), prober_rnic, "
                                           "responder_rnic, event_time)"),), "hour second in the sort key"),
}

#: Reads of raw probes beside the saved query ``rtt_service_hourly``: the scans the sort key is for.
QUERIES: dict[str, str] = {
    "pair_over_time": ("SELECT toStartOfMinute(event_time) AS m, count(), quantile(0.99)(network_rtt_ns) "
                       "FROM probes WHERE pinglist = 'tor_mesh' AND prober_rnic = '{a}' AND responder_rnic = '{b}' "
                       "GROUP BY m ORDER BY m"),
    "one_pinglist": ("SELECT prober_rnic, countIf(status = 'timeout') AS t, count() FROM probes "
                     "WHERE pinglist = 'inter_tor' GROUP BY prober_rnic ORDER BY t DESC LIMIT 20"),
    "window_scan": ("SELECT prober_rnic, responder_rnic, count() FROM probes WHERE event_time >= "
                    "(SELECT max(event_time) FROM probes) - INTERVAL 20 SECOND GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 20"),
}


QUERY_RUNS = 15  # per query; the fastest is reported


@dataclass
class LayoutResult:
    """One layout's figures: CPU µs per row, rows merged per row, parts, bytes per row, query wall and CPU ms."""

    layout: str
    rows: int
    cpu_us_per_row: float
    insert_wall_s: float
    settle_wall_s: float
    merged_rows_per_row: float
    parts: int
    bytes_per_row: float
    query_ms: dict[str, float]
    #: CPU of the process (every engine thread) per query, the least of :data:`QUERY_RUNS`: what a query
    #: costs whatever else the machine runs (merges have settled before the queries start)
    query_cpu_ms: dict[str, float] = field(default_factory=dict)


def shipped_ddl() -> str:
    """The ``probes`` CREATE TABLE statement as ``schemas/ddl/001_probes.sql`` ships it (comments dropped)."""
    from schemas.migrations import migrations

    m = next(m for m in migrations() if m.name == "001_probes.sql")
    return m.statements[0]


def layout_ddl(layout: Layout) -> str:
    """The ``probes`` DDL of ``layout``.

    Raises:
        ValueError: a substitution no longer matches the shipped DDL (the layout is stale).
    """
    ddl = shipped_ddl()
    for old, new in layout.swaps:
        if old not in ddl:
            raise ValueError(f"layout {layout.name}: {old!r} is not in schemas/ddl/001_probes.sql")
        ddl = ddl.replace(old, new)
    return ddl


def base_block(rows: int) -> pa.Table:
    """``rows`` ``probe_enriched.v1`` rows as the store writer stores them (retention ``full``), now-dated."""
    from bench.storage import simulated_uploads, writer_rows
    from schemas.probe_rows.retention import RetentionPolicy

    _, msgs, _ = simulated_uploads(rows)
    return writer_rows(msgs, RetentionPolicy())[0].combine_chunks()


def _shift(t: pa.Table, by_ns: int) -> pa.Table:
    from bench.storage import shift_columns

    return shift_columns(t, ("upload_ns", "t1", "t2", "t3", "t4", "t5", "t6"), by_ns)


def run_one(name: str, rows: int, block_rows: int, settle_timeout_s: float = 600.0) -> LayoutResult:
    """Measure layout ``name`` in this process (call it in a fresh process: see :func:`run`).

    Raises:
        KeyError: ``name`` is not in :data:`LAYOUTS`.
        TimeoutError: merges did not settle within ``settle_timeout_s``.
    """
    import os

    import pyarrow.compute as pc

    from schemas.saved_queries import render_named
    from sinks.clickhouse import ChdbStore, migrate

    layout = LAYOUTS[name]
    base = base_block(block_rows)
    span = int(pc.max(base["t1"]).as_py() - pc.min(base["t1"]).as_py()) + 1
    blocks = -(-rows // block_rows)
    # The first block starts far enough back that the last one still ends before now (the TTL and the
    # queries' "since" both count from now).
    base = _shift(base, -blocks * span)
    with tempfile.TemporaryDirectory() as d:
        store = ChdbStore(Path(d) / "ch")
        migrate(store)
        if name != "shipped":
            store.command("DROP TABLE probes SYNC")
            store.command(layout_ddl(layout))
        merged0 = _event(store, "MergedRows")
        cpu0, wall0 = os.times(), time.monotonic()
        for k in range(blocks):
            store.insert_arrow("probes", _shift(base, k * span), dedup_token=f"bench-{k}")
        wall1 = time.monotonic()
        _settle(store, settle_timeout_s)
        wall2 = time.monotonic()
        cpu1 = os.times()
        cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        stored = blocks * base.num_rows
        merged = _event(store, "MergedRows") - merged0
        part = store.query_arrow("SELECT count() AS n, sum(bytes_on_disk) AS b FROM system.parts WHERE active "
                                 "AND database = currentDatabase() AND table = 'probes'").to_pylist()[0]
        pair = store.query_arrow("SELECT prober_rnic AS a, responder_rnic AS b FROM probes WHERE pinglist = "
                                 "'tor_mesh' LIMIT 1").to_pylist()
        a, b = (pair[0]["a"], pair[0]["b"]) if pair else ("", "")
        texts = {"rtt_service_hourly": render_named("rtt_service_hourly", {"since": "86400", "step": "3600"}),
                 **QUERIES}
        qms: dict[str, float] = {}
        qcpu: dict[str, float] = {}
        for q, sql in texts.items():
            sql = sql.replace("{a}", a).replace("{b}", b) if q == "pair_over_time" else sql
            times, cpus = [], []
            for _ in range(QUERY_RUNS):
                c0, t0 = time.process_time_ns(), time.perf_counter_ns()  # ns clocks: os.times ticks at 10 ms
                store.query_arrow(sql)
                c1, t1 = time.process_time_ns(), time.perf_counter_ns()
                times.append((t1 - t0) / 1e6)
                cpus.append((c1 - c0) / 1e6)
            qms[q], qcpu[q] = min(times), min(cpus)
        store.close()
    return LayoutResult(name, stored, cpu_s / stored * 1e6, wall1 - wall0, wall2 - wall1, merged / stored,
                        int(part["n"]), int(part["b"]) / stored, qms, qcpu)


def _event(store: Store, name: str) -> int:
    got = store.query_arrow(f"SELECT value FROM system.events WHERE event = '{name}'")["value"].to_pylist()
    return int(got[0]) if got else 0


def _settle(store: Store, timeout_s: float) -> None:
    """Wait until no merge runs and the active part count holds for 3 s (polled each 0.5 s)."""
    deadline = time.monotonic() + timeout_s
    last, still_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        row = store.query_arrow(
            "SELECT (SELECT count() FROM system.merges) AS m, (SELECT count() FROM system.parts WHERE active AND "
            "database = currentDatabase() AND table = 'probes') AS p").to_pylist()[0]
        now = time.monotonic()
        if row["m"] or row["p"] != last:
            last, still_since = int(row["p"]), now
        elif now - still_since >= 3.0:
            return
        time.sleep(0.5)
    raise TimeoutError(f"merges of probes still running after {timeout_s:.0f} s")


def run(layouts: list[str], rows: int, block_rows: int) -> list[LayoutResult]:
    """Each layout in a child process of its own, one after another.

    Raises:
        ValueError: an unknown layout name.
        RuntimeError: a child failed (its stderr is in the message).
    """
    unknown = [n for n in layouts if n not in LAYOUTS]
    if unknown:
        raise ValueError(f"unknown layout(s) {', '.join(unknown)}; known: {', '.join(LAYOUTS)}")
    out = []
    for name in layouts:
        p = subprocess.run([sys.executable, "-m", "bench.raw_layout", name, str(rows), str(block_rows)],
                           capture_output=True, text=True, check=False)
        if p.returncode != 0:
            raise RuntimeError(f"layout {name}: {p.stderr.strip()[-2000:]}")
        out.append(LayoutResult(**json.loads(p.stdout.strip().splitlines()[-1])))
    return out


def _query_cell(r: LayoutResult, q: str) -> str:
    cpu = r.query_cpu_ms.get(q)
    return f"{r.query_ms[q]:.1f}" + (f" ({cpu:.1f})" if cpu is not None else "")


def report(results: list[LayoutResult]) -> str:
    """Plain-text table, the first layout's figures as the base of the ratios."""
    if not results:
        return "no layout measured"
    base = results[0]
    qnames = list(base.query_ms)
    lines = [f"{base.rows:,} rows per layout; ratios against {base.layout}",
             "layout            CPU µs/row  ratio  merged/row  parts  B/row  " + "  ".join(
                 f"{q} ms (CPU)" for q in qnames)]
    for r in results:
        qs = "  ".join(f"{_query_cell(r, q):>{len(q) + 3}}" for q in qnames)
        lines.append(f"{r.layout:17s} {r.cpu_us_per_row:10.2f} {r.cpu_us_per_row / base.cpu_us_per_row:6.2f} "
                     f"{r.merged_rows_per_row:11.2f} {r.parts:6d} {r.bytes_per_row:6.1f}  {qs}")
    return "\n".join(lines)


if __name__ == "__main__":
    res = run_one(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    print(json.dumps(asdict(res)))
