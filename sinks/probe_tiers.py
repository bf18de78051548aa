"""Probe rows into the store with their minute tier, for loaders outside the stream.

In the pipeline the worker computes the minute tier and the store writer inserts
what it receives (:mod:`sinks.kafka_sink`); ``probes`` has no views. Anything
else that writes probe rows (history imports, benchmarks, tests) goes through
:func:`insert_probes`, which computes the same tier with the worker's function.
"""

from __future__ import annotations

import pyarrow as pa

from schemas.minute_tier import minute_rows
from sinks.clickhouse import Store


def insert_probes(store: Store, enriched: pa.Table, dedup_token: str, keep_raw: bool = True) -> None:
    """Insert the minute tier of ``enriched`` (the hourly tiers follow by view), then the raw rows.

    Args:
        store: a migrated store.
        enriched: ``probe_enriched.v1`` rows (or the subset of columns the tier needs: ``t1``,
            ``upload_ns``, ``pinglist``, RNICs, ``status``, the three RTT columns, ``batch_id``).
        dedup_token: the batch identity; one token per table, so a replay is a no-op in every tier.
        keep_raw: False to store the tiers only.

    Raises:
        sinks.clickhouse.StoreError: the store refused an insert (nothing after it was tried).
    """
    store.insert_arrow("probes_1m", minute_rows(enriched).drop_columns(["batch_id"]), dedup_token=dedup_token)
    if keep_raw:
        store.insert_arrow("probes", enriched, dedup_token=dedup_token)
