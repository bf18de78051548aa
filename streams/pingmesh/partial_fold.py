"""A window's partials folded into integer-coded sums as they arrive, so the reducer's close does not re-merge them.

:func:`streams.pingmesh.partial.merge` concatenates every partial of a window at its close and groups the
rows by their key columns, hashing each partial row's strings (the flows' hop strings above all: at 10,000
RNICs x 45 probes/s a window brings ~1.4 M flow rows in ~750 k groups, and that merge was 1.3-2.9 CPU s of
the close). A :class:`PartialFold` instead gives every key column of the open window a codebook (its distinct
values, each with a window-wide integer id, in order of first appearance) and keeps, per table, the sums
grouped by those ids. An arriving partial only hashes its own rows; the codebooks are probed against its
distinct values, not rehashed. Partials are folded in chunks (when the rows waiting reach a quarter of the
rows held, or at the result), so the integer group-by over the rows held runs a few times per window, not
once per worker step. :meth:`PartialFold.result` ranks each codebook in Arrow's sort order and emits the
tables sorted by their keys: table for table the partial :func:`~streams.pingmesh.partial.merge` returns
(sums are exact and grouping is associative; tested on simulated windows with random chunking).
:meth:`PartialFold.coded_result` also hands on those ranks as the keys of the tables' rows
(:data:`~streams.pingmesh.partial.PartialKeys`), so the analyzer groups the merged tables without hashing their
strings again (the flows' hop strings were ~0.8 CPU s of a 10,000-RNIC close).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import Key, coded_sums, group, to_numpy
from streams.pingmesh.partial import SUM_KEYS, PartialKeys, WindowPartial, merge_table

__all__ = ["PartialFold"]

_TABLES = [f.name for f in fields(WindowPartial) if f.name != "window_start_ns"]


@dataclass
class _Codebook:
    """Distinct values of one key column over a window, each with an id (order of first appearance; a null
    is a value of its own)."""

    values: pa.Array

    def ids(self, col: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Ids (int64) of ``col``'s rows; values not seen before get the next ids.

        The column's own rows are hashed once (dictionary encoding); the codebook is only probed against
        that chunk's distinct values (a probe per codebook entry, no new hash table over the codebook).
        """
        if isinstance(col, pa.ChunkedArray):  # one array: chunks encoded apart could get different dictionaries
            col = col.combine_chunks()
        d = pc.dictionary_encode(col, null_encoding="encode")
        distinct = d.dictionary
        of_distinct = np.full(len(distinct), -1, dtype=np.int64)
        if len(self.values) and len(distinct):
            pos = to_numpy(pc.fill_null(pc.index_in(self.values, value_set=distinct, skip_nulls=False), -1))
            hit = np.flatnonzero(pos >= 0)
            of_distinct[pos[hit]] = hit
        new = np.flatnonzero(of_distinct < 0)
        if len(new):
            of_distinct[new] = len(self.values) + np.arange(len(new), dtype=np.int64)
            self.values = pa.concat_arrays([self.values, distinct.take(pa.array(new, pa.int64()))])
        return of_distinct[to_numpy(d.indices).astype(np.int64)]

    def ranked(self, ids: np.ndarray) -> Key:
        """The key of rows given as ids: codes are the values' ranks in Arrow's ascending order (nulls last), as
        :func:`schemas.group_codes.key` ranks a column's values; the values are distinct already, so they are
        sorted, not hashed again."""
        order = pc.sort_indices(self.values)
        rank = np.empty(len(self.values), dtype=np.int64)
        rank[to_numpy(order).astype(np.int64)] = np.arange(len(self.values), dtype=np.int64)
        ordered = self.values.take(order)
        return Key(rank[ids], len(self.values), lambda c: ordered.take(pa.array(c, pa.int64())))


