"""`bench throughput`'s clocks: a pipeline of known rates, on a simulated clock, comes out at its true rate.

The fake pipeline publishes, processes and stores rows at rates the test sets; time is simulated (no sleeps,
no wall-clock assertions), so the rate the benchmark reports can be compared with the true one exactly.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from bench import throughput as bt

STEP_S = 0.001  # the simulation's time step


class FakePipeline:
    """Rows published at ``publish_rows_s``; workers turn published rows into output at ``worker_rows_s`` while
    publishing goes on (as Faust workers do); the store writer stores output at ``writer_rows_s``. The workers'
    output counter starts at ``warm_output`` (an earlier upload's)."""

    def __init__(self, rows: int, publish_rows_s: float, worker_rows_s: float, writer_rows_s: float,
                 warm_output: int = 6_000) -> None:
        self.rows, self.rates = rows, (publish_rows_s, worker_rows_s, writer_rows_s)
        self.t = 0.0
        self.published = self.worked = self.stored = 0.0
        self.warm_output = warm_output

    def clock(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        for _ in range(max(1, round(dt / STEP_S))):
            self.t += STEP_S
            self.worked = min(self.published, self.worked + self.rates[1] * STEP_S)
            self.stored = min(self.worked, self.stored + self.rates[2] * STEP_S)

    def publish(self) -> None:
        while self.published < self.rows:
            self.published = min(self.rows, self.published + self.rates[0] * STEP_S)
            self.sleep(STEP_S)

    def produced(self) -> int:
        return self.warm_output + int(self.worked)

    def done(self) -> bool:
        return self.stored >= self.rows


def _rate(p: FakePipeline) -> float:
    t_start, _, t_done = bt.pipeline_span(p.publish, p.produced, p.done, clock=p.clock, sleep=p.sleep)
    return p.rows / (t_done - t_start)


def test_a_slow_writer_comes_out_at_its_rate_although_workers_ran_during_the_publish():
    # the writer stores 200,000 rows/s, the bound: 600,000 rows take 3.0 s after the first is published, of
    # which 0.5 s is publishing while the workers already turn rows into output. Reading the workers' output
    # only after the publish (and starting the clock at its next growth) would say ~240,000 rows/s.
    p = FakePipeline(600_000, publish_rows_s=1.2e6, worker_rows_s=1e6, writer_rows_s=2e5)
    assert _rate(p) == pytest.approx(2e5, rel=0.04)  # the span is seen to within one 0.1 s poll of 3.0 s


def test_workers_that_finish_during_the_publish_still_give_the_writers_rate():
    # the workers keep up with the publish, so their output never grows after it: the clock must not wait
    # for a growth it will never see
    p = FakePipeline(300_000, publish_rows_s=3e5, worker_rows_s=1e7, writer_rows_s=1e5)
    assert _rate(p) == pytest.approx(1e5, rel=0.04)


def test_the_span_starts_when_publishing_starts_and_first_output_is_seen_after_it():
    p = FakePipeline(100_000, publish_rows_s=1e5, worker_rows_s=1e6, writer_rows_s=5e4)
    p.t = 10.0
    t_start, t_first, t_done = bt.pipeline_span(p.publish, p.produced, p.done, clock=p.clock, sleep=p.sleep)
    assert t_start == 10.0
    assert t_first == pytest.approx(11.0, abs=0.01)  # the first poll comes after the 1 s publish
    assert t_done == pytest.approx(12.0, abs=0.11)  # 100,000 rows at 50,000 rows/s


def test_a_pipeline_that_never_finishes_times_out():
    p = FakePipeline(100_000, publish_rows_s=1e6, worker_rows_s=1e6, writer_rows_s=0.0)
    with pytest.raises(TimeoutError, match="did not store every row in 5 s"):
        bt.pipeline_span(p.publish, p.produced, p.done, clock=p.clock, sleep=p.sleep, timeout_s=5.0)


class SlowStore:
    """A store whose inserts take 0.5 s of simulated time each and whose engine merges for 2 s after."""

    def __init__(self) -> None:
        self.t, self.cpu, self.sql = 0.0, 0.0, []

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None) -> None:
        self.t += 0.5
        self.cpu += 0.5

    def query_arrow(self, sql: str) -> pa.Table:
        self.sql.append(sql)
        merging = len([q for q in self.sql if "system.merges" in q]) <= 4  # 4 busy polls of the merges
        if merging:
            self.cpu += 0.5
        return pa.table({"n": [1 if merging else 0]})

    def command(self, sql: str) -> None:
        self.sql.append(sql)


def test_the_bare_insert_is_timed_to_the_last_block_stored_and_its_cpu_through_the_merges(monkeypatch):
    monkeypatch.setattr(bt.time, "sleep", lambda s: None)
    store = SlowStore()
    blocks = [pa.table({"x": list(range(500_000))})] * 2
    rows_s, cpu_us = bt.bare_insert_blocks(store, blocks, clock=lambda: store.t, cpu=lambda: store.cpu)
    assert rows_s == 1_000_000 / 1.0  # two 0.5 s inserts; the merges after the last block are not in the span
    assert cpu_us == pytest.approx((1.0 + 4 * 0.5) / 1_000_000 * 1e6)  # the inserts' CPU and the merges'
    assert not any("OPTIMIZE" in q for q in store.sql)  # as the store writer: no forced merge


def test_cores_for_a_rate_count_every_process_of_the_pipeline():
    r = bt.ThroughputResult(
        rows=1, workers=1, bare_consumer_rows_s=1.0, pipeline_rows_s=1.0, bare_insert_rows_s=1.0,
        worker_cpu_us_per_row=2.0, sink_cpu_us_per_row=3.0, bare_insert_cpu_us_per_row=1.0,
        broker_cpu_us_per_row=0.5, peak_rss_mib={}, loop_lag_p99_ms=0.0, loop_lag_max_ms=0.0,
        minute_rows_per_probe=0.1, sink_backlog_rows_s=1.0, sink_backlog_cpu_us_per_row=1.0,
        reducer_cpu_us_per_row=0.25)
    assert bt.cores_for(r, 1.5e6) == pytest.approx(1.5 * (2.0 + 0.25 + 3.0 + 0.5))
    assert "cores for 1.5 M rows/s (every process: workers + reducer + store writer + broker" in bt.report(r)
    assert "8.6" in bt.report(r)
