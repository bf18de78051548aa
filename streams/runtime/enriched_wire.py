"""A step's store rows as they go to ``probes.enriched``: key string columns dictionary-encoded per message.

A ``probe_enriched.v1`` row carries ~120 bytes of strings among ~225 bytes; within one raw message they
repeat (one agent, host and batch id; a few prober RNICs; the peers of its pinglists). The eight string
columns the worker step dictionary-encodes anyway for its group-bys (:data:`COLUMNS`:
:data:`schemas.codec.WIRE_DICTIONARIES`) go as Arrow dictionary arrays with int8/int16 indices, one
dictionary per message: ~153 bytes per row on the wire instead of ~225 (the 6,000-row uploads of ``bench
throughput``), so the broker stores and serves less, the store writer validates less text, and ClickHouse
takes the dictionaries into its ``LowCardinality``/``String`` columns as they are (the same rows:
``tests/test_enriched_wire.py``). The receiving end is :func:`schemas.codec.decode` with
``dictionary_strings`` (the store writer) or without it (everyone else: plain strings again).

No string is hashed here: the step's codes (one dictionary over all its good rows, values in order of
first appearance) are cut per message with integer work only. IPs, status and job id stay plain: the step
does not encode them, and hashing them here cost the worker more than their bytes save it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.codec import WIRE_DICTIONARIES

_INDEX_TYPES = ((127, pa.int8(), np.int8), (32767, pa.int16(), np.int16))


def _index_type(size: int) -> tuple[pa.DataType, type]:
    """The narrowest signed index type (Arrow's, numpy's) for a dictionary of ``size`` values."""
    for most, arrow, numpy in _INDEX_TYPES:
        if size <= most:
            return arrow, numpy
    return pa.int32(), np.int32


COLUMNS = WIRE_DICTIONARIES["probe_enriched.v1"]
"""The string columns sent dictionary-encoded: those the step encodes for its group-bys anyway. The others
(IPs, status, job) stay plain: encoding them would cost the worker a hash per row, more than their bytes."""


def _encode_alone(col: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """One message's column dictionary-encoded on its own (values in order of first appearance)."""
    d = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    return d.cast(pa.dictionary(_index_type(len(d.dictionary))[0], pa.string()))


def _renumbered(codes: pa.DictionaryArray, bounds: np.ndarray) -> list[pa.DictionaryArray]:
    """``codes`` (a step's column, dictionary-encoded over all its rows) cut at ``bounds`` (message i holds
    rows ``bounds[i]:bounds[i+1]``), each piece with a dictionary of its own. Integer work only.

    The step's codes number values in order of first appearance, so a message's values mostly span a short
    run of codes (one agent, host and batch; the few RNICs of that host): the piece's dictionary is then that
    run of the step's dictionary (a zero-copy slice; it may hold a few values the message does not use) and
    its indices the codes minus the run's start. Where the run is long (a message's peers spread over the
    step's), :func:`_compacted` keeps only the values used."""
    x = np.asarray(codes.indices.to_numpy(zero_copy_only=False)) if codes.null_count == 0 else \
        np.asarray(pc.fill_null(codes.indices, 0).to_numpy(zero_copy_only=False))
    valid = None if codes.null_count == 0 else np.asarray(codes.is_valid().to_numpy(zero_copy_only=False))
    out = []
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        part, mask = x[lo:hi], None if valid is None else ~valid[lo:hi]
        seen = part if mask is None else part[~mask]
        if len(seen) == 0:  # no rows, or every row null: an empty dictionary
            out.append(pa.DictionaryArray.from_arrays(pa.array(np.zeros(hi - lo, np.int8), mask=mask),
                                                      codes.dictionary.slice(0, 0)))
            continue
        first, last = int(seen.min()), int(seen.max())
        span = last - first + 1
        if span <= max(RUN_VALUES, (hi - lo) // 4):
            index_type, np_type = _index_type(span)
            local = (part - first).astype(np_type)
            if mask is not None:
                local[mask] = 0
            out.append(pa.DictionaryArray.from_arrays(pa.array(local, index_type, mask=mask),
                                                      codes.dictionary.slice(first, span)))
        else:
            out.append(_compacted(part, mask, seen, codes.dictionary))
    return out


RUN_VALUES = 256
"""A message's dictionary may be a run of up to this many step values (or a quarter of its rows) as it is."""


def _compacted(part: np.ndarray, mask: np.ndarray | None, seen: np.ndarray, dictionary: pa.Array
               ) -> pa.DictionaryArray:
    """One message's codes ``part`` (``mask``: null rows; ``seen``: its non-null codes) re-numbered over only
    the values it uses, in the step dictionary's order."""
    present = np.bincount(seen, minlength=len(dictionary)) > 0
    used = np.flatnonzero(present)
    index_type, np_type = _index_type(len(used))
    new_code = (np.cumsum(present) - 1).astype(np_type)
    local = new_code[part]
    return pa.DictionaryArray.from_arrays(pa.array(local, index_type, mask=mask), dictionary.take(pa.array(used)))


def _wire_table(table: pa.Table, columns: Mapping[str, pa.Array]) -> pa.Table:
    """``table`` with ``columns`` in place of its string columns (same names, order, nullability, metadata)."""
    fields, arrays = [], []
    for f in table.schema:
        if f.name in columns:
            arrays.append(columns[f.name])
            fields.append(pa.field(f.name, columns[f.name].type, nullable=f.nullable))
        else:
            arrays.append(table[f.name])
            fields.append(f)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=table.schema.metadata))


