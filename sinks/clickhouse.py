"""One ClickHouse store interface, two drivers: a server (clickhouse-connect) and embedded chdb.

The same DDL (:mod:`schemas.migrations`) and SQL run on both. Inserts take
Arrow tables and carry a deduplication token, so a replayed batch is a no-op
(ClickHouse ``insert_deduplication_token`` with ``non_replicated_deduplication_window``
on the table; ``deduplicate_blocks_in_dependent_materialized_views`` keeps
rollups exact too).

chdb allows one process per store path (a second gets ``Cannot lock file``);
the process that owns the store serves queries on a local endpoint
(:mod:`sinks.query_endpoint`).

Two kinds of SQL reach a store. The project's own statements (migrations, inserts,
the typed writes of :mod:`sinks.history`) go through ``command``/``query_arrow``/
``insert_arrow``. A user's text goes through ``query_readonly`` only: checked by
:class:`sinks.readonly_sql.ReadonlyGuard` and run with ``readonly = 1`` and the
:class:`sinks.readonly_sql.QueryLimits`, on its own connection(s), so a long query
never holds the lock the inserts take.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from schemas.migrations import LEDGER_DDL, migrations
from sinks.readonly_sql import QueryLimits, ReadonlyGuard
from sinks.store_errors import StoreError

__all__ = ["ChdbStore", "QueryLimits", "ServerStore", "Store", "StoreError", "StoreLane", "migrate",
           "open_store", "private_dir"]

_TOKEN_OK = re.compile(r"^[A-Za-z0-9_.:/\-]{1,200}$")
_SETTING_NAME = re.compile(r"^[a-z][a-z0-9_]{0,99}$")
INSERT_SETTINGS = {"deduplicate_blocks_in_dependent_materialized_views": 1}


class Store(Protocol):
    """What every driver offers. Tables are pyarrow tables; SQL is ClickHouse SQL."""

    def command(self, sql: str) -> None:
        """Run a statement that returns nothing."""

    def query_arrow(self, sql: str) -> pa.Table:
        """Run one of the project's own queries and return its result as a pyarrow table."""

    def query_readonly(self, sql: str, short: bool = False) -> pa.Table:
        """Run a user's SQL read-only under the store's limits (``short``: on the reader kept for
        short queries, under :meth:`QueryLimits.short_lane`).

        Raises:
            sinks.readonly_sql.QueryRefused: it would write, change a setting or reach outside the store.
            StoreError: the engine's error (syntax, a limit exceeded, an unknown table).
        """

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None,
                     settings: Mapping[str, int] | None = None) -> None:
        """Insert ``data`` into ``table``; a repeated ``dedup_token`` is ignored by the engine. ``settings``:
        extra integer query settings of this insert (e.g. ``optimize_on_insert = 0`` for rows already merged)."""

    def insert_lane(self) -> StoreLane:
        """A second connection to this store for the project's own statements, serialised apart from this
        one's: statements on the lane never wait for this store's, nor these for the lane's. The store
        writer's block inserts (a million rows, seconds of the engine) run on a lane in their thread, so a
        verdict inserted meanwhile waits for no block. The lane is closed by its user or with the store.

        Raises:
            StoreError: the store could not open another connection.
        """

    def close(self) -> None:
        """Release the store."""


class StoreLane(Protocol):
    """A connection of :meth:`Store.insert_lane`: the project's own statements, nothing a user typed."""

    def command(self, sql: str) -> None:
        """Run a statement that returns nothing."""

    def query_arrow(self, sql: str) -> pa.Table:
        """Run one of the project's own queries and return its result as a pyarrow table."""

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None,
                     settings: Mapping[str, int] | None = None) -> None:
        """As :meth:`Store.insert_arrow`."""

    def close(self) -> None:
        """Release the connection (again: nothing)."""


