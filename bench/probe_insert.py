"""Probe rows into the store with their tiers, as in production: for history imports, benchmarks and tests.

The worker computes the minute tier (:mod:`schemas.probe_rows.minute_tier`) and the store writer merges and
rolls it up (:mod:`sinks.probe_tiers`); anything else that writes ``probe_enriched.v1`` rows computes both
here with the same functions, so its tiers are the ones the pipeline would have stored.
"""

from __future__ import annotations

import pyarrow as pa

from schemas.probe_rows.minute_tier import minute_rows
from sinks.clickhouse import Store
from sinks.probe_tiers import TIER_INSERT_SETTINGS, tier_tables, tor_of_rnic


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