def dictionary_tables(messages: Sequence[tuple[pa.Table | None, pa.Table | None]],
                      step_codes: Mapping[str, pa.DictionaryArray]) -> list[pa.Table | None]:
    """Each message's stored rows with the :data:`COLUMNS` dictionary-encoded for that message alone.

    Args:
        messages: per message of the step, in step order, ``(enriched, stored)``: its good rows (a slice of
            the step's good rows, in order; None when it has none) and the rows the store keeps (the same
            table under ``full`` retention, a subset otherwise; None: nothing to send).
        step_codes: key columns dictionary-encoded over the concatenation of every ``enriched`` (the step's
            encodings, :attr:`streams.runtime.probe_step.StepOutput.encoded`); may be empty. A column they
            lack is encoded here over the step (``full`` retention) or per message (a subset stored).

    Returns:
        Per message, its ``stored`` table with the :data:`COLUMNS` as dictionary<int8|int16|int32, string>
        (every other column untouched), or None where ``stored`` is None. The values equal ``stored``'s row
        for row; a message's dictionary may hold up to :data:`RUN_VALUES` (or a quarter of its rows) values
        it does not use.
    """
    out: list[pa.Table | None] = [None] * len(messages)
    sizes = np.array([0 if e is None else e.num_rows for e, _ in messages], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    # step codes are usable where they cover exactly the step's rows and a message stores all its rows
    usable = {c: d for c, d in step_codes.items() if c in COLUMNS and len(d) == bounds[-1]}
    complete = [e is not None and s is e for e, s in messages if s is not None]
    if complete and all(complete) and bounds[-1]:
        # every message stores all its rows (``full`` retention): a column the step had not encoded, once here
        first = next(e for e, _ in messages if e is not None)
        for name in COLUMNS:
            if name not in usable:
                col = pa.chunked_array([c for e, _ in messages if e is not None for c in e[name].chunks],
                                       first.schema.field(name).type)
                usable[name] = pc.dictionary_encode(col.combine_chunks())
    renumbered = {c: _renumbered(d, bounds) for c, d in usable.items()}
    for i, (enriched, stored) in enumerate(messages):
        if stored is None:
            continue
        whole = enriched is not None and stored is enriched
        columns = {name: renumbered[name][i] if whole and name in renumbered else _encode_alone(stored[name])
                   for name in COLUMNS}
        out[i] = _wire_table(stored, columns)
    return out

