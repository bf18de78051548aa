"""A step's store rows as they go to ``probes.enriched``: string columns dictionary-encoded per message.

A ``probe_enriched.v1`` row carries ~120 bytes of strings (agent, host and RNIC names, IPs, pinglist, clock
source, status, batch id) among ~224 bytes; within one raw message they repeat (one agent and host, a few
prober RNICs, the peers of its pinglists). Sent as Arrow dictionary arrays, one dictionary per message
holding only the values that message uses, a row's strings become a few bytes of indices (int8 or int16),
so the broker stores and serves less and the store writer reads and validates less; ClickHouse takes
dictionary columns into its ``LowCardinality``/``String`` columns as they are (the same rows: tested in
``tests/test_enriched_wire.py``). The receiving end is :func:`schemas.codec.decode` with
``dictionary_strings`` (the store writer) or without it (everyone else: plain strings again).

The worker step already dictionary-encoded its key columns once over all the step's good rows (the
step's group-bys use them, :func:`schemas.group_codes.dictionaries`): those codes are re-numbered per
message here with integer work only (no string hashing); the other string columns are encoded per
message. A message's table is exactly its rows, whichever way it was encoded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _index_type(size: int) -> pa.DataType:
    """The narrowest signed index type for a dictionary of ``size`` values."""
    if size <= np.iinfo(np.int8).max:
        return pa.int8()
    if size <= np.iinfo(np.int16).max:
        return pa.int16()
    return pa.int32()


def _string_columns(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema if pa.types.is_string(f.type)]


def _encode_alone(col: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """One message's column dictionary-encoded on its own (values in order of first appearance)."""
    d = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    return d.cast(pa.dictionary(_index_type(len(d.dictionary)), pa.string()))


def _renumbered(codes: pa.DictionaryArray, bounds: np.ndarray) -> list[pa.DictionaryArray]:
    """``codes`` (a step's column, dictionary-encoded over all its rows) cut at ``bounds`` (message i holds
    rows ``bounds[i]:bounds[i+1]``), each piece with a dictionary of only the values it uses (in the step
    dictionary's order). Integer work only: one presence count per (message, value), one gather per row."""
    n_msgs, size = len(bounds) - 1, len(codes.dictionary)
    valid = None if codes.null_count == 0 else np.asarray(codes.is_valid().to_numpy(zero_copy_only=False))
    idx = np.asarray(pc.fill_null(codes.indices, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    msg = np.repeat(np.arange(n_msgs, dtype=np.int64), np.diff(bounds))
    cell = msg * max(size, 1) + idx
    present = np.bincount(cell if valid is None else cell[valid], minlength=n_msgs * max(size, 1))
    present = present.reshape(n_msgs, max(size, 1)) > 0
    new_code = np.cumsum(present, axis=1) - 1  # a value's index in its message's dictionary
    out = []
    for i in range(n_msgs):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        used = np.flatnonzero(present[i])
        index_type = _index_type(len(used))
        local = new_code[i][idx[lo:hi]].astype(index_type.to_pandas_dtype())
        mask = None if valid is None else ~valid[lo:hi]
        dictionary = codes.dictionary.take(pa.array(used)) if size else codes.dictionary
        out.append(pa.DictionaryArray.from_arrays(pa.array(local, index_type, mask=mask), dictionary))
    return out


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
    """Each message's stored rows with every string column dictionary-encoded for that message alone.

    Args:
        messages: per message of the step, in step order, ``(enriched, stored)``: its good rows (a slice of
            the step's good rows, in order; None when it has none) and the rows the store keeps (the same
            table under ``full`` retention, a subset otherwise; None: nothing to send).
        step_codes: key columns dictionary-encoded over the concatenation of every ``enriched`` (the step's
            encodings, :attr:`streams.runtime.probe_step.StepOutput.encoded`); may be empty.

    Returns:
        Per message, its ``stored`` table with dictionary<int8|int16|int32, string> string columns (other
        columns untouched), or None where ``stored`` is None. The values equal ``stored``'s row for row.
    """
    out: list[pa.Table | None] = [None] * len(messages)
    sizes = np.array([0 if e is None else e.num_rows for e, _ in messages], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    # step codes are usable where they cover exactly the step's rows and a message stores all its rows
    usable = {c: d for c, d in step_codes.items() if len(d) == bounds[-1]}
    renumbered = {c: _renumbered(d, bounds) for c, d in usable.items()}
    for i, (enriched, stored) in enumerate(messages):
        if stored is None:
            continue
        whole = enriched is not None and stored is enriched
        columns = {}
        for name in _string_columns(stored.schema):
            columns[name] = renumbered[name][i] if whole and name in renumbered else _encode_alone(stored[name])
        out[i] = _wire_table(stored, columns)
    return out

