"""The store writer's flow baselines (sinks.baseline_reader) on the real broker: the newest complete snapshot,
an earlier one by generation (kept, or read again from the topic), and a writer under ``anomalies``
retention that stores the rows over the snapshot it recorded with the block."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from schemas.arrow_pa import table_from_columns
from schemas.codec import encode
from schemas.headers import headers_for
from schemas.probe_rows.baselines import snapshot_messages
from schemas.probe_rows.retention import RetentionPolicy
from sinks.baseline_reader import KEEP, BaselineReader
from sinks.clickhouse import ChdbStore, migrate
from sinks.kafka_sink import StoreWriter

from probe_rows import columns, probe_row, recent

pytestmark = pytest.mark.kafka


def _baseline(flows: list[str], value: float) -> pa.Table:
    return pa.table({"flow": flows, "baseline_ns": [value] * len(flows), "windows": [3] * len(flows)})


def _publish(bootstrap: str, topic: str, baseline: pa.Table, generation: int, chunk: int = 1) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for headers, value in snapshot_messages(baseline, generation, chunk=chunk):
        p.produce(topic, value, b"baseline", headers=headers)
    assert p.flush(30) == 0


def test_the_newest_complete_snapshot_and_an_earlier_one_by_generation(kafka_bootstrap, topic_prefix):
    topic = f"{topic_prefix}latency.baselines"
    g0 = time.time_ns()
    _publish(kafka_bootstrap, topic, _baseline(["f1", "f2"], 100.0), g0)
    r = BaselineReader(kafka_bootstrap, topic)
    try:
        table, gen = r.newest()
        assert gen == g0 and table["baseline_ns"].to_pylist() == [100.0, 100.0]
        later = [g0 + k for k in range(1, KEEP + 2)]
        for g in later:  # more snapshots than the reader keeps: g0 leaves its memory
            _publish(kafka_bootstrap, topic, _baseline(["f1"], float(g - g0)), g)
        table, gen = r.newest()
        assert gen == later[-1] and table["baseline_ns"].to_pylist() == [float(KEEP + 1)]
        assert r.of(later[-2])["baseline_ns"].to_pylist() == [float(KEEP)]  # kept
        again = r.of(g0)  # read again from the topic
        assert again is not None and again["flow"].to_pylist() == ["f1", "f2"]
        assert r.of(g0 - 10**12) is None  # never published
    finally:
        r.close()


def test_a_writer_under_anomalies_keeps_the_rows_over_the_recorded_snapshot(kafka_bootstrap, topic_prefix,
                                                                            tmp_path):
    t1 = recent(1_800_000_000 * 10**9)
    rows = [probe_row(i, t1=t1 + i, t2=1_000, t3=100, t4=300, t5=6_200 + 10 * i, t6=t1 + i + 9_000)
            for i in range(6)]  # network RTT 5,000 + 10 i ns
    flows = [f"tor_mesh|A1|A2|{49152 + i}" for i in range(6)]
    gen = time.time_ns()
    base = pa.table({"flow": flows[3:5], "baseline_ns": [5_029.0, 5_041.0], "windows": [3, 3]})  # 3 over, 4 not
    _publish(kafka_bootstrap, f"{topic_prefix}latency.baselines", base, gen, chunk=100)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(f"{topic_prefix}probes.raw", encode(table_from_columns("probe.v1", columns(rows))), b"H1",
              headers=headers_for("probe.v1"))
    assert p.flush(30) == 0
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    w = StoreWriter(store, kafka_bootstrap, topic_prefix, retention=RetentionPolicy("anomalies", sample=0.0))
    try:
        deadline = time.monotonic() + 60
        while w.stats.rows_by_table.get("probes_1m", 0) == 0:
            assert time.monotonic() < deadline, w.stats
            w.poll_once(timeout=0.5, force=True)
        assert store.query_arrow("SELECT seq FROM probes ORDER BY seq")["seq"].to_pylist() == [3]
        assert store.query_arrow("SELECT sum(probes) AS n FROM probes_1m")["n"].to_pylist() == [6]
        state = json.loads(store.query_arrow("SELECT source_hwm FROM sink_blocks")["source_hwm"][0].as_py())
        assert state["judged"] == {"baseline": gen}
    finally:
        w.close()
        store.close()
