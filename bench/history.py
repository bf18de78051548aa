#!/usr/bin/env python3
"""Benchmark of the history schema on the embedded store (chdb).

Two measurements:

1. ``--rnics`` RNICs for ``--days`` days at ``--per-hour`` probes per RNIC per hour (sparse,
   so months load quickly) with their tiers (``insert_probes``); then every saved query runs
   and its wall time is printed.
2. Bytes per row: ``--rate-rnics`` RNICs for ``--rate-minutes`` minutes at the paper's
   rate (``--rate`` probes/s per RNIC, R-Pingmesh §6: under 150), after a final merge,
   per table, with rows per RNIC per day to scale to a cluster.

Usage: .venv/bin/python -m bench.history --rnics 1000 --days 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.history_fabric import HOUR_NS, fabric, probe_table, simulate
from bench.probe_insert import insert_probes
from schemas.saved_queries import load, names, render
from sinks.clickhouse import ChdbStore, migrate
from sinks.history import load_inventory

TABLES = ("probes", "probes_1m", "probes_1h_rnic", "probes_1h_tor")
SAMPLE_PARAMS = {"rnic": "R0003", "job": "job-1"}


def _load(store: ChdbStore, rnics: int, per_tor: int, start: int, periods: int, per_period: int,
          period_ns: int, chunks: int) -> int:
    fab = fabric(tors=rnics // per_tor, rnics_per_tor=per_tor)
    load_inventory(store, fab.inventory)
    p = simulate(fab, start, hours=periods, per_hour=per_period, seed=5, period_ns=period_ns)
    step = -(-len(p.t1) // chunks)
    for i in range(chunks):
        insert_probes(store, probe_table(fab, p, slice(i * step, (i + 1) * step), f"b{i}"), f"b{i}")
    return len(p.t1)


def sizes(store: ChdbStore) -> dict[str, tuple[int, int]]:
    """(rows, compressed bytes on disk) of each history table, after a final merge."""
    out = {}
    for t in TABLES:
        store.command(f"OPTIMIZE TABLE {t} FINAL")
        r = store.query_arrow(
            "SELECT sum(rows) AS rows, sum(bytes_on_disk) AS bytes FROM system.parts "
            f"WHERE active AND database = currentDatabase() AND table = '{t}'").to_pylist()[0]
        out[t] = (int(r["rows"] or 0), int(r["bytes"] or 0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rnics", type=int, default=1000)
    ap.add_argument("--per-tor", type=int, default=16)
    ap.add_argument("--days", type=int, default=3)
    ap.add_argument("--per-hour", type=int, default=20)
    ap.add_argument("--rate-rnics", type=int, default=48)
    ap.add_argument("--rate-minutes", type=int, default=5)
    ap.add_argument("--rate", type=int, default=150, help="probes/s per RNIC")
    ap.add_argument("--queries-only", action="store_true", help="skip the final merge and the paper-rate part")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = ChdbStore(Path(tmp) / "q")
        migrate(store)
        start = (time.time_ns() // HOUR_NS - 24 * a.days + 1) * HOUR_NS
        t0 = time.perf_counter()
        n = _load(store, a.rnics, a.per_tor, start, 24 * a.days, a.per_hour, HOUR_NS, a.days * 4)
        print(f"{a.rnics} RNICs, {a.days} days, {n:,} probe rows loaded in {time.perf_counter() - t0:.1f} s")
        runs = [(name, {}) for name in names()]  # each at its own default --since
        runs.append(("rtt_tor_hourly", {"since": f"{a.days + 1}d", "src_tor": "T01", "dst_tor": "T03"}))
        runs.append(("rtt_pinglist_hourly", {"since": f"{a.days + 1}d"}))
        for name, extra in runs:
            q = load(name)
            params = {k: v for k, v in SAMPLE_PARAMS.items() if k in {p.name for p in q.params}} | extra
            t0 = time.perf_counter()
            rows = store.query_arrow(render(q, params)).num_rows
            shown = " ".join(f"{k}={v}" for k, v in extra.items()) or "defaults"
            print(f"  query {name:22s} {shown:40s} {1000 * (time.perf_counter() - t0):8.1f} ms  {rows:8d} rows")
        if a.queries_only:
            store.close()
            return
        for t, (rows, b) in sizes(store).items():
            print(f"  {t:16s} {rows:>11,} rows {b / 2**20:9.1f} MiB on disk")
        store.close()

        store = ChdbStore(Path(tmp) / "r")
        migrate(store)
        minutes = a.rate_minutes
        start = (time.time_ns() // HOUR_NS - 1) * HOUR_NS
        n = _load(store, a.rate_rnics, a.per_tor, start, minutes, a.rate * 60, 60 * 10**9, minutes)
        print(f"\npaper rate: {a.rate_rnics} RNICs x {a.rate} probes/s x {minutes} min = {n:,} probes")
        for t, (rows, b) in sizes(store).items():
            per_row = b / rows if rows else 0
            print(f"  {t:16s} {rows:>10,} rows {per_row:8.1f} B/row  "
                  f"{rows / a.rate_rnics / minutes:8.2f} rows per RNIC-minute")
        store.close()


if __name__ == "__main__":
    main()
