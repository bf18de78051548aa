"""nanoarrow builders for host agents, which never import pyarrow (docs/design.md).

An agent collects its rows as Python column lists and calls
:func:`encode_columns`, which writes one Arrow IPC stream holding one record
batch; the workers read it back with pyarrow (:func:`schemas.codec.decode`).
"""

from __future__ import annotations

import functools
import io
from array import array
from collections.abc import Iterator, Sequence

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


_BIT_CHARS = bytes.maketrans(b"\x00\x01", b"01")


class MaskedInts(Sequence):
    """A nullable integer column held as machine integers: ``values`` (an ``array.array`` of the field's width),
    where ``absent`` marks a null. :func:`encode_columns` reads it as buffers, with no Python int per value;
    as a sequence it gives ``None`` for the nulls, so ``list()`` of it is the column as a list.

    Args:
        values: the integers, ``absent`` where a value is missing.
        absent: the sentinel (a value the column never holds, e.g. ``-2**63`` for nanosecond times).
    """

    __slots__ = ("values", "absent")

    def __init__(self, values: array, absent: int) -> None:
        self.values, self.absent = values, absent

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> int | None:  # type: ignore[override]
        v = self.values[i]
        return None if v == self.absent else v

    def __iter__(self) -> Iterator[int | None]:
        absent = self.absent
        return (None if v == absent else v for v in self.values)

    def c_array(self, schema: na.Schema) -> na.CArray:
        """The nanoarrow array of these values as ``schema``'s type: the values' buffer, and a validity
        bitmap (Arrow's, least significant bit first) built from one byte per value, without Python ints."""
        valid = bytes(map(self.absent.__ne__, self.values))
        nulls = valid.count(0)
        if not nulls:
            return na.c_array(self.values, schema)
        # '1'/'0' per value, the first value last: read base 2, it is bit i for value i
        bits = int(valid.translate(_BIT_CHARS)[::-1], 2).to_bytes((len(valid) + 7) // 8, "little")
        return na.c_array_from_buffers(schema, len(valid), [bits, self.values], null_count=nulls)


@functools.cache
def nano_schema(key: str) -> na.Schema:
    """The nanoarrow struct schema of record ``key``, tagged with its key in metadata (built once a key)."""
    rec = lookup(key)
    struct = na.struct({f.name: _TYPES[f.type](nullable=f.nullable) for f in rec.fields})
    return na.Schema(struct, metadata={SCHEMA_METADATA_KEY: rec.key})


@functools.cache
def _field_types(key: str) -> tuple[na.Schema, ...]:
    """Each field's nanoarrow type, in order, built once a key (an upload would build ~25 schema objects)."""
    return tuple(_TYPES[f.type]() for f in lookup(key).fields)


def encode_columns(key: str, columns: dict[str, Sequence[object]]) -> bytes:
    """Serialise one record batch of ``key`` as an Arrow IPC stream (bytes).

    Args:
        key: schema key, e.g. ``"probe.v1"``.
        columns: one sequence per field, all of the same length; ``None`` for nulls. An ``array.array`` of the
            field's width (no nulls), or a :class:`MaskedInts` (nulls marked by a sentinel), is read as buffers,
            without a Python int per value.

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
    for f, typ in zip(rec.fields, _field_types(key), strict=True):
        values = columns[f.name]
        if isinstance(values, array):  # machine integers: no nulls, no Python objects to visit
            children.append(na.c_array(values, typ))
            continue
        if isinstance(values, MaskedInts):
            if not f.nullable and values.absent in values.values:
                raise ValueError(f"{key}: field {f.name!r} is not nullable but has a null")
            children.append(values.c_array(typ))
            continue
        if not f.nullable and None in values:
            raise ValueError(f"{key}: field {f.name!r} is not nullable but has a null")
        children.append(na.c_array(values if isinstance(values, list) else list(values), typ))
    batch = na.c_array_from_buffers(nano_schema(key), n_rows, [None], children=children)
    out = io.BytesIO()
    with na_ipc.StreamWriter.from_writable(out) as writer:
        writer.write_stream(batch)
    return out.getvalue()
