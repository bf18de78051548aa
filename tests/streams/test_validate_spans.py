"""The validation shortcuts (schemas.probe_rows.validate): the span rules checked in one numpy pass (a step with no
bad span skips the per-rule Arrow passes), and repeats found without a sort when seq increases per agent; the rules
a step breaks are the same as with every rule evaluated one by one."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schemas.probe_rows.validate as validate
from schemas.arrow_pa import table_from_columns
from schemas.probe_rows.validate import broken_rules, split_probes

from probe_rows import columns, known_rows, probe_row

I64 = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.integers(-10**11, 10**11),
                st.sampled_from([0, 1, 10_000_000_000, 10_000_000_001, 2**63 - 1, -2**63]))


@pytest.mark.parametrize("row, reason", [
    (probe_row(30, t1=100, t2=0, t3=0, t4=50, t5=40, t6=9_000), "responder delay t4-t3 exceeds the prober span "
                                                                "t5-t2 (clocks mixed?)"),
    (probe_row(31, t1=0, t2=0, t3=0, t4=1, t5=2, t6=10_000_000_001), "t6-t1 over 10000000000 ns on the prober host "
                                                                     "clock (clock jump or counter wrap)"),
    (probe_row(32, t1=2**62, t2=0, t3=0, t4=1, t5=2, t6=-2**62), "negative t6-t1 on the prober host clock"),
])
def test_one_bad_span_alone_is_found(row, reason):
    rows, _ = known_rows()
    split = split_probes(table_from_columns("probe.v1", columns([*rows, row])))
    assert split.reasons == [reason] and split.bad_index == [3]


def test_a_timeout_with_absurd_readings_and_an_ok_row_at_the_limit_are_good():
    rows, _ = known_rows()
    extra = [probe_row(40, t1=5, t2=10**12, t3=None, t4=None, t5=None, t6=None, status="timeout"),
             {**probe_row(41, t1=0, t2=0, t3=0, t4=0, t5=-5, t6=-7), "status": "timeout"},
             probe_row(42, t1=0, t2=0, t3=0, t4=10_000_000_000, t5=10_000_000_000, t6=10_000_000_000)]
    assert split_probes(table_from_columns("probe.v1", columns([*rows, *extra]))).reasons == []


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(["ok", "timeout"]), I64, I64, I64, I64, I64, I64), min_size=1,
                max_size=12))
def test_rules_equal_every_rule_evaluated(readings):
    rows = [{**probe_row(i, t1=t1, t2=t2, t3=t3, t4=t4, t5=t5, t6=t6), "status": status}
            for i, (status, t1, t2, t3, t4, t5, t6) in enumerate(readings)]
    t = table_from_columns("probe.v1", columns(rows))
    batch = np.zeros(t.num_rows, dtype=np.int64)
    got = broken_rules(t, None, batch)
    shortcut = validate._spans_fine
    validate._spans_fine = lambda *_: False  # every rule one by one (Arrow kernels), as before the shortcut
    try:
        want = broken_rules(t, None, batch)
    finally:
        validate._spans_fine = shortcut
    assert got[1] == want[1] and np.array_equal(got[0], want[0])


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["H1", "H2", None]), st.integers(0, 6)), min_size=1,
                max_size=20), st.booleans())
def test_repeats_found_with_and_without_the_in_order_shortcut(rows, ordered):
    """A repeated (batch, agent, seq) is found whether or not each agent's rows come in one increasing run."""
    if ordered:  # the common upload: per batch and agent one run of increasing seq
        rows = sorted(set(rows), key=lambda r: (r[0], r[1] or "", r[2]))
    batch = np.array([b for b, _, _ in rows], dtype=np.int64)
    t = pa.table({"seq": pa.array([s for *_, s in rows], pa.uint64())})
    got = validate._repeats(t, batch, pa.array([a for _, a, _ in rows], pa.string()))
    seen, want = set(), []
    for b, a, s in rows:  # by hand: a later row with the same (batch, agent or '', seq) repeats
        want.append((b, a or "", s) in seen)
        seen.add((b, a or "", s))
    assert (got is None and not any(want)) or (got is not None and got.tolist() == want)
