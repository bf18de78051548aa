"""nanoarrow builders for host agents, which never import pyarrow (docs/design.md).

An agent collects its rows as Python column lists and calls
:func:`encode_columns`, which writes one Arrow IPC stream holding one record
batch; the workers read it back with pyarrow (:func:`schemas.codec.decode`).
"""

from __future__ import annotations

import io
from array import array
from collections.abc import Sequence

import nanoarrow as na
import nanoarrow.ipc as na_ipc

from schemas.records import lookup

SCHEMA_METADATA_KEY = "fabricscope.schema"

_TYPES = {
    "int8": na.int8,
    "int16": na.int16,
    "int32": na.int32,
    "int64": na.int64,
    "uint8": na.uint8,
    "uint16": na.uint16,
    "uint32": na.uint32,
    "uint64": na.uint64,
    "float64": na.float64,
    "bool": na.bool_,
    "string": na.string,
    "binary": na.binary,
    "map<uint16,uint64>": lambda nullable=True: na.map_(na.uint16(), na.uint64(), nullable=nullable),
}


def nano_schema(key: str) -> na.Schema:
    """The nanoarrow struct schema of record ``key``, tagged with its key in metadata."""
    rec = lookup(key)
    struct = na.struct({f.name: _TYPES[f.type](nullable=f.nullable) for f in rec.fields})
    return na.Schema(struct, metadata={SCHEMA_METADATA_KEY: rec.key})


def encode_columns(key: str, columns: dict[str, Sequence[object]]) -> bytes:
    """Serialise one record batch of ``key`` as an Arrow IPC stream (bytes).

    Args:
        key: schema key, e.g. ``"probe.v1"``.
        columns: one sequence per field, all of the same length; ``None`` for nulls. An ``array.array`` of the
            field's width (no nulls) is read as a buffer, without a Python int per value.

    Raises:
        KeyError: a field is missing.
        ValueError: the columns differ in length, or a null is given for a non-nullable field.
    """
    rec = lookup(key)
    missing = [n for n in rec.names if n not in columns]
    if missing:
        raise KeyError(f"{key}: missing columns {', '.join(missing)}")
    lengths = {len(columns[n]) for n in rec.names}
    if len(lengths) > 1:
        raise ValueError(f"{key}: columns differ in length: {sorted(lengths)}")
    n_rows = lengths.pop() if lengths else 0
    children = []
    for f in rec.fields:
        values = columns[f.name]
        if isinstance(values, array):  # machine integers: no nulls, no Python objects to visit
            children.append(na.c_array(values, _TYPES[f.type]()))
            continue
        if not f.nullable and None in values:
            raise ValueError(f"{key}: field {f.name!r} is not nullable but has a null")
        children.append(na.c_array(values if isinstance(values, list) else list(values), _TYPES[f.type]()))
    batch = na.c_array_from_buffers(nano_schema(key), n_rows, [None], children=children)
    out = io.BytesIO()
    with na_ipc.StreamWriter.from_writable(out) as writer:
        writer.write_stream(batch)
    return out.getvalue()
