"""Offset-aligned insert blocks with their state in the store: exactly-once rows with batching.

The design is ClickHouse Kafka Connect's exactly-once mode (its "state" per
topic partition), with the state kept in the store itself (table
``sink_blocks``, schemas/ddl/012) because chdb has no Keeper. docs/storage.md
"Exactly-once rows" says why this and not Kafka transactions.

- A *block* covers a contiguous offset range ``[first, last]`` of one partition of
  a consumed topic. Its rows go to each target table in one insert whose
  deduplication token is ``topic/partition/first-last``.
- A *writer block* joins the blocks of several partitions the writer holds (one
  range per partition): one insert per table for all of them, token
  ``topic/partition/first-last/partition/first-last...``. Every partition's state row records all the ranges, so any
  writer that finds the block unfinished re-reads exactly those ranges (whoever
  owns the partitions now) and re-forms the same rows under the same token. The
  fixed cost of an insert (~10 ms of CPU in chdb) and the parts the engine merges
  later are paid once per writer block, not once per partition.
- Before the first insert of a block, its range and the source high-water marks
  it is filtered with are written to ``sink_blocks``. A restarted writer reads
  them back, skips offsets below ``first`` (earlier blocks, all stored), re-forms
  exactly ``[first, last]`` with the same filter and inserts it under the same
  tokens (a no-op where the first attempt got through), and goes on. Kafka
  offsets are committed after the inserts; a lost commit only means a re-read.
- A worker that crashed re-sends results for raw messages it had not committed,
  at new offsets. Every message carries its source identity (``batch_id`` =
  raw ``topic/partition/offset``), a worker's output for one raw partition goes
  to one partition here in raw-offset order, so per (table, raw partition) the
  writer keeps the highest raw offset stored and drops anything at or below it.

No Kafka client here: messages come in as ``(offset, schema, table)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from sinks.clickhouse import Store
from sinks.probe_tiers import MINUTE_TABLE, TIER_TABLES, hourly_tiers, merge_minute_rows

STATE_TABLE = "sink_blocks"
BLOCK_ROWS = 1_000_000
"""The store writer's default rows per block (``FABRICSCOPE_SINK_BLOCK_ROWS``). Every block is a part of
``probes`` and of each tier that the engine merges later; at 1,000,000 rows a 20 M-row run merges 0.9 rows
per stored row instead of 1.6 at 500,000, and the block's tier rows fall from 0.10 to 0.05 per probe
(a pair probed twice in a block is one tier row): 0.67-0.70x the raw table's CPU per row, the documented
queries within 1.25x (``bench raw-layout``; BENCHMARKS.md sections 4 and 17). What it costs: the writer
holds twice the rows (about 1.5 GiB at its peak at the paper's rate against 1.1; 1.7-1.9 with the next block's
uploads read while one goes in, :class:`sinks.kafka_sink.StoreWriter`)."""


def source_of(table: pa.Table) -> tuple[str, int] | None:
    """``(raw topic/partition, raw offset)`` of a message's rows from its ``batch_id``, or None.

    A worker emits one message per raw message and table, so the first row speaks for all.

    Raises:
        ValueError: ``batch_id`` is not ``topic/partition/offset``.
    """
    if "batch_id" not in table.column_names or table.num_rows == 0:
        return None
    bid = table["batch_id"][0].as_py()
    topic_part, sep, off = bid.rpartition("/")
    if not sep or not off.isdigit() or "/" not in topic_part:
        raise ValueError(f"batch_id {bid!r} is not topic/partition/offset")
    return topic_part, int(off)


@dataclass
class Entry:
    """One consumed message: its offset, the table it goes to, and its rows (None: nothing to insert)."""

    offset: int
    table: str
    rows: pa.Table | None


@dataclass
class Block:
    """A formed block: what to insert where, and the state to record first."""

    first: int
    last: int
    tables: dict[str, pa.Table]
    hwm_before: dict[str, int]
    hwm_after: dict[str, int]
    dropped_rows: int

    def token(self, topic: str, partition: int) -> str:
        """The deduplication token of every insert of this block."""
        return f"{topic}/{partition}/{self.first}-{self.last}"


def form_block(entries: list[Entry], hwm: dict[str, int], merge: bool = True) -> Block:
    """Filter ``entries`` (one partition, ascending offsets) against ``hwm`` and group rows by table.

    A message whose source offset is at or below the mark of its (table, raw partition) is a worker's
    replay of rows already stored (or already in this block): it is dropped. Deterministic: the same
    entries and marks give the same block. ``merge``: the minute rows merged per key (False: left as sent,
    for :func:`form_writer_block`, which merges the partitions' rows together once).
    """
    after = dict(hwm)
    by_table: dict[str, list[pa.Table]] = {}
    dropped = 0
    for e in entries:
        if e.rows is None or e.rows.num_rows == 0:
            continue
        src = source_of(e.rows)
        if src is not None:
            key = f"{e.table}|{src[0]}"
            if src[1] <= after.get(key, -1):
                dropped += e.rows.num_rows
                continue
            after[key] = src[1]
        by_table.setdefault(e.table, []).append(e.rows)
    tables = {t: pa.concat_tables(parts, promote_options="permissive") for t, parts in by_table.items()}
    if merge and MINUTE_TABLE in tables:  # replays are out: one row per key for the whole block
        tables[MINUTE_TABLE] = merge_minute_rows(tables[MINUTE_TABLE])
    return Block(entries[0].offset, entries[-1].offset, tables, dict(hwm), after, dropped)


@dataclass
class PartitionState:
    """What the writer knows of one consumed partition.

    Attributes:
        hwm: highest raw offset stored per ``table|raw topic/partition``.
        skip_below: offsets below this are in blocks already stored.
        redo: ``(first, last)`` of the last recorded block, to re-form exactly before anything else.
        pending: messages read and not yet in a block.
        pending_rows: their rows.
        first_read_s: when the oldest pending message was read (monotonic s).
        last_read_s: when the newest pending message was read (monotonic s).
        multi_redo: partition -> ``(first, last)`` of the last recorded block when it was a writer block over
            several partitions: to re-form from every range (whoever owns them now) before this partition
            takes anything; None when there is none.
        judged: what the recorded block was judged with besides its messages (``baseline``: the flow-baseline
            snapshot's generation, :mod:`sinks.raw_rows`), to re-form it alike.
    """

    hwm: dict[str, int] = field(default_factory=dict)
    skip_below: int = -1
    redo: tuple[int, int] | None = None
    redo_hwm_after: dict[str, int] = field(default_factory=dict)
    pending: list[Entry] = field(default_factory=list)
    pending_rows: int = 0
    first_read_s: float | None = None
    last_read_s: float | None = None
    multi_redo: dict[int, tuple[int, int]] | None = None
    judged: dict[str, int] = field(default_factory=dict)

    def accept(self, entry: Entry, now_s: float) -> None:
        """Take one message read from the partition (in offset order)."""
        if entry.offset < self.skip_below:
            return  # in a block stored before the last recorded one
        if self.redo is not None and entry.offset > self.redo[1] and not self.pending:
            # the recorded block was committed: the consumer starts past it
            self.hwm, self.redo = dict(self.redo_hwm_after), None
        if not self.pending:
            self.first_read_s = now_s
        self.last_read_s = now_s
        self.pending.append(entry)
        self.pending_rows += entry.rows.num_rows if entry.rows is not None else 0

    def take_block(self, max_rows: int, max_s: float, now_s: float, force: bool = False) -> list[Entry] | None:
        """The entries of the next block if one is due, else None.

        A block being re-formed after a restart is due once its last offset has been read, and holds
        exactly its recorded range. Otherwise a block is due at ``max_rows`` rows or ``max_s`` seconds
        after its first message was read (or when ``force``d: stopping, partitions revoked), and holds the
        oldest messages up to ``max_rows`` rows; call again for the rest.
        """
        if not self.pending:
            return None
        if self.redo is not None:
            first, last = self.redo
            if self.pending[-1].offset < last:
                return None
            n = sum(1 for e in self.pending if e.offset <= last)
            out = [e for e in self.pending[:n] if e.offset >= first]
            self._drop(n)
            self.redo = None
            return out or None
        started = now_s if self.first_read_s is None else self.first_read_s  # 0.0 is a time, not "unset"
        due = force or self.pending_rows >= max_rows or now_s - started >= max_s
        if not due:
            return None
        # At most ``max_rows`` rows (and at least one message): a writer catching up reads 1,000 messages a
        # poll, which must not all become one block. Where the block is cut does not matter to a replay:
        # the recorded range is re-formed, not the cut.
        n, rows = 0, 0
        for e in self.pending:
            n += 1
            rows += e.rows.num_rows if e.rows is not None else 0
            if rows >= max_rows:
                break
        out = self.pending[:n]
        self._drop(n)
        return out

    def _drop(self, n: int) -> None:
        self.pending = self.pending[n:]
        self.pending_rows = sum(e.rows.num_rows for e in self.pending if e.rows is not None)
        self.first_read_s = self.first_read_s if self.pending else None
        self.last_read_s = self.last_read_s if self.pending else None


@dataclass
class WriterBlock:
    """The blocks of several partitions of one topic, inserted together: one insert per table.

    Attributes:
        parts: partition -> its :class:`Block` (its range and marks; its tables are in ``tables``).
        tables: every partition's rows per table; the minute rows merged per key over all of them.
        judged: recorded with the block's state (:attr:`PartitionState.judged`).
    """

    parts: dict[int, Block]
    tables: dict[str, pa.Table]
    judged: dict[str, int] = field(default_factory=dict)

    @property
    def ranges(self) -> dict[int, tuple[int, int]]:
        """partition -> ``(first, last)`` offsets."""
        return {p: (b.first, b.last) for p, b in sorted(self.parts.items())}

    @property
    def dropped_rows(self) -> int:
        """Rows dropped as a worker's replay, over every partition."""
        return sum(b.dropped_rows for b in self.parts.values())

    def token(self, topic: str) -> str:
        """The deduplication token of every insert: ``topic`` then ``/partition/first-last`` of each partition in
        partition order (one partition: :meth:`Block.token`, the token of a single-partition block)."""
        return topic + "".join(f"/{p}/{b.first}-{b.last}" for p, b in sorted(self.parts.items()))

    def marks(self, which: str) -> dict[str, int]:
        """Every partition's source high-water marks ``"before"`` or ``"after"`` the block, in one dict (a
        raw partition feeds one partition here, so the keys of different partitions never collide)."""
        out: dict[str, int] = {}
        for b in self.parts.values():
            out.update(b.hwm_before if which == "before" else b.hwm_after)
        return out


def form_writer_block(parts: Mapping[int, tuple[list[Entry], dict[str, int]]]) -> WriterBlock:
    """One :class:`WriterBlock` from ``partition -> (entries, marks)``: each partition filtered as
    :func:`form_block` does, the rows of each table concatenated in partition order, the minute rows merged
    per key once for all. Deterministic: the same entries and marks give the same rows.

    Raises:
        ValueError: ``parts`` is empty, or a partition has no entries.
    """
    if not parts or any(not entries for entries, _ in parts.values()):
        raise ValueError("a writer block needs at least one message of each of its partitions")
    blocks = {p: form_block(entries, hwm, merge=False) for p, (entries, hwm) in sorted(parts.items())}
    by_table: dict[str, list[pa.Table]] = {}
    for b in blocks.values():
        for t, rows in b.tables.items():
            by_table.setdefault(t, []).append(rows)
    tables = {t: pa.concat_tables(ps, promote_options="permissive") for t, ps in by_table.items()}
    if MINUTE_TABLE in tables:  # replays are out: one row per key for the whole block
        tables[MINUTE_TABLE] = merge_minute_rows(tables[MINUTE_TABLE])
    return WriterBlock(blocks, tables)


@dataclass(frozen=True)
class BlockBudget:
    """When a writer block is due: the row cap, and how long it waits for more rows.

    A block is due at ``max_rows`` rows; or ``max_s`` seconds after its oldest message was read if it holds
    ``min_rows`` rows by then; below that it keeps waiting while the input is still arriving, up to
    ``slow_max_s``; and it is due as soon as nothing was read for ``quiet_s`` (the input stopped: waiting adds
    no rows), or for ``settle_s`` once it holds ``min_rows`` (its fixed cost is paid for: a pause of the input,
    the end of a replay or of a backlog, need not hold ready rows back for ``quiet_s``). A part per block is a
    fixed ~50 ms of the writer's CPU (five inserts) plus the engine's merges of it later: at a slow input (a
    small fabric, a quiet hour) a 10 s block of 10,000 rows pays ~5 µs per row in fixed cost alone, and 360
    parts per hour and table (120 at 30 s). Raw history and the tiers of a slow input become readable up to
    ``slow_max_s`` late; verdicts are not in blocks. A slow block never holds more than ``min_rows`` rows past
    ``max_s``, so its insert costs no more than a fast input's.

    Attributes:
        max_rows: rows over all partitions held (also the most a block holds).
        max_s: seconds after the oldest held message was read.
        min_rows: rows a block holds for ``max_s`` to cut it (0: always cut at ``max_s``).
        slow_max_s: the longest a block below ``min_rows`` waits (None: ``max_s``).
        quiet_s: seconds without a message after which the block is due whatever its age (None: never early).
            An agent uploads every 5 s, so an input quiet for longer has stopped, at least for a while.
        settle_s: seconds without a message after which a block of at least ``min_rows`` is due (None: never).
            An input that fills ``min_rows`` within ``max_s`` brings several uploads a second, so a second
            without one is a pause; a block cut there holds as many rows as one cut at ``max_s`` would.
    """

    max_rows: int
    max_s: float
    min_rows: int = 0
    slow_max_s: float | None = None
    quiet_s: float | None = None
    settle_s: float | None = None

    @classmethod
    def for_input(cls, max_rows: int, max_s: float, min_rows: int | None = None,
                  slow_max_s: float | None = None) -> BlockBudget:
        """The store writer's budget: ``min_rows`` defaults to a fifth of ``max_rows``, ``slow_max_s`` to
        3 x ``max_s`` (30 s at the default 10 s: ``fabricscope up`` on a small lab shows its rows twice a
        minute), ``quiet_s`` to the shorter of ``max_s`` and 6 s (one agent upload interval and some),
        ``settle_s`` to the shorter of ``quiet_s`` and 1 s."""
        quiet = min(max_s, 6.0)
        return cls(max_rows, max_s, max_rows // 5 if min_rows is None else min_rows,
                   3 * max_s if slow_max_s is None else max(slow_max_s, max_s), quiet, min(quiet, 1.0))

    def due(self, rows: int, age_s: float, idle_s: float) -> bool:
        """Whether a block of ``rows`` rows whose oldest message was read ``age_s`` ago and newest ``idle_s``
        ago is due (not counting ``force``)."""
        if rows >= self.max_rows or age_s >= (self.max_s if self.slow_max_s is None else self.slow_max_s):
            return True
        if self.quiet_s is not None and idle_s >= self.quiet_s:
            return True
        if rows < self.min_rows:
            return False
        return age_s >= self.max_s or (self.settle_s is not None and idle_s >= self.settle_s)


def take_writer_block(states: Mapping[int, PartitionState], max_rows: int, max_s: float, now_s: float,
                      force: bool = False, budget: BlockBudget | None = None) -> dict[int, list[Entry]] | None:
    """The entries of the next writer block over ``states`` (partition -> state), if one is due, else None.

    Due when ``budget`` (default: ``max_rows`` rows held over all partitions, or ``max_s`` seconds after the
    oldest held message was read; :class:`BlockBudget`) says so, or when ``force``d. Holds at most
    ``budget.max_rows`` rows (at least one message): partitions are taken
    oldest held message first, each up to what is left of the budget, so a partition that always holds a
    full budget (a writer catching up) does not starve the others. Partitions re-forming a recorded block
    (``redo``) are left out: they re-form it alone (:meth:`PartitionState.take_block`).
    """
    budget = budget or BlockBudget(max_rows, max_s)
    held = {p: st for p, st in states.items() if st.pending and st.redo is None}
    if not held:
        return None
    oldest = min(now_s if st.first_read_s is None else st.first_read_s for st in held.values())
    newest = max(now_s if st.last_read_s is None else st.last_read_s for st in held.values())
    if not (force or budget.due(sum(st.pending_rows for st in held.values()), now_s - oldest, now_s - newest)):
        return None
    out, left = {}, budget.max_rows
    for p in sorted(held, key=lambda q: (held[q].first_read_s or 0.0, q)):
        if left <= 0:
            break
        entries = held[p].take_block(left, 0.0, now_s, force=True)
        if entries:
            out[p] = entries
            left -= sum(e.rows.num_rows for e in entries if e.rows is not None)
    return out


def load_states(store: Store, topic: str) -> dict[int, PartitionState]:
    """The recorded last block of every partition of ``topic`` (newest row per partition).

    A partition whose last block was a writer block over several partitions gets ``multi_redo`` (all its
    ranges) instead of ``redo``: re-forming it needs the other partitions' messages too
    (:func:`form_writer_block`); its marks are those of every partition of the block.
    """
    t = store.query_arrow(
        "SELECT partition, argMax(first_offset, written_ns) AS f, argMax(last_offset, written_ns) AS l, "
        f"argMax(source_hwm, written_ns) AS h FROM {STATE_TABLE} WHERE topic = '{_quote(topic)}' GROUP BY partition"
    )
    out = {}
    for r in t.to_pylist():
        marks = json.loads(r["h"])
        first, last = int(r["f"]), int(r["l"])
        ranges = {int(p): (int(f), int(lst)) for p, (f, lst) in marks.get("ranges", {}).items()}
        judged = {k: int(v) for k, v in marks.get("judged", {}).items()}
        if len(ranges) > 1:
            out[int(r["partition"])] = PartitionState(hwm=marks["before"], skip_below=first,
                                                      redo_hwm_after=marks["after"], multi_redo=ranges, judged=judged)
        else:
            out[int(r["partition"])] = PartitionState(hwm=marks["before"], skip_below=first, redo=(first, last),
                                                      redo_hwm_after=marks["after"], judged=judged)
    return out


def state_rows(topic: str, block: WriterBlock, now_ns: int) -> pa.Table:
    """The ``sink_blocks`` rows recorded before a writer block's inserts: one per partition, each with the
    block's every range and every partition's marks (``source_hwm`` JSON: ``before``, ``after``, ``ranges``,
    and ``judged`` when the block has it)."""
    hwm = json.dumps({"before": block.marks("before"), "after": block.marks("after"),
                      "ranges": {str(p): list(r) for p, r in block.ranges.items()},
                      **({"judged": block.judged} if block.judged else {})}, sort_keys=True)
    parts = sorted(block.parts)
    return pa.table({
        "topic": [topic] * len(parts), "partition": pa.array(parts, pa.uint32()),
        "first_offset": [block.parts[p].first for p in parts], "last_offset": [block.parts[p].last for p in parts],
        "source_hwm": [hwm] * len(parts), "written_ns": [now_ns] * len(parts),
    })


# Tiers before raw rows: a store refusing a tier holds back the block's raw rows too.
INSERT_ORDER = (*TIER_TABLES, "probes", "deadletters")


def writer_block_inserts(topic: str, block: WriterBlock, now_ns: int, tor_of: Mapping[str, str] | None = None
                         ) -> list[tuple[str, pa.Table, str | None]]:
    """The statements of one writer block, in order: ``(table, rows, dedup token)``; the state rows first.

    The block's merged minute rows are rolled up into the hourly tiers here (:mod:`sinks.probe_tiers`),
    ToRs from ``tor_of`` (RNIC -> ToR; None: every ToR ''). Each tier gets one insert under the block's
    token, like the raw rows, so a re-formed block is a no-op in every table its first attempt reached.
    """
    token = block.token(topic)
    out: list[tuple[str, pa.Table, str | None]] = [(STATE_TABLE, state_rows(topic, block, now_ns), None)]
    tables = dict(block.tables)
    if MINUTE_TABLE in tables:
        tables.update(hourly_tiers(tables[MINUTE_TABLE], tor_of or {}))
    for table in sorted(tables, key=INSERT_ORDER.index):
        out.append((table, tables[table], token))
    return out


def block_inserts(topic: str, partition: int, block: Block, now_ns: int,
                  tor_of: Mapping[str, str] | None = None) -> list[tuple[str, pa.Table, str | None]]:
    """:func:`writer_block_inserts` of one partition's ``block`` (token ``topic/partition/first-last``)."""
    return writer_block_inserts(topic, WriterBlock({partition: block}, block.tables), now_ns, tor_of)


def _quote(s: str) -> str:
    return s.replace("\\", "\\\\").replace("'", "\\'")
