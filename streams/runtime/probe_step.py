"""One worker step: many probe messages, analysed once as one Arrow table (no Kafka here).

The Faust agent takes up to ``FABRICSCOPE_STEP_MESSAGES`` messages (or what came
within ``FABRICSCOPE_STEP_S``) per step. Per message it decodes, validates and
decomposes (a bad message must dead-letter alone, with its source identity);
then, once per step, on the concatenated rows: the window partials. Per-call
overheads (group-by setup, path-index join) are paid once per step instead of once
per message. The store writer reads the same raw messages in its own consumer group
and stores their rows and minute tier itself (sinks/raw_rows.py): a step sends only
dead letters and its message to the reducer.

Nothing here depends on how messages are grouped into steps: the outputs per
message are functions of that message, and window partials merge exactly
(tests/streams/test_step_grouping.py). The step's input to the reducer is one
:class:`~streams.pingmesh.step_message.Step` identified by the raw offset ranges it
covers; messages a step already carried to the reducer (a restart, a rebalance:
``emitted``) are left out of it (docs/storage.md "Exactly-once rows").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import factorize, to_numpy
from schemas.probe_rows.messages import StepRows, process_probe_step
from schemas.probe_rows.minute_tier import latency_buckets
from streams.pingmesh.path_index import PathIndex
from streams.pingmesh.reducer import batch_partials
from streams.pingmesh.step_message import Step, UploadMark


@dataclass(frozen=True)
class RawMessage:
    """One ``probes.raw`` message as the step needs it."""

    payload: bytes
    schema: str | None
    topic: str
    partition: int
    offset: int
    headers: dict[str, bytes] = field(default_factory=dict)


@dataclass
class MessageOutput:
    """What one source message yields: its decomposed good rows and its dead-letter rows (each maybe None)."""

    source: RawMessage
    enriched: pa.Table | None
    dead: pa.Table | None


@dataclass
class StepOutput:
    """Outputs of one step: per message (in input order); and the step's input to the reducer: the window
    partials of the messages not already emitted (``fresh``) and the raw offset range per partition they
    cover (empty when no message was fresh), and the upload marks of all its messages per raw partition (a
    mark moves a watermark to a maximum, so a repeat changes nothing, and it tells the reducer that the
    partition is alive: a restarted worker's first step may carry only skipped messages of a partition)."""

    messages: list[MessageOutput]
    partials: dict[int, bytes]
    marks: list[tuple[int, UploadMark]]
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)


def reducer_step(out: StepOutput) -> Step | None:
    """The one :class:`~streams.pingmesh.step_message.Step` to send to the reducer after the step's dead
    letters, or None when every message of the step had been emitted before (docs/storage.md "Exactly-once rows").

    The reducer applies its partials before its marks, oldest upload first, so the watermark never passes
    a window before every row of the step for it is in, whatever the step size: the verdicts do not depend
    on the grouping (tests/streams/test_step_grouping.py).
    """
    return Step(out.ranges, out.partials, out.marks) if out.ranges else None


def fresh_ranges(messages: list[RawMessage], emitted: Mapping[int, int]
                 ) -> tuple[list[bool], dict[int, tuple[int, int]]]:
    """Which messages the reducer has not had yet, and the offset range per raw partition they span.

    A message is fresh when its offset is above ``emitted[partition]`` (the highest raw offset of that
    partition already emitted to the reducer; absent: none) and above every offset of its partition
    earlier in the step (a consumer that re-read after a rebalance may deliver offsets again).

    Returns:
        (one flag per message, in input order; ``{partition: (first, last)}`` of the fresh ones).
    """
    high = dict(emitted)
    ranges: dict[int, tuple[int, int]] = {}
    flags = []
    for m in messages:
        fresh = m.offset > high.get(m.partition, -1)
        if fresh:
            high[m.partition] = m.offset
            ranges[m.partition] = (ranges.get(m.partition, (m.offset, 0))[0], m.offset)
        flags.append(fresh)
    return flags, ranges


def validate_messages(messages: list[RawMessage], known_rnics: set[str] | None) -> StepRows:
    """Decode, validate and decompose each message (bad input dead-letters per message; the rules and the
    decomposition run once over the rows of all of them, :func:`process_probe_step`)."""
    return process_probe_step([(m.payload, m.schema, m.topic, m.partition, m.offset) for m in messages],
                              known_rnics)


