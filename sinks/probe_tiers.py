"""The probe tiers the store writer inserts: minute rows merged per key, and the two hourly tiers from them.

The store writer computes a block's minute tier in one grouping (:mod:`schemas.probe_rows.minute_tier`,
:mod:`sinks.raw_rows`), one row per key, and rolls it up into
``probes_1h_rnic`` and ``probes_1h_tor`` itself, one insert per tier under the
block's token (docs/storage.md "Exactly-once rows"). The store has no materialized views
on the tiers (schemas/ddl/013): views grouped and joined every minute row on
insert, and cost more than the raw rows' insert (BENCHMARKS.md section 4).

ToRs come from ``rnic_inventory`` as the views had them (schemas/ddl/005): the
newest ToR of each RNIC when the block is inserted; an RNIC missing there rolls
up under ToR ``''``.

Anything else that writes probe rows (history imports, benchmarks, tests) goes
through :func:`bench.probe_insert.insert_probes`, which computes the same tiers with the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.probe_rows.minute_tier import group_bucket_keys
from schemas.records import PROBE_MINUTE_V1
from sinks.clickhouse import Store

MINUTE_TABLE = "probes_1m"
# The histogram columns of every tier (``Map(UInt16, UInt64)``, schemas/ddl/005), from the minute tier's record.
HIST_COLUMNS = tuple(f.name for f in PROBE_MINUTE_V1.fields if f.type.startswith("map<"))
_MAP = pa.map_(pa.uint16(), pa.uint64())
# Keys in each table's ORDER BY order (schemas/ddl/005): the merged rows come out sorted by them, which
# the engine detects on insert and then neither sorts nor permutes the block.
MINUTE_KEYS = ("pinglist", "prober_rnic", "responder_rnic", "minute")
HOURLY_KEYS: dict[str, tuple[str, ...]] = {
    "probes_1h_rnic": ("prober_rnic", "responder_rnic", "hour"),
    "probes_1h_tor": ("prober_tor", "responder_tor", "pinglist", "hour"),
}
TIER_TABLES = (MINUTE_TABLE, *HOURLY_KEYS)
# The tier rows of one insert are merged per key already: the engine's merge-on-insert (sorting and
# summing maps that never share a key) is pure cost, 4.3 -> 1.5 µs per minute row measured on chdb.
# The engine still merges rows of equal keys across inserts in the background; queries aggregate anyway.
TIER_INSERT_SETTINGS = {"optimize_on_insert": 0}
INVENTORY_SQL = "SELECT rnic, argMax(tor, updated_ns) AS tor FROM rnic_inventory GROUP BY rnic"


def tor_of_rnic(store: Store) -> dict[str, str]:
    """RNIC -> ToR from ``rnic_inventory``, the newest row per RNIC (what the former views joined).

    Raises:
        sinks.clickhouse.StoreError: the store did not answer.
    """
    t = store.query_arrow(INVENTORY_SQL)
    return dict(zip(t["rnic"].to_pylist(), t["tor"].to_pylist(), strict=True))


def _tor_column(rnics: pa.ChunkedArray | pa.Array, tor_of: Mapping[str, str]) -> pa.Array:
    """The ToR of every RNIC of ``rnics`` ('' when unknown): one dict lookup per distinct RNIC."""
    if isinstance(rnics, pa.ChunkedArray):
        rnics = rnics.combine_chunks()
    d = rnics if pa.types.is_dictionary(rnics.type) else pc.dictionary_encode(rnics)
    tors = pa.array([tor_of.get(r, "") for r in d.dictionary.to_pylist()], pa.string())
    return tors.take(d.indices)


def hourly_tiers(minute: pa.Table, tor_of: Mapping[str, str]) -> dict[str, pa.Table]:
    """The hourly tiers of minute-tier rows, one row per key of each, as the former views computed them.

    Args:
        minute: ``probes_1m`` rows (``minute`` in s since the epoch; any number of rows per key).
        tor_of: RNIC -> ToR (:func:`tor_of_rnic`).

    Returns:
        ``{"probes_1h_rnic": rows, "probes_1h_tor": rows}``; ``hour`` in s since the epoch (start of the hour).
    """
    m = minute["minute"].to_numpy()
    hour = pa.array(m - np.mod(m, 3600), pa.int64())
    cols = {"hour": hour, "pinglist": minute["pinglist"], "prober_rnic": minute["prober_rnic"],
            "responder_rnic": minute["responder_rnic"],
            "prober_tor": _tor_column(minute["prober_rnic"], tor_of),
            "responder_tor": _tor_column(minute["responder_rnic"], tor_of)}
    values = minute.select(["probes", "timeouts", "rtt_hist", "responder_hist", "prober_hist"])
    out = {}
    for table, keys in HOURLY_KEYS.items():
        rows = pa.table({**{k: cols[k] for k in keys}, **{c: values[c] for c in values.column_names}})
        out[table] = merge_tier_rows(rows, keys)
    return out


def merge_minute_rows(minute: pa.Table) -> pa.Table:
    """Minute-tier rows (with or without ``batch_id``) merged to one row per key, in ``probes_1m``'s columns."""
    return merge_tier_rows(minute, MINUTE_KEYS)


def tier_tables(minute: pa.Table, tor_of: Mapping[str, str]) -> dict[str, pa.Table]:
    """Every tier of some minute-tier rows (with or without ``batch_id``), each merged per its key:
    ``probes_1m``, ``probes_1h_rnic``, ``probes_1h_tor``, in insert order."""
    merged = merge_minute_rows(minute)
    return {MINUTE_TABLE: merged, **hourly_tiers(merged, tor_of)}


