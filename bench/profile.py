"""`fabricscope bench profile`: where the RTT worker spends its time on one probe batch (cProfile).

The worker's work per step is :func:`streams.runtime.probe_step.process_step`: per message decode,
then over the step's rows :func:`schemas.probe_rows.messages.process_probe_step` (encode the key
columns, validate, decompose, split back per message), then once per step the latency buckets, the
minute tier, the raw retention and :func:`streams.pingmesh.reducer.batch_partials` (split by window,
summarize: path lookup, classes of rows, group-by sums, links; serialise the partial). The key
encodings and the latency buckets are computed once per step and shared. This runs on simulated
batches of a 1,024-RNIC fabric (real paths in the path index), and reports for each stage its share
of the time, the slowest stage, the number of Python function calls per batch at two batch sizes
(equal when no per-row Python work is left), and the CPU time per row of a whole step of many
6,000-row messages (process CPU time, so it holds on a shared machine where cProfile's wall times
do not).
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

STAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "decode (IPC -> Arrow)": ("schemas/codec.py", ("decode",)),
    "validate (broken_rules)": ("schemas/probe_rows/validate.py", ("broken_rules",)),
    "decompose (t1..t6 -> RTTs)": ("schemas/probe_rows/decompose.py", ("decompose",)),
    "split_by_window": ("streams/pingmesh/windows.py", ("split_by_window",)),
    "summarize (all of the partial)": ("streams/pingmesh/partial.py", ("summarize",)),
    "  path lookup (PathIndex.hop_ids)": ("streams/pingmesh/path_index.py", ("hop_ids",)),
    "  classes of rows (classes)": ("schemas/group_codes.py", ("classes",)),
    "key encoding, once per step (dictionaries)": ("schemas/group_codes.py", ("dictionaries",)),
    "  key encoding (dictionary ids)": ("schemas/group_codes.py", ("key", "shared_keys")),
    "  group-by sums (pairs, flows, delays, ...)": ("schemas/group_codes.py", ("sums",)),
    "  links crossed (per distinct path pair)": ("streams/pingmesh/partial.py", ("_crossing",)),
    "to_bytes (partial -> IPC)": ("streams/pingmesh/partial.py", ("to_bytes",)),
    "minute tier (minute_rows)": ("schemas/probe_rows/minute_tier.py", ("minute_rows",)),
    "latency buckets, once per step (latency_buckets)": ("schemas/probe_rows/minute_tier.py", ("latency_buckets",)),
    "raw retention (retained)": ("schemas/probe_rows/retention.py", ("retained",)),
    "upload marks (upload_marks)": ("streams/runtime/probe_step.py", ("upload_marks",)),
}
CONTAINERS = {"summarize (all of the partial)"}
"""Stages that hold others (indented names): not candidates for the slowest stage."""


@dataclass
class ProfileResult:
    """Seconds per stage (cumulative, one batch), total, rows, and call counts per batch size."""

    rows: int
    total_s: float
    stages: dict[str, float]
    calls: dict[int, int]
    index_paths: int
    step_cpu_us: dict[str, Spread] = field(default_factory=dict)
    step_rows: int = 0

    @property
    def slowest(self) -> str:
        """The slowest stage that holds no other stage."""
        return max((k for k in self.stages if k not in CONTAINERS), key=lambda k: self.stages[k]).strip()


def _sim_batch(rows: int, n_rnics: int = 1024) -> tuple[bytes, object, int]:
    """One ``probe.v1`` payload of ``rows`` simulated rows and the worker's path index."""
    from producers.sim import Simulator
    from producers.sim.engine import BATCH_NS
    from producers.sim.fabrics import random_clos
    from schemas.arrow_pa import table_from_columns
    from schemas.codec import encode
    from streams.pingmesh.path_index import PathIndex

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
    prof = cProfile.Profile(time.process_time)  # CPU time: the shares hold on a shared, loaded machine
    prof.enable()
    _one(payload, index)
    prof.disable()
    return pstats.Stats(prof)


def run(rows: int = 20_000, small: int = 10_000, large: int = 200_000, step: int = 240_000) -> ProfileResult:
    """Profile one batch of ``rows``; count calls for batches of ``small`` and ``large`` rows; CPU per row
    of a ``step``-row worker step (0: skip)."""
    payload, index, n_paths = _sim_batch(max(rows, small, large, step) + 1_000)
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
    for name, (path, fns) in STAGES.items():
        stages[name] = sum(v[3] for k, v in st.stats.items()  # type: ignore[attr-defined]
                           if k[0].endswith(path) and k[2] in fns)
    calls = {n: _profile(cut(n), index).total_calls for n in (small, large)}  # type: ignore[attr-defined]
    step_rows = min(step, full.num_rows)
    cpu = step_cpu(full.slice(0, step_rows), index) if step_rows else {}
    return ProfileResult(rows, total, stages, calls, n_paths, cpu, step_rows)