@dataclass
class _TableFold:
    """One table of the window (``pairs``, ``flows``, ...): sums per distinct key, keys as codebook ids."""

    keys: list[str]
    vals: list[str]
    schema: pa.Schema | None = None
    """the tables' schema (metadata dropped); a partial whose table has another one turns the fold raw"""
    empty: pa.Table | None = None
    """zero-row slices of every table folded, concatenated: the schema merge's concatenation has"""
    books: list[_Codebook] = field(default_factory=list)
    ids: list[np.ndarray] = field(default_factory=list)
    """codebook ids of the held rows, per key column (one row per key after a fold)"""
    sums: list[np.ndarray] = field(default_factory=list)
    waiting: list[pa.Table] = field(default_factory=list)
    raw: list[pa.Table] | None = None
    """set when schemas differ: the tables kept as they came (and what was folded, as one table), merged at the end"""

    @property
    def held(self) -> int:
        return len(self.ids[0]) if self.ids else 0

    def add(self, t: pa.Table) -> None:
        self.empty = t.slice(0, 0) if self.empty is None else pa.concat_tables(
            [self.empty, t.slice(0, 0)], promote_options="permissive")
        if self.raw is not None:
            self.raw.append(t)
            return
        plain = t.schema.remove_metadata()
        if self.schema is None:
            self.schema = plain
            self.books = [_Codebook(pa.array([], plain.field(k).type)) for k in self.keys]
        elif not plain.equals(self.schema):  # a schema change (a worker of another version): merge as before
            self.fold()
            self.raw = [*([self.table()] if self.held else []), t]
            self.ids, self.sums = [], []
            return
        if t.num_rows:
            self.waiting.append(t)

    def _with_waiting(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The held rows' ids and sums followed by the waiting tables' rows (coded now; not grouped yet)."""
        if not self.waiting:
            return self.ids, self.sums
        t = pa.concat_tables(self.waiting) if len(self.waiting) > 1 else self.waiting[0]
        self.waiting = []
        ids = [b.ids(t[k]) for b, k in zip(self.books, self.keys, strict=True)]
        vals = [to_numpy(pc.fill_null(t[v], 0)).astype(np.int64) for v in self.vals]
        if self.ids:
            ids = [np.concatenate([a, b]) for a, b in zip(self.ids, ids, strict=True)]
            vals = [np.concatenate([a, b]) for a, b in zip(self.sums, vals, strict=True)]
        return ids, vals

    def fold(self) -> None:
        """Group the waiting tables' rows with the rows held, on the codebook ids."""
        if not self.waiting:
            return
        ids, vals = self._with_waiting()
        g = group([Key(i, max(len(b.values), 1), _no_values) for i, b in zip(ids, self.books, strict=True)])
        self.ids = g.codes
        self.sums = [np.bincount(g.gid, weights=v, minlength=g.n_groups).round().astype(np.int64) for v in vals]

    def table(self) -> pa.Table:
        """The held sums as a table (unordered), of the tables' schema."""
        cols = [b.values.take(pa.array(i, pa.int64())) for b, i in zip(self.books, self.ids, strict=True)]
        cols += [pa.array(s, pa.int64()) for s in self.sums]
        return pa.Table.from_arrays(cols, names=[*self.keys, *self.vals]).cast(
            pa.schema([self.schema.field(n) for n in [*self.keys, *self.vals]]))

    def result(self, name: str) -> tuple[pa.Table, dict[str, Key] | None]:
        """What :func:`merge` makes of every table added (sums per key, sorted by the keys), and the keys of its
        rows (column → :class:`Key`: the codebook ranks, as :func:`schemas.group_codes.key` of the column would
        code it; None when the tables were merged raw)."""
        if self.raw is not None:
            return merge_table(name, self.raw), None
        ids, vals = self._with_waiting()  # grouped with the held rows by the sort below, not by a fold first
        self.ids, self.sums = ids, vals  # held as they are (a key may repeat: every reader sums per key)
        if not ids or not len(ids[0]):  # no rows: merge's own empty result, of the concatenated schema
            return merge_table(name, [self.empty]), None
        ranked = [b.ranked(i) for b, i in zip(self.books, ids, strict=True)]
        g, keys = coded_sums(self.keys, ranked, {v: s for v, s in zip(self.vals, vals, strict=True)})
        promoted = self.empty.schema
        fs = [f.with_nullable(promoted.field(f.name).nullable) if f.name in self.keys else f for f in g.schema]
        return pa.Table.from_arrays(g.columns, schema=pa.schema(fs)), dict(zip(self.keys, keys, strict=True))


def _no_values(codes: np.ndarray) -> pa.Array:
    raise TypeError("codebook ids are for grouping; the values come from the codebook")


@dataclass
class PartialFold:
    """The partials of one window, folded as they come (see the module docstring); :meth:`result` is their merge.

    Memory: the codebooks and one row per distinct key held (not every partial's rows), plus the partials
    waiting for the next fold (at most a quarter of the rows held, or ``min_rows``).

    Attributes:
        window_start_ns: the window (ns since the epoch).
        min_rows: rows that may wait before a fold (a fold is an integer group-by over every row held, so
            folding each small worker step would cost more than the merge it replaces).
    """

    window_start_ns: int
    min_rows: int = 1 << 17
    tables: dict[str, _TableFold] = field(default_factory=dict)
    uploads: list[pa.Table] = field(default_factory=list)
    waiting_rows: int = 0
    partials: int = 0

    def __post_init__(self) -> None:
        self.tables = {n: _TableFold(*SUM_KEYS[n]) for n in _TABLES if n != "uploads"}

    def add(self, p: WindowPartial) -> None:
        """Fold in one partial of this window.

        Raises:
            ValueError: the partial is of another window.
        """
        if p.window_start_ns != self.window_start_ns:
            raise ValueError(f"a partial of window {p.window_start_ns} folded into window {self.window_start_ns}")
        self.partials += 1
        self.uploads.append(p.uploads)
        for n, tf in self.tables.items():
            t = getattr(p, n)
            tf.add(t)
            self.waiting_rows += t.num_rows
        if self.waiting_rows >= max(self.min_rows, sum(tf.held for tf in self.tables.values()) // 4):
            for tf in self.tables.values():
                tf.fold()
            self.waiting_rows = 0

    def result(self) -> WindowPartial:
        """The merged partial: equal to :func:`streams.pingmesh.partial.merge` of every partial added.

        Raises:
            ValueError: no partial was added.
        """
        return self.coded_result()[0]

    def coded_result(self) -> tuple[WindowPartial, PartialKeys]:
        """:meth:`result`, and the keys of its tables' rows: table name → key column → :class:`Key` (the codebook's
        ranks: the codes :func:`schemas.group_codes.key` would give that column, known here without hashing it;
        for :func:`streams.pingmesh.analyzer.analyze_window`). A table merged raw (its schema changed mid-window)
        or empty has no keys.

        Raises:
            ValueError: no partial was added.
        """
        if not self.partials:
            raise ValueError("a PartialFold needs at least one WindowPartial")
        out, keys = {}, {}
        for n, tf in self.tables.items():
            out[n], k = tf.result(n)
            if k is not None:
                keys[n] = k
        out["uploads"] = merge_table("uploads", self.uploads)
        return WindowPartial(self.window_start_ns, **out), keys
