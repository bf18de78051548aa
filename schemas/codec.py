"""The Kafka codec: one message carries one Arrow record batch (IPC stream format).

The schema key (``probe.v1``) travels twice: in the Kafka header ``schema`` and
in the Arrow schema metadata ``fabricscope.schema``, so a message read from a
file or a dead-letter topic still says what it is.

Errors are :class:`CodecError` subclasses whose message names what is wrong;
the workers put the message on the dead-letter topic with that reason.
"""

from __future__ import annotations

import pyarrow as pa

from schemas.arrow_pa import SCHEMA_METADATA_KEY, arrow_schema
from schemas.headers import SCHEMA_HEADER, headers_for, schema_key_from_headers
from schemas.ipc_guard import check_table
from schemas.records import UnknownSchemaError

__all__ = ["SCHEMA_HEADER", "decode", "encode", "encode_buffer", "headers_for", "schema_key_from_headers"]

class CodecError(ValueError):
    """A message could not be decoded; ``str(err)`` is the reason for the dead-letter record."""


class TruncatedPayloadError(CodecError):
    """The bytes are not a complete Arrow IPC stream."""


class SchemaMismatchError(CodecError):
    """The batch's columns or types differ from the schema it claims."""


class UnknownSchemaVersionError(CodecError):
    """The message names a schema/version this build does not know."""


def encode(table: pa.Table | pa.RecordBatch) -> bytes:
    """Serialise a pyarrow table (combined into one batch) as an IPC stream."""
    return encode_buffer(table).to_pybytes()


def encode_buffer(table: pa.Table | pa.RecordBatch) -> pa.Buffer:
    """:func:`encode` without the copy into ``bytes``: the IPC stream in Arrow's own buffer (read-only, supports
    the buffer protocol; confluent-kafka's ``produce`` takes it as it is)."""
    if isinstance(table, pa.Table):
        table = table.combine_chunks()
        batches = table.to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]
    else:
        batches = [table]
    # One buffer of the stream's size, written once: a growing BufferOutputStream re-allocates and copies a
    # ~1.3 MB message about ten times (~0.03 µs per row of a 6,000-row message, BENCHMARKS.md §4).
    size = sum(pa.ipc.get_record_batch_size(b) for b in batches) + _STREAM_FRAMING_BYTES
    buf = pa.allocate_buffer(size)
    sink = pa.FixedSizeBufferWriter(buf)
    try:
        _write_stream(sink, batches)
    except (pa.ArrowInvalid, OSError):  # a schema message larger than the room left for it: grow as needed
        grown = pa.BufferOutputStream()
        _write_stream(grown, batches)
        return grown.getvalue()
    return buf.slice(0, sink.tell())


# Room for the stream's schema message (its fields and metadata) and end-of-stream marker besides the batches.
_STREAM_FRAMING_BYTES = 64 * 1024


def _write_stream(sink: pa.NativeFile, batches: list[pa.RecordBatch]) -> None:
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for b in batches:
            writer.write_batch(b)


def decode(payload: bytes, expected: str | None = None) -> tuple[str, pa.Table]:
    """Decode one message into ``(schema key, table)`` and check it against its schema.

    Args:
        payload: the Kafka message value.
        expected: the schema key from the Kafka header, if any; it must match the
            key in the Arrow metadata.

    Raises:
        TruncatedPayloadError: the bytes are not a complete IPC stream.
        UnknownSchemaVersionError: no key, or a key this build does not know.
        SchemaMismatchError: missing columns or a column of another type.
    """
    if not payload:
        raise TruncatedPayloadError("empty payload: expected an Arrow IPC stream")
    try:
        reader = pa.ipc.open_stream(payload)
        table = reader.read_all()
        # The IPC reader checks framing, not contents: a corrupt offset or null count reads "fine" and
        # then crashes (segfaults) the first kernel that trusts it. What Arrow's full validation checks,
        # vectorised (schemas.ipc_guard), turns it into an error.
        check_table(table)
    except (pa.ArrowException, OSError, ValueError, IndexError, OverflowError) as err:
        raise TruncatedPayloadError(
            f"payload of {len(payload)} bytes is not a complete Arrow IPC stream (truncated or corrupt): {err}"
        ) from None
    meta = table.schema.metadata or {}
    key = meta.get(SCHEMA_METADATA_KEY, b"").decode("utf-8", "replace") or expected
    if not key:
        raise UnknownSchemaVersionError("message names no schema (no 'schema' header, no Arrow metadata)")
    if expected and key != expected:
        raise UnknownSchemaVersionError(f"header says schema {expected!r} but the Arrow metadata says {key!r}")
    try:
        want = arrow_schema(key)
    except UnknownSchemaError as err:
        raise UnknownSchemaVersionError(str(err)) from None
    if table.schema.equals(want, check_metadata=True):  # as our builders write it: nothing to check or rebuild
        return key, table
    missing = [n for n in want.names if n not in table.schema.names]
    if missing:
        raise SchemaMismatchError(f"{key}: missing columns {', '.join(missing)}")
    wrong = [
        f"{f.name} is {table.schema.field(f.name).type}, expected {f.type}"
        for f in want
        if table.schema.field(f.name).type != f.type
    ]
    if wrong:
        raise SchemaMismatchError(f"{key}: " + "; ".join(wrong))
    # Arrow does not enforce nullability; the workers' validation does, row by row.
    try:
        return key, pa.Table.from_arrays(table.select(want.names).columns, schema=want)
    except (pa.ArrowException, ValueError) as err:
        raise SchemaMismatchError(f"{key}: {err}") from None
