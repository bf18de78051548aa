"""The store writer's rows of raw uploads (sinks.raw_rows): the worker's rules, the retention policy, the
minute tier of every good row, the marks a block skips and raises, and what a block records to be re-formed."""

from __future__ import annotations

import json

import pyarrow as pa

from schemas.arrow_pa import table_from_columns
from schemas.codec import encode
from schemas.probe_rows.retention import RetentionPolicy
from sinks.blocks import load_states, writer_block_inserts
from sinks.clickhouse import ChdbStore, migrate
from sinks.raw_rows import RAW_ENTRY, RawJudge, form_raw_block, mark_key, raw_entry

from probe_rows import columns, known_rows, probe_row, recent

TOPIC = "t.probes.raw"


def _rows(first_seq: int = 0) -> list[dict]:
    """Six probes of H1: seq 1 a timeout, seq 2 a service probe; network RTT 5,000 + 10 x seq ns."""
    t1 = recent(1_800_000_000 * 10**9)
    rows = [probe_row(first_seq + i, t1=t1 + i, t2=1_000, t3=100, t4=300, t5=1_000 + 5_000 + 200 + 10 * i,
                      t6=t1 + i + 9_000) for i in range(6)]
    rows[1]["status"] = "timeout"
    for k in ("t2", "t3", "t4", "t5", "t6"):
        rows[1][k] = None
    rows[2]["pinglist"], rows[2]["job_id"] = "service", "job-a"
    return rows


def _entry(offset: int, rows: list[dict]) -> object:
    return raw_entry(offset, encode(table_from_columns("probe.v1", columns(rows))), "probe.v1", f"{TOPIC}/0/{offset}")


def test_rows_are_decomposed_and_named_by_their_raw_message():
    rows, expected = known_rows()
    block = form_raw_block(TOPIC, {0: ([_entry(7, rows)], {})}, RawJudge())
    probes = block.tables["probes"]
    got = {r["seq"]: (r["network_rtt_ns"], r["responder_delay_ns"], r["prober_delay_ns"])
           for r in probes.select(["seq", "network_rtt_ns", "responder_delay_ns", "prober_delay_ns"]).to_pylist()}
    assert got == expected
    assert set(probes["batch_id"].to_pylist()) == {f"{TOPIC}/0/7"}
    minute = block.tables["probes_1m"]
    assert "batch_id" not in minute.column_names
    assert sum(minute["probes"].to_pylist()) == 3 and sum(minute["timeouts"].to_pylist()) == 1
    assert block.parts[0].hwm_after == {mark_key(TOPIC, 0): 7}


def test_anomalies_keeps_few_raw_rows_and_the_tiers_count_every_probe():
    judge = RawJudge(retention=RetentionPolicy("anomalies", sample=0.0))
    block = form_raw_block(TOPIC, {0: ([_entry(9, _rows())], {})}, judge)
    assert block.tables["probes"]["seq"].to_pylist() == [1, 2]  # the timeout and the service probe
    m = block.tables["probes_1m"]
    assert sum(m["probes"].to_pylist()) == 6 and sum(m["timeouts"].to_pylist()) == 1


def test_a_flow_baseline_keeps_the_row_over_it():
    rows = _rows()
    flow = f"tor_mesh|A1|A2|{49152 + 4}"
    base = pa.table({"flow": [flow], "baseline_ns": [5_000.0 + 10 * 4 - 1]})
    judge = RawJudge(retention=RetentionPolicy("anomalies", sample=0.0), baseline=base, generation=5)
    block = form_raw_block(TOPIC, {0: ([_entry(1, rows)], {})}, judge)
    assert block.tables["probes"]["seq"].to_pylist() == [1, 2, 4]


def test_rows_the_worker_dead_letters_are_left_out():
    rows = _rows()
    rows[3]["responder_rnic"] = "Z9"  # not registered: the worker dead-letters it
    judge = RawJudge(known_rnics={"A1", "A2"})
    block = form_raw_block(TOPIC, {0: ([_entry(3, rows)], {})}, judge)
    assert 3 not in block.tables["probes"]["seq"].to_pylist()
    assert block.tables["probes"].num_rows == 5 and sum(block.tables["probes_1m"]["probes"].to_pylist()) == 5


def test_an_undecodable_upload_has_no_rows_and_the_block_still_covers_its_offset():
    bad = raw_entry(4, b"not arrow", "probe.v1", f"{TOPIC}/0/4")
    assert bad.table == RAW_ENTRY and bad.rows is None
    block = form_raw_block(TOPIC, {0: ([_entry(3, _rows()), bad], {})}, RawJudge())
    assert (block.parts[0].first, block.parts[0].last) == (3, 4)
    assert block.tables["probes"].num_rows == 6


def test_offsets_at_or_below_the_mark_are_skipped_and_counted():
    """The hand-over from a writer of the enriched topic: what it stored (its mark) is not stored again."""
    entries = [_entry(10, _rows(0)), _entry(11, _rows(10)), _entry(12, _rows(20))]
    block = form_raw_block(TOPIC, {0: (entries, {mark_key(TOPIC, 0): 11})}, RawJudge())
    assert sorted(set(block.tables["probes"]["seq"].to_pylist())) == list(range(20, 26))
    assert block.parts[0].dropped_rows == 12
    assert block.parts[0].hwm_after[mark_key(TOPIC, 0)] == 12
    nothing = form_raw_block(TOPIC, {0: (entries[:2], {mark_key(TOPIC, 0): 11})}, RawJudge())
    assert nothing.tables == {} and nothing.parts[0].hwm_after[mark_key(TOPIC, 0)] == 11


def test_the_same_entries_and_judge_form_the_same_rows():
    entries = [_entry(1, _rows(0)), _entry(2, _rows(10))]
    judge = RawJudge(retention=RetentionPolicy("anomalies", sample=0.5, seed=3))
    a = form_raw_block(TOPIC, {0: (entries, {})}, judge)
    b = form_raw_block(TOPIC, {0: (list(entries), {})}, judge)
    assert a.tables["probes"].equals(b.tables["probes"]) and a.tables["probes_1m"].equals(b.tables["probes_1m"])


def test_a_block_records_its_baseline_generation_and_a_restart_reads_it_back(tmp_path):
    store = ChdbStore(tmp_path / "ch")
    try:
        migrate(store)
        block = form_raw_block(TOPIC, {0: ([_entry(5, _rows())], {}), 1: ([_entry(8, _rows(50))], {})}, RawJudge())
        block.judged["baseline"] = 1_790_000_000_000_000_000
        state = writer_block_inserts(TOPIC, block, 1)[0]
        assert json.loads(state[1]["source_hwm"][0].as_py())["judged"] == {"baseline": 1_790_000_000_000_000_000}
        store.insert_arrow(state[0], state[1])
        loaded = load_states(store, TOPIC)
        assert loaded[0].judged == loaded[1].judged == {"baseline": 1_790_000_000_000_000_000}
        assert loaded[0].multi_redo == {0: (5, 5), 1: (8, 8)}
    finally:
        store.close()
