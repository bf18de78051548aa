"""How the store writer cuts offset-aligned blocks (:class:`sinks.blocks.PartitionState`), without Kafka."""

from __future__ import annotations

import pyarrow as pa

from sinks.blocks import BLOCK_ROWS, BlockBudget, Entry, PartitionState, take_writer_block


def _state(rows_per_message: list[int]) -> PartitionState:
    st = PartitionState()
    for off, n in enumerate(rows_per_message):
        st.accept(Entry(off, "probes", pa.table({"seq": list(range(n))})), now_s=0.0)
    return st


def test_a_block_holds_at_most_max_rows_and_the_rest_waits_for_its_budget():
    st = _state([40, 40, 40, 40, 40])  # 200 rows held, cap 100
    first = st.take_block(100, 10.0, now_s=1.0)
    assert [e.offset for e in first] == [0, 1, 2]  # 120 rows: the message that reaches the cap is the last
    assert st.take_block(100, 10.0, now_s=1.0) is None  # 80 rows, 1 s of a 10 s budget
    assert [e.offset for e in st.take_block(100, 10.0, now_s=10.0)] == [3, 4]  # read at 0 s: due at 10 s
    assert st.pending == [] and st.pending_rows == 0


def test_a_single_message_over_the_cap_is_a_block_of_its_own():
    st = _state([500, 10])
    assert [e.offset for e in st.take_block(100, 10.0, now_s=0.0)] == [0]
    assert [e.offset for e in st.take_block(100, 10.0, now_s=0.0, force=True)] == [1]


def test_a_writer_block_takes_every_partition_up_to_the_budget_oldest_first():
    states = {p: PartitionState() for p in (0, 1, 2)}
    for off in range(3):
        states[2].accept(Entry(off, "probes", pa.table({"seq": list(range(40))})), now_s=1.0)  # read first
        states[0].accept(Entry(off, "probes", pa.table({"seq": list(range(40))})), now_s=2.0)
    states[1].accept(Entry(0, "probes", pa.table({"seq": [0]})), now_s=3.0)
    assert take_writer_block(states, 1000, 10.0, now_s=10.9) is None  # 241 rows, oldest read 9.9 s ago
    taken = take_writer_block(states, 100, 10.0, now_s=10.9)  # 241 rows >= 100: due, at most 100 rows
    assert {p: [e.offset for e in es] for p, es in taken.items()} == {2: [0, 1, 2]}  # 120 rows: the oldest
    taken = take_writer_block(states, 100, 10.0, now_s=11.0)  # partition 0 read at 2.0: 9 s, 121 rows >= 100
    assert {p: [e.offset for e in es] for p, es in taken.items()} == {0: [0, 1, 2]}
    assert take_writer_block(states, 100, 10.0, now_s=12.9) is None  # 1 row, read 9.9 s ago
    assert {p: [e.offset for e in es] for p, es in take_writer_block(states, 100, 10.0, now_s=13.0).items()} == {
        1: [0]}


def test_a_writer_block_over_partitions_at_once_when_forced_and_not_over_one_re_forming_its_block():
    states = {p: PartitionState() for p in (0, 1)}
    states[1].redo = (5, 6)  # its recorded block is re-formed alone, first
    for p in (0, 1):
        states[p].accept(Entry(5, "probes", pa.table({"seq": [1, 2]})), now_s=0.0)
    assert {p: [e.offset for e in es] for p, es in take_writer_block(states, 100, 10.0, 0.0, force=True).items()} \
        == {0: [5]}
    assert take_writer_block(states, 100, 10.0, 0.0, force=True) is None


