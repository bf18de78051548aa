"""pyarrow schemas built from :mod:`schemas.records` (workers and sinks only)."""

from __future__ import annotations

from functools import cache

import pyarrow as pa

from schemas.records import RecordSchema, lookup

SCHEMA_METADATA_KEY = b"fabricscope.schema"

_TYPES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "map<uint16,uint64>": pa.map_(pa.uint16(), pa.uint64()),
}


@cache
def arrow_schema(key: str) -> pa.Schema:
    """The pyarrow schema of record ``key`` (``"probe.v1"``), tagged with its key in metadata.

    Raises:
        schemas.records.UnknownSchemaError: ``key`` is not registered.
    """
    rec: RecordSchema = lookup(key)
    return pa.schema(
        [pa.field(f.name, _TYPES[f.type], nullable=f.nullable) for f in rec.fields],
        metadata={SCHEMA_METADATA_KEY: rec.key.encode()},
    )


def table_from_columns(key: str, columns: dict[str, object]) -> pa.Table:
    """Build a table of record ``key`` from a dict of column sequences (lists or numpy arrays).

    Raises:
        KeyError: a field of the schema is missing from ``columns``.
        pyarrow.ArrowInvalid: a value does not fit its column's type.
    """
    schema = arrow_schema(key)
    missing = [n for n in schema.names if n not in columns]
    if missing:
        raise KeyError(f"{key}: missing columns {', '.join(missing)}")
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def empty_table(key: str) -> pa.Table:
    """A zero-row table of record ``key``."""
    return arrow_schema(key).empty_table()
