"""`fabricscope bench profile`: where the RTT worker spends its time on one probe batch (cProfile).

The worker's work per step is :func:`streams.runtime.probe_step.process_step`: per message
:func:`streams.runtime.probe_batch.process_probe_message` (decode, validate, decompose), then
once per step the minute tier, the raw retention and :func:`streams.pingmesh.reducer.batch_partials`
(split by window, attach traced paths, summarize, serialise the partial). This runs
both on simulated batches of a 1,024-RNIC fabric (real paths in the path index), and
reports for each stage its share of the time, and the number of Python function calls
per batch at two batch sizes (equal when no per-row Python work is left).
"""

from __future__ import annotations

import cProfile
import pstats
from dataclasses import dataclass

import pyarrow as pa

STAGES = {
    "decode (IPC -> Arrow)": ("schemas/codec.py", "decode"),
    "validate (split_probes)": ("streams/pingmesh/validate.py", "split_probes"),
    "decompose (t1..t6 -> RTTs)": ("streams/pingmesh/rtt.py", "decompose"),
    "split_by_window": ("streams/pingmesh/windows.py", "split_by_window"),
    "attach_paths (join with path index)": ("streams/pingmesh/links.py", "attach_paths"),
    "summarize (all group-bys)": ("streams/pingmesh/partial.py", "summarize"),
    "to_bytes (partial -> IPC)": ("streams/pingmesh/partial.py", "to_bytes"),
    "minute tier (minute_rows)": ("schemas/minute_tier.py", "minute_rows"),
    "raw retention (retained)": ("streams/pingmesh/retention.py", "retained"),
}


@dataclass
class ProfileResult:
    """Seconds per stage (cumulative, one batch), total, rows, and call counts per batch size."""

    rows: int
    total_s: float
    stages: dict[str, float]
    calls: dict[int, int]
    index_paths: int


def _sim_batch(rows: int, n_rnics: int = 1024) -> tuple[bytes, object, int]:
    """One ``probe.v1`` payload of ``rows`` simulated rows and the worker's path index."""
    from producers.sim import Simulator
    from producers.sim.engine import BATCH_NS
    from producers.sim.fabrics import random_clos
    from schemas.arrow_pa import table_from_columns
    from schemas.codec import encode
    from streams.pingmesh.links import PathIndex

    inv = random_clos(1, n_rnics // 32, 8, 4, 8)
    sim = Simulator(inv, seed=1, trace="every_batch")
    index = PathIndex()
    tables: list[pa.Table] = []
    t0 = 1_000_000 * 20 * 10**9
    k = 0
    while sum(t.num_rows for t in tables) < rows:
        for _agent, probes, paths in sim.upload_batches(t0 + k * BATCH_NS):
            if len(paths["hops"]):
                index.update(table_from_columns("path.v1", paths))
            if len(probes["seq"]):
                tables.append(table_from_columns("probe.v1", probes))
        k += 1
    t = pa.concat_tables(tables).slice(0, rows).combine_chunks()
    return encode(t), index, index.latest.num_rows


def _one(payload: bytes, index: object) -> None:
    from streams.pingmesh.windows import WINDOW_NS
    from streams.runtime.probe_step import RawMessage, process_step

    out = process_step([RawMessage(payload, "probe.v1", "probes.raw", 0, 1)], index, WINDOW_NS)  # type: ignore[arg-type]
    assert out.messages[0].enriched is not None


def _profile(payload: bytes, index: object) -> pstats.Stats:
    _one(payload, index)  # warm imports and caches
    prof = cProfile.Profile()
    prof.enable()
    _one(payload, index)
    prof.disable()
    return pstats.Stats(prof)


def run(rows: int = 20_000, small: int = 10_000, large: int = 200_000) -> ProfileResult:
    """Profile one batch of ``rows``; count calls for batches of ``small`` and ``large`` rows."""
    payload, index, n_paths = _sim_batch(max(rows, small, large) + 1_000)
    from schemas.codec import decode, encode
    from streams.pingmesh.windows import split_by_window

    # One window only: a batch spanning two windows summarizes twice, which is per-window,
    # not per-row, work (a few NTP-skewed rows fall in the previous window).
    full = max(split_by_window(decode(payload, "probe.v1")[1]).values(), key=lambda t: t.num_rows)

    def cut(n: int) -> bytes:
        return encode(full.slice(0, n))

    st = _profile(cut(rows), index)
    total = st.total_tt  # type: ignore[attr-defined]
    stages: dict[str, float] = {}
    for name, (path, fn) in STAGES.items():
        stages[name] = sum(v[3] for k, v in st.stats.items()  # type: ignore[attr-defined]
                           if k[0].endswith(path) and k[2] == fn)
    calls = {n: _profile(cut(n), index).total_calls for n in (small, large)}  # type: ignore[attr-defined]
    return ProfileResult(rows, total, stages, calls, n_paths)


def print_report(r: ProfileResult) -> None:
    """Rich table: seconds and share per stage, slowest first; calls per batch size."""
    from rich.console import Console
    from rich.table import Table

    con = Console(width=140)
    t = Table(title=f"RTT worker, one {r.rows:,}-row batch (cProfile, cumulative; 1,024-RNIC sim fabric)")
    for c in ("stage", "ms", "share of batch"):
        t.add_column(c, justify="left" if c == "stage" else "right")
    for name, s in sorted(r.stages.items(), key=lambda kv: -kv[1]):
        t.add_row(name, f"{s * 1e3:.1f}", f"{s / r.total_s:.0%}")
    t.add_row("[bold]whole batch[/bold]", f"{r.total_s * 1e3:.1f}", "100%")
    con.print(t)
    con.print(f"path index: {r.index_paths:,} traced 5-tuples")
    con.print("note: summarize includes attach_paths; the stages are nested, not additive")
    con.print("Python function calls per batch (rows of one window): "
              + ", ".join(f"{n:,} rows -> {c:,}" for n, c in r.calls.items())
              + (" (equal: no per-row Python work)" if len(set(r.calls.values())) == 1 else " (DIFFER)"))
