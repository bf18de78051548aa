"""A worker step's input to the reducer: the ``window.partials`` message format (one step, one message).

A worker step covers, per raw partition ``p`` of ``probes.raw``, a contiguous offset range
``[first, last]`` (a consumer reads a partition in order). Everything the step gives the
reducer travels in ONE message: its window partials, its upload marks and those ranges, so a
crash can never leave half a step in the topic, and the ranges are the step's identity: the
reducer drops a step whose raw offsets it has already merged (docs/storage.md "Exactly-once rows").

Layout of a step:

* headers: ``format`` (``window_step.v1``), ``step_id`` (random, ties the parts of one step
  together), ``part`` (``i/n``), ``ranges`` (``p:first-last,...``), ``upload_ns`` (the newest
  upload among the marks, for watchers of the topic);
* value (the body, cut into ``n`` parts of at most ``max_bytes`` each when it is larger): a
  4-byte big-endian length, a JSON object ``{"marks": [[partition, agent, upload_ns, host],
  ...], "windows": [[window_start_ns, bytes], ...]}``, then the serialised partials
  (:func:`streams.pingmesh.partial.to_bytes`) in ``windows`` order.

A step of a 10,000-RNIC fabric may exceed the broker's message limit; its parts are sent in
order by one producer and the reducer applies the step once all parts are in. No Kafka here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.topics import MAX_MESSAGE_BYTES

FORMAT = b"window_step.v1"
MAX_PART_BYTES = MAX_MESSAGE_BYTES - 256 * 1024
"""Largest value of one part: the pipeline's message limit (16 MiB) less room for headers and record overhead."""

Ranges = dict[int, tuple[int, int]]


class StepFormatError(ValueError):
    """A ``window.partials`` message that is not a step of this format (names the header or field)."""


@dataclass
class UploadMark:
    """Who uploaded and when (prober host clock, ns): what moves the watermark."""

    agent_id: str
    upload_ns: int
    host: str | None


@dataclass
class Step:
    """What one worker step gives the reducer.

    Attributes:
        ranges: raw partition → (first, last) offset of the ``probes.raw`` messages whose rows are in
            ``partials`` and whose uploads are in ``marks`` (inclusive; never empty).
        partials: window start (ns) → serialised :class:`~streams.pingmesh.partial.WindowPartial`.
        marks: ``(raw partition, mark)``: newest upload per (partition, agent, host) of the step.
    """

    ranges: Ranges
    partials: dict[int, bytes] = field(default_factory=dict)
    marks: list[tuple[int, UploadMark]] = field(default_factory=list)


def format_ranges(ranges: Ranges) -> bytes:
    """``{0: (10, 15), 2: (3, 7)}`` → ``b"0:10-15,2:3-7"`` (partitions ascending)."""
    return ",".join(f"{p}:{a}-{b}" for p, (a, b) in sorted(ranges.items())).encode()


def parse_ranges(raw: bytes) -> Ranges:
    """Inverse of :func:`format_ranges`.

    Raises:
        StepFormatError: empty, malformed, or a range whose last offset is below its first.
    """
    out: Ranges = {}
    try:
        for item in raw.decode().split(","):
            p, span = item.split(":")
            a, b = span.split("-")
            out[int(p)] = (int(a), int(b))
    except ValueError as e:
        raise StepFormatError(f"bad ranges header {raw[:80]!r}: want 'partition:first-last,...'") from e
    if any(b < a or a < 0 for a, b in out.values()):
        raise StepFormatError(f"bad ranges header {raw[:80]!r}: a range ends before it starts")
    return out


def _body(step: Step) -> bytes:
    windows = sorted(step.partials.items())
    meta = {"marks": [[p, m.agent_id, m.upload_ns, m.host] for p, m in step.marks],
            "windows": [[ws, len(blob)] for ws, blob in windows]}
    head = json.dumps(meta, separators=(",", ":")).encode()
    return b"".join([len(head).to_bytes(4, "big"), head, *(blob for _, blob in windows)])


def encode_step(step: Step, max_bytes: int = MAX_PART_BYTES) -> list[tuple[list[tuple[str, bytes]], bytes]]:
    """The ``window.partials`` messages of one step, in send order: ``[(headers, value)]`` (one unless the
    body exceeds ``max_bytes``).

    Raises:
        ValueError: the step covers no raw offsets (it would have no identity).
    """
    if not step.ranges:
        raise ValueError("a step must cover at least one raw offset range (its identity)")
    body = _body(step)
    n = max(1, -(-len(body) // max_bytes))
    common = [("format", FORMAT), ("step_id", uuid.uuid4().hex.encode()), ("ranges", format_ranges(step.ranges)),
              ("upload_ns", str(max((m.upload_ns for _, m in step.marks), default=0)).encode())]
    return [([*common, ("part", f"{i}/{n}".encode())], body[i * max_bytes:(i + 1) * max_bytes]) for i in range(n)]


@dataclass(frozen=True)
class StepPart:
    """The headers of one part: which step, which part of how many, which raw offsets."""

    step_id: str
    index: int
    count: int
    ranges: Ranges


def part_of(headers: Mapping[str, bytes]) -> StepPart:
    """Parse a part's headers.

    Raises:
        StepFormatError: another format (e.g. a message of a worker from before steps), or a header
            missing or malformed.
    """
    fmt = headers.get("format")
    if fmt != FORMAT:
        raise StepFormatError(f"window.partials message of format {fmt!r}, want {FORMAT!r}")
    missing = [h for h in ("part", "step_id", "ranges") if h not in headers]
    if missing:
        raise StepFormatError(f"window.partials step without the {missing[0]!r} header")
    try:
        i, n = (int(x) for x in headers["part"].decode().split("/"))
    except ValueError as e:
        raise StepFormatError(f"bad part header {headers['part'][:20]!r}: want 'i/n'") from e
    step_id, ranges = headers["step_id"].decode(errors="replace"), parse_ranges(headers["ranges"])
    if not 0 <= i < n:
        raise StepFormatError(f"part {i}/{n}: index out of range")
    return StepPart(step_id, i, n, ranges)


def decode_body(ranges: Ranges, body: bytes) -> Step:
    """The step of a whole body (its parts joined in order).

    Raises:
        StepFormatError: truncated body or malformed JSON.
    """
    try:
        n = int.from_bytes(body[:4], "big")
        meta = json.loads(body[4:4 + n])
        marks = [(int(p), UploadMark(str(a), int(u), h or None)) for p, a, u, h in meta["marks"]]
        pos, partials = 4 + n, {}
        for ws, size in meta["windows"]:
            partials[int(ws)] = body[pos:pos + size]
            pos += size
    except (ValueError, KeyError, TypeError) as e:
        raise StepFormatError(f"step body not readable: {e}") from e
    if pos != len(body):
        raise StepFormatError(f"step body of {len(body)} bytes, its index says {pos}")
    return Step(ranges, partials, marks)