def private_dir(path: str | Path) -> Path:
    """Create ``path`` (and missing parents) readable by its owner only (0700); tighten an existing
    ``path`` we own too (older versions created it world-readable). Parents that existed are left alone."""
    p = Path(path)
    for d in reversed([p, *p.parents]):
        if not d.exists():
            d.mkdir(mode=0o700, exist_ok=True)
            os.chmod(d, 0o700)  # mkdir's mode is cut by the umask
    if p.stat().st_uid == os.geteuid():
        os.chmod(p, 0o700)
    return p


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

    def __init__(self, path: str | Path, limits: QueryLimits | None = None, readers: int | None = None) -> None:
        from chdb import session

        self.path = private_dir(path)
        self.limits = limits or QueryLimits()
        try:
            self._session = session.Session(str(self.path))
        except Exception as err:  # chdb raises a bare RuntimeError on a locked store
            raise StoreError(
                f"cannot open the embedded store {self.path}: {err}. Another process (the pipeline's sink) "
                "owns it; query through it, or stop it first."
            ) from None
        # One session for the project's own statements (inserts, migrations), serialised by its lock, and
        # one more per insert lane; user queries use up to ``readers`` read-only sessions of their own (chdb
        # runs sessions concurrently), so a long query never holds that lock; plus one reader kept for short
        # queries (its own time limit), so they answer while long ones fill the others.
        self._own = _ChdbStatements(self._session)
        self._lanes: list[_ChdbStatements] = []
        self._readers: dict[bool, queue.LifoQueue[Any]] = {False: queue.LifoQueue(), True: queue.LifoQueue()}
        for short, n in ((False, self.limits.readers if readers is None else readers), (True, 1)):
            for _ in range(n):
                self._readers[short].put(None)  # opened on first use
        self._all_readers: list[Any] = []
        self.guard = ReadonlyGuard(lambda q: self._reader_text(q, False))
        self._short_guard = ReadonlyGuard(lambda q: self._reader_text(q, True))

    def _open_reader(self, short: bool) -> Any:
        from chdb import session

        s = session.Session(str(self.path))
        limits = self.limits.short_lane() if short else self.limits
        # Limits first: once readonly = 1 is set, no setting of this session can change again.
        s.query("SET " + ", ".join(f"{k} = {_setting_literal(v)}" for k, v in limits.settings().items()
                                   if k != "readonly"))
        s.query("SET readonly = 1")
        self._all_readers.append(s)
        return s

    def _on_reader(self, sql: str, fmt: str, short: bool = False) -> Any:
        s = self._readers[short].get()
        try:
            if s is None:
                s = self._open_reader(short)
            return s.query(sql, fmt)
        except Exception as err:
            # chdb leaks a failed query's partial output into the session's next result: drop it.
            if s is not None:
                self._all_readers.remove(s)
                s.close()
                s = None
            raise StoreError(f"{err}\nquery: {sql[:300]}") from None
        finally:
            self._readers[short].put(s)

    def _reader_text(self, sql: str, short: bool) -> str:
        return self._on_reader(sql, "TabSeparatedRaw", short).bytes().decode()

    def query_readonly(self, sql: str, short: bool = False) -> pa.Table:
        guard = self._short_guard if short else self.guard
        return self._on_reader(guard.check(sql), "ArrowTable", short)

    def command(self, sql: str) -> None:
        self._own.command(sql)

    def query_arrow(self, sql: str) -> pa.Table:
        return self._own.query_arrow(sql)

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None,
                     settings: Mapping[str, int] | None = None) -> None:
        self._own.insert_arrow(table, data, dedup_token, settings)

    def insert_lane(self) -> StoreLane:
        from chdb import session

        try:
            lane = _ChdbStatements(session.Session(str(self.path)))
        except Exception as err:
            raise StoreError(f"cannot open another session on the embedded store {self.path}: {err}") from None
        self._lanes.append(lane)
        return lane

    def close(self) -> None:
        for lane in self._lanes:
            lane.close()
        with self._own.lock:
            for s in self._all_readers:
                s.close()
        self._own.close()


