"""The Kafka codec: one message carries one Arrow record batch (IPC stream format).

The schema key (``probe.v1``) travels twice: in the Kafka header ``schema`` and
in the Arrow schema metadata ``fabricscope.schema``, so a message read from a
file or a dead-letter topic still says what it is.

Errors are :class:`CodecError` subclasses whose message names what is wrong;
the workers put the message on the dead-letter topic with that reason.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from schemas.arrow_pa import SCHEMA_METADATA_KEY, arrow_schema
from schemas.headers import SCHEMA_HEADER, headers_for, schema_key_from_headers
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
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for b in batches:
            writer.write_batch(b)
    return sink.getvalue()


def decode(payload: bytes, expected: str | None = None, dictionary_strings: bool = False) -> tuple[str, pa.Table]:
    """Decode one message into ``(schema key, table)`` and check it against its schema.

    A ``string`` column may arrive dictionary-encoded (Arrow dictionary of strings with signed integer
    indices; the workers send some of ``probe_enriched.v1``'s so, :mod:`streams.runtime.enriched_wire`): it
    comes back as plain strings, or, with ``dictionary_strings``, the schema's :data:`WIRE_DICTIONARIES`
    columns come back as ``dictionary<int32, string>`` (plain ones encoded), one type per column whatever
    the sender chose, so the store writer can concatenate messages and insert dictionaries as they are.

    Args:
        payload: the Kafka message value.
        expected: the schema key from the Kafka header, if any; it must match the
            key in the Arrow metadata.
        dictionary_strings: the :data:`WIRE_DICTIONARIES` columns as ``dictionary<int32, string>`` (else
            every string column plain).

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
        # then crashes (segfaults) the first kernel that trusts it. Full validation turns it into an error.
        table.validate(full=True)
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
    missing = [n for n in want.names if n not in table.schema.names]
    if missing:
        raise SchemaMismatchError(f"{key}: missing columns {', '.join(missing)}")
    got = dict(zip(table.schema.names, table.schema.types, strict=True))
    wrong = [
        f"{f.name} is {got[f.name]}, expected {f.type}"
        for f in want
        if got[f.name] != f.type and not _dictionary_of(got[f.name], f.type)
    ]
    if wrong:
        raise SchemaMismatchError(f"{key}: " + "; ".join(wrong))
    # Arrow does not enforce nullability; the workers' validation does, row by row.
    try:
        if dictionary_strings or any(pa.types.is_dictionary(got[n]) for n in want.names):
            return key, _strings_as(table, want, WIRE_DICTIONARIES.get(key, ()) if dictionary_strings else ())
        return key, pa.Table.from_arrays(table.select(want.names).columns, schema=want)
    except (pa.ArrowException, ValueError) as err:
        raise SchemaMismatchError(f"{key}: {err}") from None


WIRE_DICTIONARY = pa.dictionary(pa.int32(), pa.string())
"""The type :func:`decode` gives the :data:`WIRE_DICTIONARIES` columns with ``dictionary_strings``."""

WIRE_DICTIONARIES: dict[str, tuple[str, ...]] = {
    "probe_enriched.v1": ("agent_id", "pinglist", "prober_host", "prober_rnic", "responder_host", "responder_rnic",
                          "ts_source", "batch_id"),
}
"""Per schema, the string columns its senders dictionary-encode (the workers' stored rows: the columns their step
has encoded anyway, :mod:`streams.runtime.enriched_wire`); with ``dictionary_strings`` :func:`decode` gives
these as :data:`WIRE_DICTIONARY` whichever way a message carries them, and every other column plain."""


def _dictionary_of(got: pa.DataType, want: pa.DataType) -> bool:
    """``got`` is a dictionary encoding of ``want``: strings with signed integer indices."""
    return (pa.types.is_string(want) and pa.types.is_dictionary(got) and pa.types.is_string(got.value_type)
            and pa.types.is_signed_integer(got.index_type))


def _int32_indices(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A dictionary column with int32 indices (widened where narrower): one type for every message. The
    indices were validated against their dictionary already (``validate(full=True)``)."""
    return pa.chunked_array([c if c.type.index_type == pa.int32() else pa.DictionaryArray.from_arrays(
        c.indices.cast(pa.int32()), c.dictionary, safe=False) for c in col.chunks], WIRE_DICTIONARY)


def _strings_as(table: pa.Table, want: pa.Schema, dictionary: tuple[str, ...]) -> pa.Table:
    """``table``'s columns of ``want`` with the string columns named in ``dictionary`` as
    :data:`WIRE_DICTIONARY` and every other string column plain; the schema is ``want``'s with those types."""
    fields, columns = [], []
    for f in want:
        col = table[f.name]
        if pa.types.is_string(f.type):
            is_dict = pa.types.is_dictionary(col.type)
            if f.name in dictionary:
                col = _int32_indices(col) if is_dict else pc.dictionary_encode(col)
                f = pa.field(f.name, WIRE_DICTIONARY, nullable=f.nullable)
            elif is_dict:
                col = col.cast(pa.string())
        fields.append(f)
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=want.metadata))
