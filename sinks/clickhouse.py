"""One ClickHouse store interface, two drivers: a server (clickhouse-connect) and embedded chdb.

The same DDL (:mod:`schemas.migrations`) and SQL run on both. Inserts take
Arrow tables and carry a deduplication token, so a replayed batch is a no-op
(ClickHouse ``insert_deduplication_token`` with ``non_replicated_deduplication_window``
on the table; ``deduplicate_blocks_in_dependent_materialized_views`` keeps
rollups exact too).

chdb allows one process per store path (a second gets ``Cannot lock file``);
the process that owns the store serves queries on a local endpoint
(:mod:`sinks.query_endpoint`).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from schemas.migrations import LEDGER_DDL, migrations

_TOKEN_OK = re.compile(r"^[A-Za-z0-9_.:/\-]{1,200}$")
INSERT_SETTINGS = {"deduplicate_blocks_in_dependent_materialized_views": 1}


class StoreError(RuntimeError):
    """The store refused a statement or could not be opened; the message says which and why."""


class Store(Protocol):
    """What every driver offers. Tables are pyarrow tables; SQL is ClickHouse SQL."""

    def command(self, sql: str) -> None:
        """Run a statement that returns nothing."""

    def query_arrow(self, sql: str) -> pa.Table:
        """Run a query and return its result as a pyarrow table."""

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None) -> None:
        """Insert ``data`` into ``table``; a repeated ``dedup_token`` is ignored by the engine."""

    def close(self) -> None:
        """Release the store."""


def _check_token(token: str) -> str:
    if not _TOKEN_OK.match(token):
        raise StoreError(f"dedup token {token!r} has characters outside [A-Za-z0-9_.:/-]")
    return token


class ChdbStore:
    """Embedded ClickHouse (chdb) under ``path``; one process per path.

    Raises:
        StoreError: the path is locked by another process (the running pipeline);
            the message says to use ``fabricscope query`` through the running sink.
    """

    def __init__(self, path: str | Path) -> None:
        from chdb import session

        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            self._session = session.Session(str(self.path))
        except Exception as err:  # chdb raises a bare RuntimeError on a locked store
            raise StoreError(
                f"cannot open the embedded store {self.path}: {err}. Another process (the pipeline's sink) "
                "owns it; query through it, or stop it first."
            ) from None
        # chdb sessions are not safe for concurrent use (the sink thread and the query endpoint).
        self._lock = threading.Lock()

    def command(self, sql: str) -> None:
        with self._lock:
            try:
                self._session.query(sql)
            except Exception as err:
                raise StoreError(f"{err}\nstatement: {sql[:300]}") from None

    def query_arrow(self, sql: str) -> pa.Table:
        with self._lock:
            try:
                return self._session.query(sql, "ArrowTable")
            except Exception as err:
                raise StoreError(f"{err}\nquery: {sql[:300]}") from None

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None) -> None:
        if data.num_rows == 0:
            return
        cols = ", ".join(f"`{c}`" for c in data.column_names)
        settings = dict(INSERT_SETTINGS)
        if dedup_token:
            settings["insert_deduplication_token"] = f"'{_check_token(dedup_token)}'"
        setting_sql = ", ".join(f"{k} = {v}" for k, v in settings.items())
        arrow_data = data  # noqa: F841 - chdb's Python() table function finds it by name in this frame
        self.command(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM Python(arrow_data) SETTINGS {setting_sql}")

    def close(self) -> None:
        with self._lock:
            self._session.close()


class ServerStore:
    """A ClickHouse server through clickhouse-connect (``CLICKHOUSE_URL``, e.g. ``http://user:pw@host:8123/db``).

    Credentials come from the URL (from the environment or a file); they are never logged.
    """

    def __init__(self, url: str) -> None:
        import clickhouse_connect

        try:
            self._client = clickhouse_connect.get_client(dsn=url)
        except Exception as err:
            raise StoreError(f"cannot reach the ClickHouse server at CLICKHOUSE_URL: {type(err).__name__}") from None

    def command(self, sql: str) -> None:
        try:
            self._client.command(sql)
        except Exception as err:
            raise StoreError(f"{err}\nstatement: {sql[:300]}") from None

    def query_arrow(self, sql: str) -> pa.Table:
        try:
            return self._client.query_arrow(sql)
        except Exception as err:
            raise StoreError(f"{err}\nquery: {sql[:300]}") from None

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None) -> None:
        if data.num_rows == 0:
            return
        settings: dict[str, object] = dict(INSERT_SETTINGS)
        if dedup_token:
            settings["insert_deduplication_token"] = _check_token(dedup_token)
        try:
            self._client.insert_arrow(table, data, settings=settings)
        except Exception as err:
            raise StoreError(f"insert into {table} failed: {err}") from None

    def close(self) -> None:
        self._client.close()


def open_store(path: str | Path, url: str | None = None) -> Store:
    """A server store when ``url`` is set, else the embedded store at ``path``."""
    return ServerStore(url) if url else ChdbStore(path)


def migrate(store: Store) -> list[str]:
    """Apply every migration not yet recorded; return the names applied now.

    Raises:
        StoreError: a statement failed; the message names the file.
    """
    store.command(LEDGER_DDL)
    done = {int(n) for n in store.query_arrow("SELECT number FROM schema_migrations")["number"].to_pylist()}
    applied = []
    for m in migrations():
        if m.number in done:
            continue
        for stmt in m.statements:
            try:
                store.command(stmt)
            except StoreError as err:
                raise StoreError(f"migration schemas/ddl/{m.name} failed: {err}") from None
        store.command(
            f"INSERT INTO schema_migrations VALUES ({m.number}, '{m.name}', {time.time_ns()})"
        )
        applied.append(m.name)
    return applied
