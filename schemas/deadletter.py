"""Dead-letter records: what could not be processed, with the reason (pure builders)."""

from __future__ import annotations

import time

import pyarrow as pa

from schemas.arrow_pa import arrow_schema
from schemas.codec import encode

DEADLETTER = "deadletter.v1"


def whole_message(topic: str, partition: int, offset: int, schema: str, reason: str, payload: bytes) -> pa.Table:
    """One dead-letter row for a message that could not be decoded at all (raw bytes kept)."""
    return pa.Table.from_pylist(
        [{
            "source_topic": topic, "source_partition": partition, "source_offset": offset,
            "schema": schema, "reason": reason, "row": None, "payload": payload,
            "received_ns": time.time_ns(),
        }],
        schema=arrow_schema(DEADLETTER),
    )


def bad_rows(topic: str, partition: int, offset: int, schema: str, rows: pa.Table,
             reasons: list[str], row_index: list[int]) -> pa.Table:
    """One dead-letter row per bad row; each payload is that row as an Arrow IPC stream."""
    now = time.time_ns()
    payloads = [encode(rows.slice(i, 1)) for i in range(rows.num_rows)]  # only bad rows: rare
    n = rows.num_rows
    return pa.Table.from_pydict(
        {
            "source_topic": [topic] * n, "source_partition": [partition] * n, "source_offset": [offset] * n,
            "schema": [schema] * n, "reason": reasons, "row": row_index, "payload": payloads,
            "received_ns": [now] * n,
        },
        schema=arrow_schema(DEADLETTER),
    )
