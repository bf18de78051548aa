"""`up`'s progress: the stats query on the real schema (chdb), dead letters with their top reason,
loud when most rows fail, plain time-stamped lines every 10 s when stderr is not a terminal."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from fabricscope.up import STATS_SQL, Progress, Stats, stats_sql


@pytest.fixture
def store(migrated_store):
    return migrated_store


def _dead(reasons: list[str]) -> pa.Table:
    n = len(reasons)
    return pa.table({"source_topic": ["probes.raw"] * n, "source_partition": pa.array([0] * n, pa.int32()),
                     "source_offset": pa.array(range(n), pa.int64()), "schema": ["probe.v1"] * n,
                     "reason": reasons, "row": pa.array(range(n), pa.int64()), "payload": [None] * n,
                     "received_ns": pa.array([time.time_ns()] * n, pa.int64())})


def test_stats_group_dead_letters_by_reason_without_the_quoted_names(store):
    reasons = ([f"unknown RNIC 'h{i}-r0' in prober_rnic (not in the registry)" for i in range(5)]
               + ["duplicate (agent_id, seq) in the batch"] * 3)
    store.insert_arrow("deadletters", _dead(reasons))
    row = store.query_arrow(STATS_SQL).to_pylist()[0]
    assert (row["rows"], row["timeouts"], row["verdicts"], row["dead"]) == (0, 0, 0, 8)
    # five different RNIC names, one cause: it outnumbers the three duplicates
    assert row["top_reason"] == "unknown RNIC … in prober_rnic (not in the registry)"


def test_progress_is_plain_lines_every_10_s_and_loud_when_most_rows_fail(capsys):
    p = Progress(tty=False, every_s=10)
    with p:
        p.show(None, 0.5)
        p.show(Stats(rows=100), 5.0)  # within 10 s of the last line: nothing
        p.show(Stats(rows=800, timeouts=3, verdicts=1), 11.0)
        p.show(Stats(rows=800, dead=900, top_reason="unknown RNIC … (not in the registry)"), 12.0)
        p.show(Stats(rows=2900, verdicts=2, events=["18:28:42 NEW P1 switch A->S3 (job job-lab)"]), 26.0)
    lines = capsys.readouterr().err.splitlines()
    assert lines[3] == "18:28:42 NEW P1 switch A->S3 (job job-lab)"  # the feed's line, as it arrived
    del lines[3]
    assert [ln[9:] for ln in lines] == [
        "0 s: waiting for the store writer…",
        "11 s: 800 probe rows this run, 3 timeouts, 1 verdict",
        'most rows are dead-lettered (900 dead, 800 stored): unknown RNIC … (not in the registry). '
        '`fabricscope query "SELECT reason, count() FROM deadletters GROUP BY reason"`',
        "26 s: 2,900 probe rows this run (133/s), 0 timeouts, 2 verdicts",  # (2900 - 100) / (26 - 5) s
    ]
    assert all(ln[2] == ln[5] == ":" and "\x1b" not in ln for ln in lines)
    assert Stats(rows=10, dead=2, top_reason="x").line(3) == (
        "3 s: 10 probe rows this run, 0 timeouts, 0 verdicts, 2 rows dead-lettered (top reason: x)")


def test_stats_count_this_run_only(store):
    now = time.time_ns()
    store.insert_arrow("deadletters", _dead(["old"] * 4))
    row = store.query_arrow(stats_sql(now + 10**12)).to_pylist()[0]  # a run that starts after those rows
    assert row["dead"] == 0
    assert store.query_arrow(stats_sql(now - 10**12)).to_pylist()[0]["dead"] == 4


def test_rate_holds_between_blocks_and_falls_when_they_stop():
    """Blocks of 3,000 rows every 30 s (the writer's slow-input blocks): 100/s between them, never 0/s;
    once a block is overdue the wait counts."""
    p = Progress(tty=False, every_s=10)
    seen = {t: p._rate(Stats(rows=n), t) for t, n in [
        (35.0, 0), (40.0, 3000), (45.0, 3000), (69.0, 3000), (70.0, 6000), (71.0, 6000), (85.0, 6000),
        (99.0, 6000), (100.0, 9000), (110.0, 9000), (130.0, 9000), (200.0, 9000)]}
    assert seen[35.0] is seen[40.0] is seen[45.0] is seen[69.0] is None  # no rows, then one block: no rate yet
    assert [seen[t] for t in (70.0, 71.0, 85.0, 99.0, 100.0, 110.0, 130.0)] == [100.0] * 7  # (9000-3000)/(100-40)
    assert seen[200.0] == 6000 / 160  # 70 s since the last block (the longest gap was 30 s): 37.5/s