def upload_marks(results: list[tuple[RawMessage, pa.Table | None]],
                 encoded: Mapping[str, pa.DictionaryArray] | None = None) -> list[tuple[int, UploadMark]]:
    """Newest upload per (partition, agent, host) of a step: from the rows, or from an idle heartbeat's headers.

    ``encoded``: optional ``agent_id`` and ``prober_host`` dictionary-encoded over the concatenated non-empty
    tables of ``results`` (the step's encodings): the maxima are then taken over integer codes.

    Returns ``[(raw partition, mark)]`` sorted by partition, agent, host.
    """
    rows = [(m.partition, t) for m, t in results if t is not None and t.num_rows]
    newest: dict[tuple[int, str, str | None], int] = {}
    if rows and encoded is not None and "agent_id" in encoded and "prober_host" in encoded:
        newest = _newest_uploads(rows, encoded["agent_id"], encoded["prober_host"])
    elif rows:
        t = pa.concat_tables([tb.select(["agent_id", "prober_host", "upload_ns"]).append_column(
            "partition", pa.array(np.full(tb.num_rows, p, np.int64))) for p, tb in rows])
        g = t.group_by(["partition", "agent_id", "prober_host"]).aggregate([("upload_ns", "max")])
        for p, a, h, u in zip(g["partition"].to_pylist(), g["agent_id"].to_pylist(), g["prober_host"].to_pylist(),
                              g["upload_ns_max"].to_pylist(), strict=True):
            newest[(p, a, h)] = max(newest.get((p, a, h), u), u)
    for m, t in results:
        if (t is None or not t.num_rows) and "agent_id" in m.headers and "upload_ns" in m.headers:
            host = m.headers.get("host", b"").decode() or None
            k = (m.partition, m.headers["agent_id"].decode(), host)
            u = int(m.headers["upload_ns"])
            newest[k] = max(newest.get(k, u), u)
    return [(p, UploadMark(a, u, h)) for (p, a, h), u in sorted(newest.items(), key=lambda kv: (
        kv[0][0], kv[0][1], kv[0][2] or ""))]


def _newest_uploads(rows: list[tuple[int, pa.Table]], agent: pa.DictionaryArray, host: pa.DictionaryArray
                    ) -> dict[tuple[int, str, str | None], int]:
    """``{(partition, agent, host): newest upload_ns}`` of the concatenated ``rows``, whose agent and host
    columns come dictionary-encoded: one mixed-radix int64 per row and a maximum per key (``np.maximum.at``)."""
    parts = np.array([p for p, _ in rows], dtype=np.int64)
    part_ids, part_code = np.unique(parts, return_inverse=True)
    sizes = np.array([t.num_rows for _, t in rows], dtype=np.int64)
    n_agents, n_hosts = len(agent.dictionary) + 1, len(host.dictionary) + 1  # + null
    a = to_numpy(pc.fill_null(agent.indices, n_agents - 1)).astype(np.int64)
    h = to_numpy(pc.fill_null(host.indices, n_hosts - 1)).astype(np.int64)
    key = (np.repeat(part_code.ravel(), sizes) * n_agents + a) * n_hosts + h
    upload = np.concatenate([to_numpy(t["upload_ns"]).astype(np.int64) for _, t in rows])
    space = len(part_ids) * n_agents * n_hosts
    # hosts x agents is small (one agent per host): a dense maximum; else one sort to number the keys
    ids, keys = (key, None) if space <= 4 * len(key) + 4096 else factorize(key)
    size = space if keys is None else len(keys)
    newest = np.full(size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(newest, ids, upload)
    present = np.flatnonzero(np.bincount(ids, minlength=size))
    found = present if keys is None else keys[present]
    agents = agent.dictionary.to_pylist() + [None]
    hosts = host.dictionary.to_pylist() + [None]
    out = {}
    for k, u in zip(found.tolist(), newest[present].tolist(), strict=True):
        out[(int(part_ids[k // (n_agents * n_hosts)]), agents[k // n_hosts % n_agents], hosts[k % n_hosts])] = u
    return out


def process_step(messages: list[RawMessage], paths: PathIndex | None, window_ns: int,
                 known_rnics: set[str] | None = None, emitted: Mapping[int, int] | None = None) -> StepOutput:
    """Analyse a step of probe messages.

    Args:
        messages: in consumption order (any partitions).
        paths: the worker's path index, caught up before the step.
        window_ns: analysis window length (20 s).
        known_rnics: the registry's RNICs (unknown-RNIC rule), or None while it is empty.
        emitted: raw partition → highest offset already emitted to the reducer (:func:`fresh_ranges`):
            messages at or below it are left out of the partials (the reducer cannot split an aggregate)
            and the ranges; their dead letters go again (the store writer keeps one per source message).

    Returns:
        :class:`StepOutput`. Raises nothing for bad input (dead-letter rows instead).
    """
    rows = validate_messages(messages, known_rnics)
    results, step = rows.results, rows.enriched
    # the key columns encoded once for the step (by the validation), shared by the minute tier and the partials
    encoded: dict[str, pa.DictionaryArray] | None = rows.encoded
    buckets = latency_buckets(step) if step is not None else None  # one log2 per latency, for the partials
    outs = [MessageOutput(m, r.enriched, r.dead) for m, r in zip(messages, results, strict=True)]
    flags, ranges = fresh_ranges(messages, emitted or {})
    if not all(flags):  # rare (a restart or rebalance): summarize only what the reducer has not had
        fresh = [r.enriched for r, f in zip(results, flags, strict=True)
                 if f and r.enriched is not None and r.enriched.num_rows]
        step = pa.concat_tables(fresh) if fresh else None
        encoded = buckets = None
    partials = batch_partials(step, paths, window_ns, encoded, buckets) if step is not None else {}
    marks = upload_marks([(m, r.enriched) for m, r in zip(messages, results, strict=True)], rows.encoded)
    return StepOutput(outs, partials, marks, ranges)
