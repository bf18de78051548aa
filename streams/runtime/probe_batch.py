"""What the RTT worker does with one probe message: decode, validate, decompose (no Kafka here).

Returns the enriched good rows and the dead-letter rows, so the Faust agent is
only plumbing and this step is testable on its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa

from schemas.codec import CodecError, decode
from streams.pingmesh.rtt import decompose
from streams.pingmesh.validate import split_probes
from streams.runtime.deadletter import bad_rows, whole_message

log = logging.getLogger("fabricscope.rtt")
PROBE = "probe.v1"


@dataclass(frozen=True)
class BatchResult:
    """Output of one message: enriched rows (maybe empty) and dead-letter rows (maybe empty)."""

    enriched: pa.Table | None
    dead: pa.Table | None


def process_probe_message(
    payload: bytes, header_schema: str | None, topic: str, partition: int, offset: int,
    known_rnics: set[str] | None = None,
) -> BatchResult:
    """Decode a ``probe.v1`` message, split bad rows out, decompose the good ones.

    The batch identity ``topic/partition/offset`` becomes ``batch_id`` (the
    store's dedup token), so reprocessing the same message writes nothing twice.
    Errors never raise: they become dead-letter rows with the reason, and are logged.
    """
    try:
        key, table = decode(payload, header_schema)
        if key != PROBE:
            raise CodecError(f"topic {topic} carries {PROBE}, got {key}")
    except CodecError as err:
        log.error("dead letter %s/%d/%d: %s", topic, partition, offset, err)
        return BatchResult(None, whole_message(topic, partition, offset, header_schema or "", str(err), payload))
    split = split_probes(table, known_rnics)
    dead = None
    if split.bad.num_rows:
        for r in sorted(set(split.reasons)):
            log.error("dead letter %s/%d/%d: %d rows: %s", topic, partition, offset, split.reasons.count(r), r)
        dead = bad_rows(topic, partition, offset, key, split.bad, split.reasons, split.bad_index)
    enriched = decompose(split.good, f"{topic}/{partition}/{offset}") if split.good.num_rows else None
    return BatchResult(enriched, dead)

