"""The Kafka codec and the two schema builders (nanoarrow for agents, pyarrow for workers)."""

from __future__ import annotations

import contextlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.arrow_nano import encode_columns
from schemas.arrow_pa import SCHEMA_METADATA_KEY, arrow_schema, table_from_columns
from schemas.codec import (
    SchemaMismatchError,
    TruncatedPayloadError,
    UnknownSchemaVersionError,
    decode,
    encode,
)
from schemas.records import SCHEMAS

from probe_rows import columns, known_rows


def test_nanoarrow_batch_reads_back_in_pyarrow_with_the_same_values():
    rows, _ = known_rows()
    payload = encode_columns("probe.v1", columns(rows))
    key, table = decode(payload, "probe.v1")
    assert key == "probe.v1"
    assert table.schema.equals(arrow_schema("probe.v1"))
    assert table.to_pylist() == rows


def test_every_schema_builds_the_same_in_both_builders():
    from schemas.arrow_nano import nano_schema

    for key in SCHEMAS:
        nano_fields = [c.name for c in nano_schema(key).fields]
        assert nano_fields == arrow_schema(key).names


def test_truncated_payload_is_named():
    payload = encode_columns("probe.v1", columns(known_rows()[0]))
    with pytest.raises(TruncatedPayloadError, match="not a complete Arrow IPC stream"):
        decode(payload[:40])
    with pytest.raises(TruncatedPayloadError, match="empty payload"):
        decode(b"")


def test_unknown_version_and_header_mismatch_are_named():
    t = table_from_columns("probe.v1", columns(known_rows()[0]))
    v9 = t.replace_schema_metadata({SCHEMA_METADATA_KEY: b"probe.v9"})
    with pytest.raises(UnknownSchemaVersionError, match="unknown schema 'probe.v9'"):
        decode(encode(v9))
    with pytest.raises(UnknownSchemaVersionError, match="header says schema 'path.v1'"):
        decode(encode(t), "path.v1")


def test_missing_column_and_wrong_type_are_named():
    t = table_from_columns("probe.v1", columns(known_rows()[0]))
    with pytest.raises(SchemaMismatchError, match="missing columns t6"):
        decode(encode(t.drop_columns(["t6"])))
    wrong = t.set_column(t.schema.get_field_index("seq"), pa.field("seq", pa.string()),
                         pa.array(["a", "b", "c"]))
    with pytest.raises(SchemaMismatchError, match="seq is string, expected uint64"):
        decode(encode(wrong))


def test_encode_is_the_ipc_stream_whatever_the_room_its_schema_needs():
    """``encode`` writes into one buffer sized from the batches; a schema message larger than the room left
    for it (64 KiB) falls back to a growing stream. Both are the stream pyarrow's own writer makes."""
    t = table_from_columns("probe.v1", columns(known_rows()[0]))
    wide = pa.table({f"c{i}_{'x' * 60}": [i] for i in range(1500)}).replace_schema_metadata(
        {SCHEMA_METADATA_KEY: b"probe.v1"})  # ~120 KB of field names
    for table in (t, wide, t.slice(0, 0)):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            for b in table.combine_chunks().to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]:
                w.write_batch(b)  # an empty table: one empty batch, as ever
        assert encode(table) == sink.getvalue().to_pybytes()
    assert decode(encode(t))[1].equals(t)


def test_nanoarrow_builder_rejects_nulls_in_required_fields_and_ragged_columns():
    cols = columns(known_rows()[0])
    cols["agent_id"][1] = None
    with pytest.raises(ValueError, match="'agent_id' is not nullable"):
        encode_columns("probe.v1", cols)
    cols = columns(known_rows()[0])
    cols["seq"] = cols["seq"][:2]
    with pytest.raises(ValueError, match="differ in length"):
        encode_columns("probe.v1", cols)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_fuzz_decode_never_raises_anything_but_codec_errors(data):
    from schemas.codec import CodecError

    with contextlib.suppress(CodecError):
        decode(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=2000))
def test_fuzz_every_truncation_of_a_valid_payload_is_a_codec_error(cut):
    from schemas.codec import CodecError

    payload = encode_columns("probe.v1", columns(known_rows()[0]))
    cut = cut % len(payload)
    try:
        key, table = decode(payload[:cut])
    except CodecError:
        return
    assert table.num_rows <= 3 and key == "probe.v1"