@dataclass(frozen=True)
class Spread:
    """CPU µs per row over repeats of one stage: the median (the figure to quote), the fastest and slowest
    repeat, and the first repeat (the step's own caches cold, as the first step on new rows finds them)."""

    median: float
    low: float
    high: float
    first: float
    repeats: int

    @classmethod
    def of(cls, samples: list[float]) -> Spread:
        """From the repeats' µs per row, in the order run.

        Raises:
            ValueError: no samples.
        """
        if not samples:
            raise ValueError("Spread.of needs at least one sample")
        return cls(statistics.median(samples), min(samples), max(samples), samples[0], len(samples))

    def __str__(self) -> str:
        return (f"{self.median:.2f} µs (range {self.low:.2f}-{self.high:.2f} over {self.repeats}, "
                f"first {self.first:.2f})")


def cpu_samples(fn: Callable[[], object], rows: int, repeat: int,
                clock: Callable[[], float] = time.process_time) -> list[float]:
    """CPU µs per row of ``repeat`` calls of ``fn`` over ``rows`` rows, in order (``clock``: seconds)."""
    out = []
    for _ in range(repeat):
        c = clock()
        fn()
        out.append(1e6 * (clock() - c) / rows)
    return out


def step_cpu(rows: pa.Table, index: object, per_message: int = 6_000, repeat: int = 7) -> dict[str, Spread]:
    """CPU µs per row (process time: median, range and first of ``repeat`` runs) of one worker step over
    ``rows`` cut into ``per_message``-row messages, and of its parts alone on the same rows: the key columns'
    encoding (once per step), summarize and the minute tier (both given the step's encodings and latency
    buckets, as in the step). The path index is warm (built from the traces before the step), as a
    running worker's is."""
    from schemas.codec import encode
    from schemas.group_codes import dictionaries
    from schemas.probe_rows.messages import process_probe_step
    from schemas.probe_rows.minute_tier import latency_buckets, minute_rows
    from streams.pingmesh.partial import ENCODED, summarize
    from streams.pingmesh.windows import WINDOW_NS, split_by_window
    from streams.runtime.probe_step import RawMessage, process_step

    msgs = [RawMessage(encode(rows.slice(i, per_message)), "probe.v1", "probes.raw", 0, i // per_message)
            for i in range(0, rows.num_rows, per_message)]

    def spread(fn: Callable[[], object]) -> Spread:
        return Spread.of(cpu_samples(fn, rows.num_rows, repeat))

    step = process_probe_step([(m.payload, m.schema, m.topic, m.partition, m.offset) for m in msgs])
    enriched, encoded = step.enriched, step.encoded
    windows = split_by_window(enriched, WINDOW_NS)
    if len(windows) > 1:
        raise ValueError("step_cpu wants the rows of one window (summarize is timed on all of them)")
    ws, window = next(iter(windows.items()))
    buckets = latency_buckets(enriched)
    return {
        "process_step": spread(lambda: process_step(msgs, index, WINDOW_NS)),  # type: ignore[arg-type]
        "encode": spread(lambda: dictionaries(enriched, ENCODED)),
        "summarize": spread(lambda: summarize(ws, window, index, encoded, buckets)),  # type: ignore[arg-type]
        "minute_rows": spread(lambda: minute_rows(enriched, encoded, buckets)),
    }


def print_report(r: ProfileResult) -> None:
    """Rich table: seconds and share per stage, slowest first; calls per batch size."""
    from rich.console import Console
    from rich.table import Table

    con = Console(width=140)
    t = Table(title=f"RTT worker, one {r.rows:,}-row batch (cProfile, CPU time, cumulative; 1,024-RNIC sim fabric)")
    for c in ("stage", "CPU ms", "share of batch"):
        t.add_column(c, justify="left" if c == "stage" else "right")
    for name, s in sorted(r.stages.items(), key=lambda kv: -kv[1]):
        t.add_row(name, f"{s * 1e3:.1f}", f"{s / r.total_s:.0%}")
    t.add_row("[bold]whole batch[/bold]", f"{r.total_s * 1e3:.1f}", "100%")
    con.print(t)
    con.print(f"path index: {r.index_paths:,} traced 5-tuples")
    con.print("note: indented stages are inside summarize; the stages are nested, not additive")
    con.print(f"[bold]slowest stage: {r.slowest}[/bold]")
    con.print("Python function calls per batch (rows of one window): "
              + ", ".join(f"{n:,} rows -> {c:,}" for n, c in r.calls.items())
              + (" (equal: no per-row Python work)" if len(set(r.calls.values())) == 1 else " (DIFFER)"))
    if r.step_cpu_us:
        con.print(f"CPU per row, one worker step of {r.step_rows:,} rows in 6,000-row messages (process time, "
                  "median of repeats on a warm path index):")
        for k, v in r.step_cpu_us.items():
            con.print(f"  {k}: {v}")
