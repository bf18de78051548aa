"""Open the store the way the user's situation needs: server, running sink, or embedded directly."""

from __future__ import annotations

import pyarrow as pa

from fabricscope.settings import Settings


def run_query(s: Settings, sql: str) -> pa.Table:
    """Run ``sql``: on the server when ``CLICKHOUSE_URL`` is set, through a running sink's
    endpoint when one owns the embedded store, else by opening the embedded store here."""
    from sinks.clickhouse import migrate, open_store
    from sinks.query_endpoint import find_endpoint, query_remote

    if not s.clickhouse_dsn():
        url = find_endpoint(s.store_path)
        if url:
            return query_remote(url, sql)
    store = open_store(s.store_path, s.clickhouse_dsn())
    try:
        migrate(store)
        return store.query_arrow(sql)
    finally:
        store.close()
