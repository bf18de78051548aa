"""The minute tier, computed before the store (docs/design.md "Storage").

The store writer holds every probe of a block it decomposes, so it counts them per
(pinglist, prober RNIC, responder RNIC, minute) itself, one grouping per block
(:mod:`sinks.raw_rows`), and the store has no views: views over every raw row cost
more than the insert (1.1 M rows/s into ``probes`` without views, 304 k with three,
same blocks). ``probes_1m`` is an AggregatingMergeTree, so the engine merges the
rows of one key from several blocks (``sum``/``sumMap``); queries aggregate anyway.

Keyed by ``batch_id`` too (the default), the rows of each source message stay
apart: what :func:`bench.probe_insert.insert_probes` and the tests start from before
merging them (:func:`merge_minute_rows`).

The histograms are the store's: ``bucket(ns) = floor(16 * log2(max(ns, 1)))``,
a ``Map(UInt16, UInt64)`` merged with ``sumMap`` (schemas/ddl/005_history.sql).
Equal, bucket for bucket, to what the former materialized view computed from the
same rows (tests/streams/test_minute_tier.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.arrow_pa import arrow_schema
from schemas.group_codes import column, factorize

MINUTE = "probe_minute.v1"
STORE_BUCKETS_PER_OCTAVE = 16
KEYS = ("batch_id", "pinglist", "prober_rnic", "responder_rnic")
HISTS = (("rtt_hist", "network_rtt_ns"), ("responder_hist", "responder_delay_ns"),
         ("prober_hist", "prober_delay_ns"))
_MAP = pa.map_(pa.uint16(), pa.uint64())


def store_bucket(ns: np.ndarray) -> np.ndarray:
    """Store histogram bucket (uint16) of latencies in ns: ``floor(16 * log2(max(ns, 1)))``."""
    v = np.maximum(np.asarray(ns, dtype=np.float64), 1.0)
    return np.floor(STORE_BUCKETS_PER_OCTAVE * np.log2(v)).astype(np.uint16)


def latency_buckets(enriched: pa.Table) -> dict[str, np.ndarray]:
    """:func:`store_bucket` (uint16) of every row's network RTT, responder delay and prober delay:
    ``{column: array of num_rows}``, a null's entry meaningless (0). Computed once per worker step and shared
    by the minute tier and the window partials, whose 8-per-octave bucket is this one halved
    (``floor(8 log2 v) == floor(16 log2 v) >> 1``: scaling by 2 is exact in floating point)."""
    return {col: store_bucket(np.asarray(pc.fill_null(enriched[col], 1).to_numpy())) for _, col in HISTS}


def _codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, int]:
    """Dense integer ids of a key column (dictionary encoding) and how many distinct values it has."""
    if isinstance(col, pa.ChunkedArray):  # one dictionary for the whole column, not one per chunk
        col = col.combine_chunks()
    d = col if pa.types.is_dictionary(col.type) else pc.dictionary_encode(col)
    return d.indices.to_numpy(zero_copy_only=False).astype(np.int64), max(len(d.dictionary), 1)


def group_bucket_keys(gid: np.ndarray, bucket: np.ndarray, n_groups: int) -> np.ndarray:
    """``gid << 16 | bucket`` per row (``bucket`` < 65,536), as uint32 when the ``n_groups`` group ids fit 16
    bits, else int64: numpy sorts uint32 keys in ~0.57x the time of int64 (28 against 49 ns a row, 500,000
    rows, this machine). Sorted, the keys order rows by group, then bucket."""
    kind = np.uint32 if n_groups <= 1 << 16 else np.int64
    return (gid.astype(kind) << kind(16)) | bucket.astype(kind)


def _histogram(gid: np.ndarray, n_groups: int, values: pa.ChunkedArray, bucket: np.ndarray | None = None) -> pa.Array:
    """One ``Map(bucket -> count)`` per group over the non-null ``values``; keys ascending. ``bucket``: the
    values' store buckets per row when known (:func:`latency_buckets`).

    One sort of ``group << 16 | bucket`` (buckets are uint16) and the run starts of the sorted keys: what
    ``np.unique(..., return_counts=True)`` does, without its copies."""
    valid = np.asarray(pc.is_valid(values).to_numpy(zero_copy_only=False), dtype=bool) if values.null_count else None
    if bucket is None:
        bucket = store_bucket(pc.fill_null(values, 1).to_numpy(zero_copy_only=False))
    g, b = (gid, bucket) if valid is None else (gid[valid], bucket[valid])
    pair = group_bucket_keys(g, b, n_groups)
    pair.sort()  # by group, then bucket
    n = len(pair)
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(pair[1:], pair[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    pair = pair[starts]
    counts = np.diff(np.append(starts, n))
    offsets = np.zeros(n_groups + 1, dtype=np.int32)
    np.cumsum(np.bincount(pair >> 16, minlength=n_groups), out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array((pair & 0xFFFF).astype(np.uint16)),
                                   pa.array(counts.astype(np.uint64)), type=_MAP)


def _keys_at(enriched: pa.Table, name: str, encoded: Mapping[str, pa.DictionaryArray] | None,
             rows: np.ndarray) -> pa.Array | pa.ChunkedArray:
    """Column ``name`` (string) at ``rows``: from its dictionary when the step encoded it (one take from a
    small contiguous array), else from the column."""
    d = encoded.get(name) if encoded is not None else None
    if d is None or d.null_count:
        return enriched[name].take(pa.array(rows, pa.int64()))
    return d.dictionary.take(d.indices.take(pa.array(rows, pa.int64())))


def minute_rows(enriched: pa.Table, encoded: Mapping[str, pa.DictionaryArray] | None = None,
                buckets: Mapping[str, np.ndarray] | None = None, by_batch: bool = True) -> pa.Table:
    """The minute tier of ``probe_enriched.v1`` rows, one row per (batch_id, minute, pinglist, prober, responder).

    Args:
        enriched: decomposed probes (any number of source batches; ``batch_id`` per row).
        encoded: optional ``{column: dictionary array}`` of the same rows for some of :data:`KEYS`, ids in
            order of first appearance (:func:`schemas.group_codes.dictionaries`: the worker step's encodings,
            shared with the window partials); the rows do not change.
        buckets: optional :func:`latency_buckets` of the same rows (the step's, shared likewise).
        by_batch: False: one row per (minute, pinglist, prober, responder) over every batch, without
            ``batch_id`` (what :func:`merge_minute_rows` gives, in one grouping: the store writer's block).

    Returns:
        A ``probe_minute.v1`` table, rows of one batch together (batches in order of appearance), then
        sorted by minute and key; vectorised (numpy/Arrow), no per-row Python.
    """
    schema = arrow_schema(MINUTE)
    if not by_batch:
        schema = pa.schema([f for f in schema if f.name != "batch_id"])
    if enriched.num_rows == 0:
        return schema.empty_table()
    event_ns = pc.coalesce(enriched["t1"], enriched["upload_ns"]).to_numpy(zero_copy_only=False)
    minute = np.floor_divide(event_ns, 60_000_000_000) * 60  # toStartOfMinute, in s
    lo, hi = int(minute.min()), int(minute.max())
    if (hi - lo) // 60 < 4 * len(minute):  # minutes of a step: a few; their offset orders them (no sort)
        minute_code, n_minutes = (minute - lo) // 60, (hi - lo) // 60 + 1
    else:
        minutes, minute_code = np.unique(minute, return_inverse=True)
        n_minutes = len(minutes)
    # mixed radix over dictionary ids, source batch outermost (rows of one batch stay contiguous, in the
    # order the batches appear): one int64 per key tuple
    composite = minute_code.astype(np.int64)
    if by_batch:
        batch, _ = _codes(column(enriched, "batch_id", encoded))
        composite = batch * n_minutes + composite
    for k in KEYS[1:]:
        codes, card = _codes(column(enriched, k, encoded))
        composite = composite * card + codes
    gid, distinct = factorize(composite)  # groups in key order, as np.unique numbers them
    n_groups = len(distinct)
    first = np.zeros(n_groups, dtype=np.int64)
    first[gid] = np.arange(len(gid), dtype=np.int64)  # a row of each group (all share its key)
    timeout = pc.equal(enriched["status"], "timeout").to_numpy(zero_copy_only=False)
    cols = {
        "minute": pa.array(minute[first], pa.int64()),
        **{k: _keys_at(enriched, k, encoded, first) for k in KEYS[1:]},
        "probes": pa.array(np.bincount(gid, minlength=n_groups).astype(np.uint64)),
        "timeouts": pa.array(np.bincount(gid[np.flatnonzero(timeout)], minlength=n_groups).astype(np.uint64)),
    }
    for name, col in HISTS:
        cols[name] = _histogram(gid, n_groups, enriched[col], None if buckets is None else buckets.get(col))
    if by_batch:
        cols["batch_id"] = _keys_at(enriched, "batch_id", encoded, first)
    return pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)


def _sum_maps(gid: np.ndarray, n_groups: int, maps: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Per group, the bucket-wise sum of ``Map(bucket -> count)`` values (``sumMap``), keys ascending."""
    chunks = maps.chunks if isinstance(maps, pa.ChunkedArray) else [maps]
    maps = pa.concat_arrays(chunks)  # fresh buffers: offsets from 0, children exactly the entries
    offsets = maps.offsets.to_numpy()
    owner = np.repeat(gid, np.diff(offsets))
    keys = maps.keys.to_numpy()[offsets[0]:offsets[-1]].astype(np.int64)
    counts = maps.items.to_numpy()[offsets[0]:offsets[-1]].astype(np.uint64)
    pair, inv = np.unique(owner * 65536 + keys, return_inverse=True)
    total = np.zeros(len(pair), dtype=np.uint64)
    np.add.at(total, inv.ravel(), counts)
    out_offsets = np.zeros(n_groups + 1, dtype=np.int32)
    np.cumsum(np.bincount(pair // 65536, minlength=n_groups), out=out_offsets[1:])
    return pa.MapArray.from_arrays(pa.array(out_offsets, pa.int32()), pa.array((pair % 65536).astype(np.uint16)),
                                   pa.array(total), type=_MAP)


def merge_minute_rows(rows: pa.Table) -> pa.Table:
    """Merge minute-tier rows of one key (minute, pinglist, prober, responder) into one: what the engine's
    ``sum``/``sumMap`` would do later, done before the insert. The store writer merges a block's rows this
    way after dropping replays (:func:`sinks.probe_tiers.merge_minute_rows`, one sort and ``reduceat``; its
    test compares the two), so a block of many messages inserts one row per key instead of one per key and
    source message.

    Returns the table without ``batch_id``, sorted by key.
    """
    names = [n for n in rows.column_names if n != "batch_id"]
    if rows.num_rows == 0:
        return rows.select(names)
    _, minute_code = np.unique(rows["minute"].to_numpy(), return_inverse=True)
    composite = minute_code.astype(np.int64).ravel()
    for k in KEYS[1:]:
        codes, card = _codes(rows[k])
        composite = composite * card + codes
    _, first, gid = np.unique(composite, return_index=True, return_inverse=True)
    gid = gid.astype(np.int64).ravel()
    n_groups = len(first)
    take = pa.array(first, pa.int64())
    cols = {
        "minute": rows["minute"].take(take),
        "pinglist": rows["pinglist"].take(take),
        "prober_rnic": rows["prober_rnic"].take(take),
        "responder_rnic": rows["responder_rnic"].take(take),
        "probes": pa.array(np.bincount(gid, weights=rows["probes"].to_numpy(), minlength=n_groups).astype(np.uint64)),
        "timeouts": pa.array(np.bincount(gid, weights=rows["timeouts"].to_numpy(),
                                         minlength=n_groups).astype(np.uint64)),
    }
    for name, _col in HISTS:
        cols[name] = _sum_maps(gid, n_groups, rows[name])
    return pa.table({n: cols[n] for n in names})
