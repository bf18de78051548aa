"""Where a verdict came from: the store writer stamps an origin (the message's header, else its own), and
the saved queries show one origin at a time and keep probe noise (stale_qpn) out of the suspects.
Real broker, real embedded store."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from schemas.arrow_pa import table_from_columns
from schemas.codec import encode
from schemas.headers import headers_for
from schemas.saved_queries import render_named
from sinks import origin
from sinks.clickhouse import ChdbStore, migrate
from sinks.kafka_sink import StoreWriter

S = 1_000_000_000
WS = (time.time_ns() // (20 * S) - 30) * 20 * S  # ten minutes ago: inside every query's default range


def _verdict(vid: str, kind: str, location: str, impact: str = "P1") -> pa.Table:
    return table_from_columns("verdict.v1", {
        "verdict_id": [vid], "window_start_ns": [WS], "window_end_ns": [WS + 20 * S], "kind": [kind],
        "location": [location], "votes": [1.0], "confidence": [1.0], "failed_probes": [12], "total_probes": [40],
        "impact": [impact], "job_id": ["job-lab"], "revision_of": [None], "evidence": ["{}"], "emitted_ns": [WS]})


def _coverage() -> pa.Table:
    return table_from_columns("coverage.v1", {
        "window_start_ns": [WS], "window_end_ns": [WS + 20 * S], "job_id": ["job-lab"], "connections_expected": [2],
        "connections_probed": [2], "links_total": [4], "links_covered": [4], "agents_silent": [""],
        "sufficient": [True]})


def test_origin_helpers():
    assert origin.for_source("lab") == "lab" and origin.for_source("synthetic") == "sim"
    assert origin.for_source("kafka") == "production"
    assert origin.from_headers([("origin", b"demo")], "lab") == "demo"
    assert origin.from_headers([("origin", b"mars")], "lab") == "lab"  # not an origin: the writer's own
    assert origin.from_headers(None, "sim") == "sim"
    assert origin.stamp("probes", _coverage(), "lab").column_names == _coverage().column_names
    with pytest.raises(origin.OriginError, match="choose one of production, lab, sim, demo"):
        origin.check("staging")


@pytest.mark.kafka
def test_the_writer_stamps_origin_and_queries_show_one(kafka_bootstrap, topic_prefix, tmp_path):
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    assert migrate(store) == []  # idempotent
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    sent = [("v-lab", _verdict("v-lab", "switch", "A->S3"), []),
            ("v-demo", _verdict("v-demo", "busy_host", "H2"), [("origin", b"demo")]),
            ("v-stale", _verdict("v-stale", "stale_qpn", "C3", "P2"), [])]
    for vid, table, extra in sent:
        p.produce(f"{topic_prefix}verdicts", encode(table), key=vid, headers=[*headers_for("verdict.v1"), *extra])
    p.produce(f"{topic_prefix}coverage", encode(_coverage()), headers=headers_for("coverage.v1"))
    assert p.flush(30) == 0
    w = StoreWriter(store, kafka_bootstrap, topic_prefix, origin="lab")
    try:
        deadline = time.monotonic() + 60
        while w.stats.rows_by_table.get("verdicts", 0) < 3 or w.stats.rows_by_table.get("coverage", 0) < 1:
            assert time.monotonic() < deadline, w.stats
            w.poll_once(timeout=0.5)
    finally:
        w.close()
    rows = store.query_arrow("SELECT verdict_id, origin FROM verdicts").to_pylist()
    got = {r["verdict_id"]: r["origin"] for r in rows}
    assert got == {"v-lab": "lab", "v-demo": "demo", "v-stale": "lab"}
    assert store.query_arrow("SELECT origin FROM coverage").to_pylist() == [{"origin": "lab"}]

    def suspects(**params: str) -> list[tuple]:
        rows = store.query_arrow(render_named("top_suspects", params)).to_pylist()
        return [(r["origin"], r["kind"], r["location"], r["worst_impact"]) for r in rows]

    assert suspects(origin="lab") == [("lab", "switch", "A->S3", "P1")]  # no demo verdict, no probe noise
    assert suspects(origin="demo") == [("demo", "busy_host", "H2", "P1")]
    assert sorted(suspects()) == [("demo", "busy_host", "H2", "P1"), ("lab", "switch", "A->S3", "P1")]
    assert ("lab", "stale_qpn", "C3", "noise") in suspects(origin="lab", noise="1")
    timeline = store.query_arrow(render_named("job_timeline", {"job": "job-lab", "origin": "lab"})).to_pylist()
    assert sorted(r["verdict_id"] for r in timeline) == ["v-lab", "v-stale"]
    store.close()
