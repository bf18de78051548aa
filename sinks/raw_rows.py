"""The store writer's rows of raw probe uploads: one Kafka crossing per probe.

The store writer reads ``probes.raw`` in a consumer group of its own, the same messages the stream
workers read in theirs: Kafka writes an upload once and serves it to both. A writer block of raw
messages (:mod:`sinks.blocks`) is judged here with the worker's own rules (:mod:`schemas.probe_rows`):
rows a rule refuses are left out (the worker dead-letters them, with the reason), the rest are
decomposed (R-Pingmesh §4.2.1); the raw retention policy picks the rows ``probes`` keeps, and the
minute tier counts every good row, merged per key over the whole block in one grouping.

What makes a re-formed block store the same rows: the same raw offsets (the block's recorded
ranges), the same policy, and the flow-baseline snapshot the block was judged with under
``anomalies`` (its generation is recorded with the block; :class:`RawJudge`). The registry
(the unknown-RNIC rule) only grows, so a re-formed block may keep a row its first attempt left out
for an RNIC registered in between; each table still takes a block once (its token).

A block also skips raw offsets at or below the partition's mark ``probes|<raw topic>/<partition>``:
the highest raw offset a writer of ``probes.enriched`` stored (the two-crossing layout before this
one), read once when a partition has no block of its own yet, so the switch stores nothing twice
(docs/storage.md "Upgrading the store writer").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from schemas.codec import CodecError, decode
from schemas.probe_rows.messages import PROBE, process_probe_step
from schemas.probe_rows.minute_tier import latency_buckets, minute_rows
from schemas.probe_rows.retention import RetentionPolicy, retained
from sinks.blocks import Block, Entry, WriterBlock
from sinks.probe_tiers import MINUTE_TABLE

log = logging.getLogger("fabricscope.sink")

RAW_ENTRY = "probe.v1"
"""``Entry.table`` of a raw upload held for a block: decoded (its rows count toward the block's size),
judged when its block forms (:func:`form_raw_block`)."""


@dataclass(frozen=True)
class RawJudge:
    """What a raw block is judged with, besides its messages.

    Attributes:
        known_rnics: the RNICs the registry topic listed (the unknown-RNIC rule), or None while it is empty.
        retention: the raw retention policy (which rows ``probes`` keeps; the tiers count every row).
        baseline: the flow baselines (``flow``, ``baseline_ns``) for ``anomalies``, or None.
        generation: the snapshot ``baseline`` came from (recorded with the block), or None.
    """

    known_rnics: set[str] | None = None
    retention: RetentionPolicy = RetentionPolicy()
    baseline: pa.Table | None = None
    generation: int | None = None


def raw_entry(offset: int, payload: bytes | None, schema: str | None, where: str) -> Entry:
    """One ``probes.raw`` message as a block entry: decoded, or with no rows when it cannot be read (``where``:
    ``topic/partition/offset`` for the log line; the worker dead-letters such a message with the reason)."""
    try:
        key, table = decode(payload or b"", schema)
        if key != PROBE:
            raise CodecError(f"carries {key}, not {PROBE}")
    except CodecError as err:
        log.warning("raw upload %s not stored: %s (the stream worker dead-letters it)", where, err)
        return Entry(offset, RAW_ENTRY, None)
    return Entry(offset, RAW_ENTRY, table)


def mark_key(topic: str, partition: int) -> str:
    """The writer's mark of raw partition ``partition`` of ``topic`` (the key :func:`sinks.blocks.form_block`
    keeps for rows whose ``batch_id`` names that partition)."""
    return f"probes|{topic}/{partition}"


def form_raw_block(topic: str, parts: Mapping[int, tuple[list[Entry], dict[str, int]]],
                   judge: RawJudge) -> WriterBlock:
    """One :class:`~sinks.blocks.WriterBlock` from raw entries: ``partition -> (entries, marks)``, entries in
    offset order. Deterministic: the same entries, marks and judge give the same rows.

    Returns:
        The block: ``probes`` (the retained decomposed rows, ``probe_enriched.v1`` with ``batch_id`` =
        ``topic/partition/offset``) and ``probes_1m`` (the minute tier of every good row, one row per key),
        each partition's range and marks (``hwm_after`` raises :func:`mark_key` to its last offset).

    Raises:
        ValueError: ``parts`` is empty, or a partition has no entries.
    """
    if not parts or any(not entries for entries, _ in parts.values()):
        raise ValueError("a writer block needs at least one message of each of its partitions")
    blocks: dict[int, Block] = {}
    messages: list[tuple[pa.Table, str, str, int, int]] = []
    for p, (entries, hwm) in sorted(parts.items()):
        key = mark_key(topic, p)
        stored_up_to = hwm.get(key, -1)
        dropped = 0
        for e in entries:
            if e.rows is None or e.rows.num_rows == 0:
                continue
            if e.offset <= stored_up_to:
                dropped += e.rows.num_rows
                continue
            messages.append((e.rows, PROBE, topic, p, e.offset))
        after = dict(hwm) | {key: max(stored_up_to, entries[-1].offset)}
        blocks[p] = Block(entries[0].offset, entries[-1].offset, {}, dict(hwm), after, dropped)
    tables: dict[str, pa.Table] = {}
    if messages:
        rows = process_probe_step(messages, judge.known_rnics or None, dead_letters=False)
        if rows.enriched is not None:
            step = rows.enriched
            tables[MINUTE_TABLE] = minute_rows(step, rows.encoded, latency_buckets(step), by_batch=False)
            kept = retained(step, judge.retention, judge.baseline)
            if kept.num_rows:
                tables["probes"] = kept
    return WriterBlock(blocks, tables)
