"""Open the store the way the user's situation needs: server, running sink, or embedded directly.

User SQL always runs read-only (:meth:`sinks.clickhouse.Store.query_readonly`); the two
commands that write use typed operations (:func:`record_feedback`, :func:`load_inventory`),
through the running sink's endpoint when one owns the embedded store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import pyarrow as pa

from fabricscope.settings import Settings

T = TypeVar("T")


def _on_store(s: Settings, remote: Callable, local: Callable[..., T]) -> T:  # noqa: ANN401
    """``remote(endpoint)`` when a running sink owns the embedded store, else ``local(store)`` on the
    store opened here (server or embedded, migrated)."""
    from sinks.clickhouse import migrate, open_store
    from sinks.query_endpoint import find_endpoint

    if not s.clickhouse_dsn():
        endpoint = find_endpoint(s.store_path)
        if endpoint:
            return remote(endpoint)
        _refuse_while_a_writer_starts(s)
    store = open_store(s.store_path, s.clickhouse_dsn(), s.query_limits())
    try:
        migrate(store)
        return local(store)
    finally:
        store.close()


def _refuse_while_a_writer_starts(s: Settings) -> None:
    """Opening the embedded store here while ``up`` (or ``demo``) starts its store writer would take the store from
    it (chdb allows one process): say so instead.

    Raises:
        sinks.store_errors.StoreError: a live ``up``/``demo`` holds this ``FABRICSCOPE_VAR`` and its store writer
            serves no endpoint yet.
    """
    import os

    from infra.runlock import holder
    from sinks.store_errors import StoreError

    pid = holder(s.fabricscope_var / "up.lock")
    if pid is not None and pid != os.getpid():
        raise StoreError(f"the store writer of the pipeline running here (pid {pid or '?'}) has not opened "
                         f"{s.store_path} yet; try again in a few seconds")


def run_query(s: Settings, sql: str) -> pa.Table:
    """Run a user's ``sql`` read-only, under the configured limits: on the server when
    ``CLICKHOUSE_URL`` is set, through a running sink's endpoint when one owns the embedded store,
    else by opening the embedded store here.

    Raises:
        sinks.readonly_sql.QueryRefused: the SQL would write, change a setting or reach outside the store.
        sinks.clickhouse.StoreError: the engine's error (syntax, a limit exceeded, ...).
    """
    # The client waits past the engine's own limit, so the engine's message is what the user sees.
    timeout = s.fabricscope_query_max_execution_time_s + 30
    return _on_store(s, lambda e: e.query(sql, timeout), lambda store: store.query_readonly(sql))


def record_feedback(s: Settings, verdict_id: str, decision: str, note: str = "", operator: str = "") -> None:
    """:func:`sinks.history.record_feedback` on the store (through the running sink when there is one)."""
    from sinks import history

    _on_store(s, lambda e: e.record_feedback(verdict_id, decision, note, operator),
              lambda store: history.record_feedback(store, verdict_id, decision, note, operator))


def load_inventory(s: Settings, rnics: Iterable[tuple[str, str, str]]) -> int:
    """:func:`sinks.history.load_inventory` on the store; returns the RNICs written."""
    from sinks import history

    rows = list(rnics)
    return _on_store(s, lambda e: e.load_inventory(rows), lambda store: history.load_inventory(store, rows))


def selected_origin(s: Settings, asked: str | None = None) -> str:
    """The verdict origin a command shows: ``asked`` (``all`` or ``''`` = every origin), else the running store
    writer's (``up --source lab`` shows lab verdicts), else ``FABRICSCOPE_ORIGIN`` when set, else every origin
    (``''``).

    Raises:
        sinks.origin.OriginError: ``asked`` is none of production, lab, sim, demo, all.
    """
    import os

    from sinks.origin import check, read_running
    from sinks.query_endpoint import find_endpoint

    if asked is not None:
        return "" if asked in ("", "all") else check(asked)
    if not s.clickhouse_dsn():
        try:
            running = read_running(s.store_path) if find_endpoint(s.store_path) else None
        except Exception:  # an endpoint we may not read: no running origin to follow
            running = None
        if running:
            return running
    return s.fabricscope_origin if os.environ.get("FABRICSCOPE_ORIGIN") else ""
