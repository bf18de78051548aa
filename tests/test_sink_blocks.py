"""How the store writer cuts offset-aligned blocks (:class:`sinks.blocks.PartitionState`), without Kafka."""

from __future__ import annotations

import pyarrow as pa

from sinks.blocks import Entry, PartitionState


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
