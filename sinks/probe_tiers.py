"""The probe tiers the store writer inserts: minute rows merged per key, and the two hourly tiers from them.

The worker computes the minute tier per source message (:mod:`schemas.minute_tier`);
the store writer merges a block's minute rows per key and rolls them up into
``probes_1h_rnic`` and ``probes_1h_tor`` itself, one insert per tier under the
block's token (docs/storage.md "Exactly-once rows"). The store has no materialized views
on the tiers (schemas/ddl/013): views grouped and joined every minute row on
insert, and cost more than the raw rows' insert (BENCHMARKS.md section 4).

ToRs come from ``rnic_inventory`` as the views had them (schemas/ddl/005): the
newest ToR of each RNIC when the block is inserted; an RNIC missing there rolls
up under ToR ``''``.

Anything else that writes probe rows (history imports, benchmarks, tests) goes
through :func:`insert_probes`, which computes the same tiers with the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.minute_tier import merge_tier_rows, minute_rows
from sinks.clickhouse import Store

MINUTE_TABLE = "probes_1m"
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


def insert_probes(store: Store, enriched: pa.Table, dedup_token: str, keep_raw: bool = True) -> None:
    """Insert the tiers of ``enriched`` (minute, then the hourly ones), then the raw rows.

    Args:
        store: a migrated store.
        enriched: ``probe_enriched.v1`` rows (or the subset of columns the tier needs: ``t1``,
            ``upload_ns``, ``pinglist``, RNICs, ``status``, the three RTT columns, ``batch_id``).
        dedup_token: the batch identity; one token per table, so a replay is a no-op in every tier.
        keep_raw: False to store the tiers only.

    Raises:
        sinks.clickhouse.StoreError: the store refused an insert (nothing after it was tried).
    """
    for table, rows in tier_tables(minute_rows(enriched), tor_of_rnic(store)).items():
        store.insert_arrow(table, rows, dedup_token=dedup_token, settings=TIER_INSERT_SETTINGS)
    if keep_raw:
        store.insert_arrow("probes", enriched, dedup_token=dedup_token)