def _trickle(states: dict[int, PartitionState], until_s: float, every_s: float, rows: int) -> None:
    """A slow input: one message of ``rows`` rows every ``every_s`` seconds from 0 to ``until_s``, partitions in
    turn."""
    t, off = 0.0, 0
    while t <= until_s:
        states[off % len(states)].accept(Entry(off // len(states), "probes", pa.table({"seq": list(range(rows))})),
                                         now_s=t)
        t, off = t + every_s, off + 1


def test_a_slow_input_keeps_its_block_open_past_the_budget_while_rows_still_arrive():
    budget = BlockBudget.for_input(max_rows=10_000, max_s=10.0)  # a fifth = 2,000 rows, 30 s, quiet after 6 s
    assert (budget.min_rows, budget.slow_max_s, budget.quiet_s, budget.settle_s) == (2_000, 30.0, 6.0, 1.0)
    states = {p: PartitionState() for p in (0, 1)}
    _trickle(states, until_s=20.0, every_s=5.0, rows=100)  # 5 messages by 20 s: 500 rows, newest read at 20 s
    assert take_writer_block(states, 10_000, 10.0, now_s=20.0, budget=budget) is None  # 20 s old, under 2,000
    old = take_writer_block(states, 10_000, 10.0, now_s=20.0)  # without the budget: due at 10 s, any rows
    assert sum(len(es) for es in old.values()) == 5
    states = {p: PartitionState() for p in (0, 1)}
    _trickle(states, until_s=25.0, every_s=5.0, rows=100)  # 6 messages, 600 rows
    assert take_writer_block(states, 10_000, 10.0, now_s=29.9, budget=budget) is None  # newest 4.9 s ago
    taken = take_writer_block(states, 10_000, 10.0, now_s=30.0, budget=budget)  # the slow block's cap
    assert sum(len(es) for es in taken.values()) == 6


def test_a_block_at_its_budget_with_enough_rows_or_a_quiet_input_is_due():
    budget = BlockBudget.for_input(max_rows=10_000, max_s=10.0)
    states = {p: PartitionState() for p in (0, 1)}
    _trickle(states, until_s=9.5, every_s=0.5, rows=100)  # 20 messages, 2,000 rows by 9.5 s
    assert take_writer_block(states, 10_000, 10.0, now_s=9.9, budget=budget) is None  # under 10 s
    assert sum(len(es) for es in take_writer_block(states, 10_000, 10.0, now_s=10.0, budget=budget).values()) == 20
    states = {p: PartitionState() for p in (0, 1)}
    _trickle(states, until_s=1.0, every_s=0.5, rows=100)  # the input stops at 1 s: 300 rows
    assert take_writer_block(states, 10_000, 10.0, now_s=6.9, budget=budget) is None  # quiet 5.9 s
    assert sum(len(es) for es in take_writer_block(states, 10_000, 10.0, now_s=7.0, budget=budget).values()) == 3


def test_a_block_that_holds_its_minimum_rows_is_due_a_second_after_its_input_pauses():
    budget = BlockBudget.for_input(max_rows=10_000, max_s=10.0)
    states = {p: PartitionState() for p in (0, 1)}
    _trickle(states, until_s=2.0, every_s=0.25, rows=250)  # 9 messages, 2,250 rows: the input pauses at 2 s
    assert take_writer_block(states, 10_000, 10.0, now_s=2.9, budget=budget) is None  # 0.9 s without one
    assert sum(len(es) for es in take_writer_block(states, 10_000, 10.0, now_s=3.0, budget=budget).values()) == 9
    states = {p: PartitionState() for p in (0, 1)}
    _trickle(states, until_s=1.75, every_s=0.25, rows=230)  # 8 messages, 1,840 rows: under the minimum
    assert take_writer_block(states, 10_000, 10.0, now_s=7.7, budget=budget) is None  # waits the quiet 6 s
    assert take_writer_block(states, 10_000, 10.0, now_s=7.75, budget=budget) is not None


def test_the_settings_default_block_is_the_writers_default():
    from fabricscope.settings import Settings

    assert Settings.model_fields["fabricscope_sink_block_rows"].default == BLOCK_ROWS == 1_000_000
