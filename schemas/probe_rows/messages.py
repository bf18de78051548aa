"""What the RTT worker does with one probe message: decode, validate, decompose (no Kafka here).

Returns the enriched good rows and the dead-letter rows, so the Faust agent is
only plumbing and this step is testable on its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.codec import CodecError, decode
from schemas.deadletter import bad_rows, whole_message
from schemas.group_codes import dictionaries, to_numpy
from schemas.probe_rows.decompose import decompose
from schemas.probe_rows.validate import broken_rules, split_by_rule

log = logging.getLogger("fabricscope.rtt")
PROBE = "probe.v1"
ENCODED = ("pinglist", "prober_host", "prober_rnic", "responder_host", "responder_rnic", "ts_source")
"""String key columns :func:`streams.pingmesh.partial.summarize` takes dictionary-encoded from its caller (one
encoding per worker step, shared with the minute tier, :func:`schemas.group_codes.dictionaries`)."""


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
    return process_probe_messages([(payload, header_schema, topic, partition, offset)], known_rnics)[0]


@dataclass(frozen=True)
class StepRows:
    """What :func:`process_probe_step` gives: each message's :class:`BatchResult` (in input order), the good
    rows of all of them as one ``probe_enriched.v1`` table (message order; None when there are none: each
    message's ``enriched`` is a slice of it), and ``encoded``: key columns of those rows dictionary-encoded
    once (:func:`schemas.group_codes.dictionaries`; ``batch_id`` with ids in message order), for the step's
    group-bys (minute tier, window partials)."""

    results: list[BatchResult]
    enriched: pa.Table | None
    encoded: dict[str, pa.DictionaryArray]


def process_probe_messages(
    messages: list[tuple[bytes, str | None, str, int, int]], known_rnics: set[str] | None = None,
) -> list[BatchResult]:
    """:func:`process_probe_message` for each of many messages ``(payload, header schema, topic, partition,
    offset)``, with the same results, validating and decomposing all their rows in one pass
    (:func:`process_probe_step`)."""
    return process_probe_step(messages, known_rnics).results


def process_probe_step(
    messages: list[tuple[bytes | pa.Table, str | None, str, int, int]], known_rnics: set[str] | None = None,
    encode: tuple[str, ...] = ("agent_id", *ENCODED), dead_letters: bool = True,
) -> StepRows:
    """Decode, validate and decompose the messages of one worker step (:func:`process_probe_message` each).

    A payload may also be a ``probe.v1`` table its caller decoded already (the store writer's).
    ``dead_letters`` False: bad rows are left out without dead-letter rows or log lines (the store writer
    judges the rows the worker has dead-lettered already).

    Each message is decoded on its own (an undecodable message dead-letters alone); the rules and the
    decomposition then run once over the rows of every decoded message (repeats of ``(agent_id, seq)``
    count per message, :func:`schemas.probe_rows.validate.broken_rules`), and the rows are split back per
    message: a fixed cost per kernel call is paid once per step, not once per message. The ``encode``
    columns are dictionary-encoded once, before the rules, which check their enumerations and the registry
    over the dictionaries; the encodings of the good rows come back for the step's group-bys.
    """
    results: list[BatchResult | None] = [None] * len(messages)
    tables: list[pa.Table] = []
    which: list[int] = []
    for i, (payload, header_schema, topic, partition, offset) in enumerate(messages):
        if isinstance(payload, pa.Table):  # decoded by the caller (the store writer, to size its blocks)
            tables.append(payload)
            which.append(i)
            continue
        try:
            key, table = decode(payload, header_schema)
            if key != PROBE:
                raise CodecError(f"topic {topic} carries {PROBE}, got {key}")
        except CodecError as err:
            log.error("dead letter %s/%d/%d: %s", topic, partition, offset, err)
            results[i] = BatchResult(None, whole_message(topic, partition, offset, header_schema or "", str(err),
                                                         payload))
            continue
        tables.append(table)
        which.append(i)
    enriched = None
    encoded: dict[str, pa.DictionaryArray] = {}
    if tables:
        sizes = np.array([t.num_rows for t in tables], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        step = pa.concat_tables(tables)
        msg_of = np.repeat(np.arange(len(tables), dtype=np.int32), sizes)  # the message of each row
        encoded = dictionaries(step, encode, same={"prober_host": "agent_id"})  # one agent per host
        rule, texts = broken_rules(step, known_rnics, msg_of, encoded)
        good = rule == 0
        # one id per distinct source message (a message read twice in a step has one), in message order
        ids = pc.dictionary_encode(pa.array([f"{messages[i][2]}/{messages[i][3]}/{messages[i][4]}" for i in which],
                                            pa.string()))
        batch = pa.DictionaryArray.from_arrays(pa.array(to_numpy(ids.indices)[msg_of[good]]), ids.dictionary)
        kept, mask = (step, None) if good.all() else (step.filter(pa.array(good)), pa.array(good))
        encoded = {c: d if mask is None else d.filter(mask) for c, d in encoded.items()} | {"batch_id": batch}
        enriched = decompose(kept, batch.cast(pa.string())) if kept.num_rows else None
        at = np.concatenate([[0], np.cumsum(np.bincount(msg_of[good], minlength=len(tables)))])
        for j, i in enumerate(which):
            _payload, _schema, topic, partition, offset = messages[i]
            r = rule[starts[j]:starts[j + 1]]
            dead = None
            if r.any() and dead_letters:
                split = split_by_rule(tables[j], r, texts)
                for reason in sorted(set(split.reasons)):
                    log.error("dead letter %s/%d/%d: %d rows: %s", topic, partition, offset,
                              split.reasons.count(reason), reason)
                dead = bad_rows(topic, partition, offset, PROBE, split.bad, split.reasons, split.bad_index)
            rows = None if enriched is None or at[j + 1] == at[j] else \
                enriched.slice(int(at[j]), int(at[j + 1] - at[j]))
            results[i] = BatchResult(rows, dead)
    return StepRows(results, enriched, encoded if enriched is not None else {})  # type: ignore[arg-type]