def merge_tier_rows(rows: pa.Table, keys: tuple[str, ...]) -> pa.Table:
    """Merge tier rows per ``keys`` into one row each: ``sum`` of ``probes`` and ``timeouts``, ``sumMap`` of the
    three histograms, as the engine merges an ``AggregatingMergeTree`` tier (schemas/ddl/005_history.sql).

    The store writer rolls a block's merged minute rows up into the hourly tiers with it (``keys`` =
    ``("prober_rnic", "responder_rnic", "hour")`` after replacing ``minute`` by its hour), so the
    store needs no materialized view.

    Args:
        rows: ``keys`` columns (any type Arrow can dictionary-encode) plus ``probes``, ``timeouts`` and the
            three ``Map(UInt16, UInt64)`` histogram columns; other columns are dropped.
        keys: the key columns of the target tier, best in the order of its table's ``ORDER BY``.

    Returns:
        ``keys`` then the value columns, one row per distinct key, sorted by ``keys`` (strings in byte
        order, as ClickHouse compares them); vectorised. Given a table's ``ORDER BY`` order, the engine
        finds the block sorted and skips its own sort and permutation on insert. String keys come out
        dictionary-encoded (``LowCardinality`` in the store takes them without hashing every row).
    """
    names = [*keys, "probes", "timeouts", *HIST_COLUMNS]
    if rows.num_rows == 0:
        return rows.select(names)
    composite = np.zeros(rows.num_rows, dtype=np.int64)
    codes_of, dicts = {}, {}
    for k in keys:
        codes, card, dicts[k] = _sorted_codes(rows[k])
        codes_of[k] = codes
        if int(composite.max()) >= (1 << 62) // card:  # re-densify before the mixed radix overflows
            composite = np.unique(composite, return_inverse=True)[1].astype(np.int64).ravel()
        composite = composite * card + codes
    _, first, gid = np.unique(composite, return_index=True, return_inverse=True)
    gid = gid.astype(np.int64).ravel()
    n_groups = len(first)
    take = pa.array(first, pa.int64())
    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        k: (rows[k].take(take) if dicts[k] is None else
            pa.DictionaryArray.from_arrays(pa.array(codes_of[k][first].astype(np.int32)), dicts[k]))
        for k in keys}
    for c in ("probes", "timeouts"):
        cols[c] = pa.array(np.bincount(gid, weights=rows[c].to_numpy(), minlength=n_groups).astype(np.uint64))
    for name in HIST_COLUMNS:
        # every key of one row (most hourly keys of a block have one minute row): its maps as they are
        # (a map's keys are distinct and ascending, as minute_rows builds them), one Arrow take
        cols[name] = rows[name].take(take) if n_groups == rows.num_rows else _sum_maps_sorted(gid, n_groups,
                                                                                               rows[name])
    return pa.table({n: cols[n] for n in names})


def _sorted_codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, int, pa.Array | None]:
    """Codes of a key column that sort like its values, how many there can be, and for strings the sorted
    dictionary the codes index; integers of a narrow range are their own codes (offset from the minimum)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_integer(col.type):
        v = col.to_numpy(zero_copy_only=False).astype(np.int64)
        lo = int(v.min())
        card = int(v.max()) - lo + 1
        if card <= max(len(v), 1 << 16):
            return v - lo, card, None
        distinct, codes = np.unique(v, return_inverse=True)  # a wide range (history imports): dense codes
        return codes.astype(np.int64).ravel(), len(distinct), None
    d = col if pa.types.is_dictionary(col.type) else pc.dictionary_encode(col)
    order = pc.sort_indices(d.dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    codes = rank[d.indices.to_numpy(zero_copy_only=False)]
    return codes, max(len(order), 1), d.dictionary.take(pa.array(order))


def _sum_maps_sorted(gid: np.ndarray, n_groups: int, maps: pa.ChunkedArray | pa.Array) -> pa.Array:
    """:func:`_sum_maps` with one sort and ``np.add.reduceat`` (no inverse index, no ``np.add.at``, which is
    slow on large arrays): the same maps, keys ascending."""
    chunks = maps.chunks if isinstance(maps, pa.ChunkedArray) else [maps]
    maps = pa.concat_arrays(chunks)
    offsets = maps.offsets.to_numpy()
    keys = maps.keys.to_numpy()[offsets[0]:offsets[-1]].astype(np.int64)
    counts = maps.items.to_numpy()[offsets[0]:offsets[-1]]
    out_offsets = np.zeros(n_groups + 1, dtype=np.int32)
    if len(keys) == 0:
        return pa.MapArray.from_arrays(pa.array(out_offsets), pa.array([], pa.uint16()), pa.array([], pa.uint64()),
                                       type=_MAP)
    pair = group_bucket_keys(np.repeat(gid, np.diff(offsets)), keys, n_groups)
    order = np.argsort(pair)
    pair = pair[order]
    starts = np.flatnonzero(np.concatenate(([True], pair[1:] != pair[:-1])))
    total = np.add.reduceat(counts[order], starts)
    pair = pair[starts]
    np.cumsum(np.bincount(pair // 65536, minlength=n_groups), out=out_offsets[1:])
    return pa.MapArray.from_arrays(pa.array(out_offsets), pa.array((pair % 65536).astype(np.uint16)),
                                   pa.array(total.astype(np.uint64)), type=_MAP)
