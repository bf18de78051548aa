"""Writes of the history schema (``schemas/ddl/005_history.sql``, ``006_verdict_feedback.sql``):
the RNIC -> ToR inventory the ToR rollup joins, and operator feedback on verdicts.

The tiers themselves are filled by whoever inserts probe rows (the store writer, or
:func:`bench.probe_insert.insert_probes`); nothing here touches them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from sinks.clickhouse import Store, StoreError
from sinks.readonly_sql import sql_string as quote

DECISIONS = ("confirm", "reject")
_VERDICT_ID = re.compile(r"[A-Za-z0-9_.:/\-]{1,200}")


def load_inventory(store: Store, rnics: Iterable[tuple[str, str, str]], updated_ns: int | None = None) -> int:
    """Record (rnic, host, tor) triples in ``rnic_inventory``; the newest ``updated_ns`` per RNIC wins.

    Probe rows inserted afterwards roll up under these ToRs (``probes_1h_tor``).

    Returns:
        The number of RNICs written.
    """
    rows = list(rnics)
    if not rows:
        return 0
    stamp = updated_ns if updated_ns is not None else time.time_ns()
    data = pa.table(
        {
            "rnic": [r[0] for r in rows],
            "host": [r[1] for r in rows],
            "tor": [r[2] for r in rows],
            "updated_ns": pa.array([stamp] * len(rows), pa.int64()),
        }
    )
    store.insert_arrow("rnic_inventory", data)
    return len(rows)


def registry_inventory(registry: pa.Table) -> pa.Table:
    """``rnic_inventory`` rows of ``registry.v1`` rows: every agent registers its RNICs with their ToR, so the
    store writer learns the ToR names from the registry topic (any source: agents, the lab, the simulator),
    with no inventory file.

    Args:
        registry: ``registry.v1`` rows (``rnic``, ``host``, ``tor``, ``upload_ns`` in ns, ...).

    Returns:
        ``rnic``, ``host``, ``tor``, ``updated_ns`` (the registration's ``upload_ns``) of the rows that name
        a ToR (an entry without one never blanks a name already known); possibly no rows.
    """
    named = registry.filter(pc.fill_null(pc.not_equal(registry["tor"], ""), False))
    return pa.table({"rnic": named["rnic"], "host": named["host"], "tor": named["tor"],
                     "updated_ns": pc.cast(named["upload_ns"], pa.int64())})


def check_feedback(verdict_id: str, decision: str) -> None:
    """Raise :class:`StoreError` unless ``decision`` is confirm/reject and ``verdict_id`` is well formed."""
    if decision not in DECISIONS:
        raise StoreError(f"decision {decision!r}: use one of {', '.join(DECISIONS)}")
    if not _VERDICT_ID.fullmatch(verdict_id):  # match() with $ let a trailing newline through
        raise StoreError(f"verdict id {verdict_id!r} has characters outside [A-Za-z0-9_.:/-]")


def verdict_exists_sql(verdict_id: str) -> str:
    """A query answering ``n`` > 0 when a verdict has this id."""
    return f"SELECT count() AS n FROM verdicts WHERE verdict_id = {quote(verdict_id)}"


def feedback_sql(verdict_id: str, decision: str, note: str = "", operator: str = "", at_ns: int | None = None) -> str:
    """The INSERT that records one decision (checked by :func:`check_feedback`; text is quoted)."""
    check_feedback(verdict_id, decision)
    at = at_ns if at_ns is not None else time.time_ns()
    return (
        "INSERT INTO verdict_feedback (verdict_id, decision, note, operator, at_ns) VALUES "
        f"({quote(verdict_id)}, {quote(decision)}, {quote(note)}, {quote(operator)}, {int(at)})"
    )


NO_VERDICT_HINT = (
    "list recent ones with `fabricscope query top_suspects` or "
    "`fabricscope query \"SELECT verdict_id, kind, location FROM verdicts\"`"
)


def record_feedback(store: Store, verdict_id: str, decision: str, note: str = "", operator: str = "",
                    at_ns: int | None = None) -> None:
    """Store an operator's decision on a verdict; ``precision.sql`` turns them into precision per kind.

    Args:
        verdict_id: the verdict's id (``verdicts.verdict_id``).
        decision: ``confirm`` (the fault was real and where the verdict said) or ``reject``.
        note: free text, what the operator found.
        operator: who decided (default: empty).
        at_ns: when, ns since the epoch (default now).

    Raises:
        StoreError: the decision is not confirm/reject, the id has odd characters, or no verdict has it.
    """
    check_feedback(verdict_id, decision)
    if not store.query_arrow(verdict_exists_sql(verdict_id))["n"][0].as_py():
        raise StoreError(f"no verdict {verdict_id!r} in the store; {NO_VERDICT_HINT}")
    store.command(feedback_sql(verdict_id, decision, note, operator, at_ns))
