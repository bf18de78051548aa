"""`fabricscope bench storage`: bytes per day at 10,000 RNICs under each raw retention policy.

Simulated uploads of a 1,024-RNIC fabric (the profile's fabric, ToR-mesh, inter-ToR and service
pinglists, traced paths) go through the worker step (:func:`streams.runtime.probe_step.process_step`)
in 6,000-row messages, under ``full`` and ``anomalies``, and into the embedded store exactly as the
store writer inserts them (minute tier, then the raw rows kept). Bytes on disk per row (after
merges, from ``system.parts``) and rows kept per probe scale to ``rnics`` x ``rate`` probes/s.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

DAY_S = 86_400


@dataclass
class StorageResult:
    """Per policy: raw rows kept per probe, minute rows per probe, bytes per raw and minute row, GB/day."""

    probes: int
    per_policy: dict[str, dict[str, float]]


def run(rows: int = 240_000, rnics: int = 10_000, rate: float = 150.0, sample: float = 0.01) -> StorageResult:
    """Measure on ``rows`` simulated probes; scale to ``rnics`` RNICs probing at ``rate`` probes/s each."""
    from schemas.probe_rows.retention import RetentionPolicy
    from sinks.clickhouse import ChdbStore, migrate

    whole, msgs, _ = simulated_uploads(rows)
    out: dict[str, dict[str, float]] = {}
    for mode in ("full", "anomalies"):
        kept, minute = writer_rows(msgs, RetentionPolicy(mode, sample))
        with tempfile.TemporaryDirectory() as d:
            store = ChdbStore(Path(d) / "ch")
            migrate(store)
            store.insert_arrow("probes_1m", minute)
            store.insert_arrow("probes", kept)
            store.command("OPTIMIZE TABLE probes FINAL")
            store.command("OPTIMIZE TABLE probes_1m FINAL")
            parts = store.query_arrow(
                "SELECT table, sum(bytes_on_disk) AS b, sum(rows) AS r FROM system.parts WHERE active AND "
                "database = currentDatabase() AND table IN ('probes', 'probes_1m') GROUP BY table").to_pylist()
            store.close()
        by = {p["table"]: (int(p["b"]), int(p["r"])) for p in parts}
        raw_b, raw_r = by.get("probes", (0, 0))
        min_b, min_r = by.get("probes_1m", (0, 0))
        per_s = rnics * rate
        out[mode] = {
            "raw_rows_kept_per_probe": kept.num_rows / whole.num_rows,
            "raw_bytes_per_row": raw_b / max(raw_r, 1),
            "minute_rows_per_probe_merged": min_r / whole.num_rows,
            "minute_bytes_per_probe": min_b / whole.num_rows,
            "raw_gb_per_day": raw_b / whole.num_rows * per_s * DAY_S / 1e9,
            "minute_gb_per_day": min_b / whole.num_rows * per_s * DAY_S / 1e9,
        }
    return StorageResult(whole.num_rows, out)


def writer_rows(msgs: list, retention: object) -> tuple[pa.Table, pa.Table]:
    """The ``probes`` and ``probes_1m`` rows the store writer makes of raw messages ``msgs``
    (:class:`streams.runtime.probe_step.RawMessage`) in one block under ``retention``
    (:func:`sinks.raw_rows.form_raw_block`; no flow baselines)."""
    from sinks.raw_rows import RawJudge, form_raw_block, raw_entry

    entries = [raw_entry(m.offset, m.payload, m.schema, f"{m.topic}/{m.partition}/{m.offset}") for m in msgs]
    block = form_raw_block("probes.raw", {0: (entries, {})}, RawJudge(retention=retention))  # type: ignore[arg-type]
    return block.tables["probes"], block.tables["probes_1m"]


def simulated_uploads(rows: int) -> tuple[pa.Table, list, object]:
    """``rows`` simulated ``probe.v1`` rows of the 1,024-RNIC fabric, now-dated: the whole table, the same rows
    as 6,000-row ``probes.raw`` messages (``RawMessage``) and the worker's path index."""
    from bench.profile import _sim_batch
    from schemas.codec import decode, encode
    from streams.runtime.probe_step import RawMessage

    payload, index, _ = _sim_batch(rows)
    whole = _to_now(decode(payload, "probe.v1")[1])
    msgs = [RawMessage(encode(whole.slice(i, 6_000)), "probe.v1", "probes.raw", 0, k)
            for k, i in enumerate(range(0, whole.num_rows, 6_000))]
    return whole, msgs, index


def shift_columns(t: pa.Table, columns: tuple[str, ...], by_ns: int) -> pa.Table:
    """``t`` with each of ``columns`` (int64 ns) moved by ``by_ns``."""
    import pyarrow.compute as pc

    for c in columns:
        i = t.schema.get_field_index(c)
        t = t.set_column(i, t.schema.field(c), pc.add(t[c], pa.scalar(by_ns, pa.int64())))
    return t


def _to_now(t: pa.Table) -> pa.Table:
    """Shift the host-clock columns to the last hour (the tables' TTLs drop 1970 rows at insert)."""
    import time

    import pyarrow.compute as pc

    delta = (time.time_ns() // 3_600_000_000_000 - 1) * 3_600_000_000_000 - pc.min(t["upload_ns"]).as_py()
    return shift_columns(t, ("upload_ns", "t1", "t6"), delta)


def report(r: StorageResult, rnics: int = 10_000, rate: float = 150.0) -> str:
    """Plain-text table."""
    lines = [f"{r.probes:,} simulated probes (1,024-RNIC fabric); scaled to {rnics:,} RNICs x {rate:.0f} probes/s",
             "policy     raw rows kept  B/raw row  raw GB/day  minute rows/probe  minute B/probe  minute GB/day"]
    for mode, m in r.per_policy.items():
        lines.append(f"{mode:10s} {m['raw_rows_kept_per_probe']:13.2%} {m['raw_bytes_per_row']:10.1f} "
                     f"{m['raw_gb_per_day']:11.1f} {m['minute_rows_per_probe_merged']:18.3f} "
                     f"{m['minute_bytes_per_probe']:15.2f} {m['minute_gb_per_day']:14.1f}")
    lines.append("anomalies here keeps timeouts, service probes and the 1 % sample; with the reducer's baselines it "
                 "also keeps the probes over their flow's P99 (about 1 % more by definition)")
    return "\n".join(lines)
