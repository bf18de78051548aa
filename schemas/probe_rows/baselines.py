"""The reducer's flow baselines as whole snapshots, so a worker's copy forgets what the reducer forgot.

After each window the reducer publishes its whole per-flow latency baseline table (the P99 network
RTT EWMA of the latency rule, R-Pingmesh §4.3) to ``latency.baselines``, in chunks under the message
size limit. Workers keep the newest complete snapshot for ``anomalies`` raw retention. Each chunk
carries a header ``snapshot: <generation>/<part>/<parts>``: a worker swaps its table only when every
part of one generation has arrived, so a flow the reducer evicted (unprobed for the baseline
retention) leaves the worker's copy with the next snapshot instead of staying there for ever.
Messages without the header (written before snapshots had it) are merged into the table by flow.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from schemas.arrow_pa import arrow_schema
from schemas.codec import CodecError, encode
from schemas.headers import headers_for

SNAPSHOT_HEADER = "snapshot"
SCHEMA_KEY = "flow_baseline.v1"
CHUNK_ROWS = 100_000  # under the 16 MiB message limit at 10,000 RNICs


def snapshot_messages(baseline: pa.Table, generation: int,
                      chunk: int = CHUNK_ROWS) -> list[tuple[list[tuple[str, bytes]], bytes]]:
    """The messages (headers, value) that publish ``baseline`` as snapshot ``generation``.

    Args:
        baseline: the reducer's table with ``flow`` (string), ``baseline_ns`` (ns) and ``windows``.
        generation: an id unique to this publication (the reducer uses its wall clock, ns).
        chunk: rows per message.

    An empty table still makes one (empty) message: it is how workers learn that every baseline
    was evicted."""
    t = pa.Table.from_arrays([baseline["flow"], pc.cast(baseline["baseline_ns"], pa.float64()),
                              pc.cast(baseline["windows"], pa.int64())], schema=arrow_schema(SCHEMA_KEY))
    starts = list(range(0, t.num_rows, chunk)) or [0]
    return [(headers_for(SCHEMA_KEY) + [(SNAPSHOT_HEADER, f"{generation}/{i}/{len(starts)}".encode())],
             encode(t.slice(start, chunk))) for i, start in enumerate(starts)]


def _snapshot_part(headers: Iterable[tuple[str, bytes | str | None]] | None) -> tuple[int, int, int] | None:
    """(generation, part, parts) from a message's headers; None without the header.

    Raises:
        CodecError: a header that is not ``<int>/<int>/<int>`` with ``0 <= part < parts``.
    """
    for key, value in headers or ():
        if key != SNAPSHOT_HEADER:
            continue
        text = value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)
        try:
            generation, part, parts = (int(x) for x in text.split("/"))
        except ValueError:
            raise CodecError(f"snapshot header {text!r} is not <generation>/<part>/<parts>") from None
        if not 0 <= part < parts:
            raise CodecError(f"snapshot header {text!r}: part must be in [0, parts)")
        return generation, part, parts
    return None


class BaselineSnapshots:
    """A worker's copy of the reducer's flow baselines: the newest complete snapshot.

    ``current`` is None until a first snapshot completes, else a table of ``flow`` and ``baseline_ns``;
    ``generation`` is its publication's id (None for a table merged from messages without the header).
    Feed it every message of ``latency.baselines`` in offset order with :meth:`apply`.
    """

    def __init__(self) -> None:
        self.current: pa.Table | None = None
        self.generation: int | None = None
        self._generation: int | None = None
        self._parts: dict[int, pa.Table] = {}

    def apply(self, table: pa.Table, headers: Iterable[tuple[str, bytes | str | None]] | None) -> None:
        """Take one message's table; swap ``current`` when its snapshot is complete.

        Raises:
            CodecError: a malformed snapshot header (:class:`TopicMirror` logs and skips the message).
        """
        t = table.select(["flow", "baseline_ns"])
        where = _snapshot_part(headers)
        if where is None:
            self._merge_by_flow(t)
            return
        generation, part, parts = where
        if generation != self._generation:  # a newer publication: parts of an unfinished one are dropped
            self._generation, self._parts = generation, {}
        self._parts[part] = t
        if len(self._parts) == parts:
            self.current = pa.concat_tables([self._parts[i] for i in range(parts)]).combine_chunks()
            self.generation = generation
            self._generation, self._parts = None, {}

    def _merge_by_flow(self, t: pa.Table) -> None:
        if self.current is not None and self.current.num_rows:
            kept = self.current.filter(pc.invert(pc.is_in(self.current["flow"], value_set=t["flow"].combine_chunks())))
            t = pa.concat_tables([kept, t])
        self.current, self.generation = t, None