class _ChdbStatements:
    """One chdb session for the project's own statements, one at a time (its lock): a :class:`ChdbStore`'s
    own, or one of its insert lanes (:meth:`Store.insert_lane`)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.lock = threading.Lock()
        self._closed = False

    def command(self, sql: str) -> None:
        with self.lock:
            try:
                self._session.query(sql)
            except Exception as err:
                raise StoreError(f"{err}\nstatement: {sql[:300]}") from None

    def query_arrow(self, sql: str) -> pa.Table:
        with self.lock:
            try:
                return self._session.query(sql, "ArrowTable")
            except Exception as err:
                raise StoreError(f"{err}\nquery: {sql[:300]}") from None

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None,
                     settings: Mapping[str, int] | None = None) -> None:
        if data.num_rows == 0:
            return
        cols = ", ".join(f"`{c}`" for c in data.column_names)
        opts = _insert_settings(settings)
        if dedup_token:
            opts["insert_deduplication_token"] = f"'{_check_token(dedup_token)}'"
        setting_sql = ", ".join(f"{k} = {v}" for k, v in opts.items())
        arrow_data = data  # noqa: F841 - chdb's Python() table function finds it by name in this frame
        self.command(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM Python(arrow_data) SETTINGS {setting_sql}")

    def close(self) -> None:
        with self.lock:
            if not self._closed:
                self._closed = True
                self._session.close()


class ServerStore:
    """A ClickHouse server through clickhouse-connect (``CLICKHOUSE_URL``, e.g. ``http://user:pw@host:8123/db``).

    Credentials come from the URL (from the environment or a file); they are never logged.
    """

    def __init__(self, url: str, limits: QueryLimits | None = None) -> None:
        import clickhouse_connect

        self.limits = limits or QueryLimits()
        self._url = url  # for insert lanes; never logged
        try:
            self._client = clickhouse_connect.get_client(dsn=url)
        except Exception as err:
            raise StoreError(f"cannot reach the ClickHouse server at CLICKHOUSE_URL: {type(err).__name__}") from None
        self.guard = ReadonlyGuard(self._readonly_text)

    def _readonly_text(self, sql: str) -> str:
        try:
            return self._client.raw_query(sql, settings=self.limits.settings(), fmt="TabSeparatedRaw").decode()
        except Exception as err:
            raise StoreError(f"{err}\nquery: {sql[:300]}") from None

    def query_readonly(self, sql: str, short: bool = False) -> pa.Table:
        checked = self.guard.check(sql)
        limits = self.limits.short_lane() if short else self.limits
        try:
            return self._client.query_arrow(checked, settings=limits.settings())
        except Exception as err:
            raise StoreError(f"{err}\nquery: {sql[:300]}") from None

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

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None,
                     settings: Mapping[str, int] | None = None) -> None:
        if data.num_rows == 0:
            return
        opts = _insert_settings(settings)
        if dedup_token:
            opts["insert_deduplication_token"] = _check_token(dedup_token)
        try:
            self._client.insert_arrow(table, data, settings=opts)
        except Exception as err:
            raise StoreError(f"insert into {table} failed: {err}") from None

    def insert_lane(self) -> StoreLane:
        # a client of its own: clickhouse-connect refuses two statements at once in one client's session
        return ServerStore(self._url, self.limits)

    def close(self) -> None:
        self._client.close()


def _insert_settings(extra: Mapping[str, int] | None) -> dict[str, object]:
    """:data:`INSERT_SETTINGS` plus ``extra`` (names checked: they are spliced into SQL)."""
    out: dict[str, object] = dict(INSERT_SETTINGS)
    for k, v in (extra or {}).items():
        if not _SETTING_NAME.match(k):
            raise StoreError(f"insert setting {k!r} is not a setting name")
        out[k] = int(v)
    return out


def _setting_literal(v: object) -> str:
    return f"'{v}'" if isinstance(v, str) else str(v)


def open_store(path: str | Path, url: str | None = None, limits: QueryLimits | None = None) -> Store:
    """A server store when ``url`` is set, else the embedded store at ``path``; user queries on it
    run under ``limits`` (default :class:`QueryLimits`)."""
    return ServerStore(url, limits) if url else ChdbStore(path, limits)


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
