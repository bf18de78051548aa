"""End to end on the real broker: agent producer -> Faust worker -> store writer -> chdb.

Needs the Kafka broker that .ci/run starts. No mock anywhere: the worker and the
sink are the `fabricscope worker` and `fabricscope sink` processes.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from producers.kafka_producer import AgentProducer
from schemas.arrow_nano import encode_columns
from schemas.arrow_pa import SCHEMA_METADATA_KEY, table_from_columns
from schemas.codec import encode
from sinks.query_endpoint import find_endpoint, query_remote

from conftest import read_topic, wait_for
from probe_rows import columns, known_rows, probe_row

pytestmark = pytest.mark.kafka


def _query(store_path, sql: str):  # noqa: ANN001
    url = find_endpoint(store_path)
    return query_remote(url, sql) if url else None


def test_known_batches_land_with_hand_computed_rtts_and_bad_input_goes_to_deadletter(pipeline_env, tmp_path):
    env, procs = pipeline_env
    prefix = env["FABRICSCOPE_TOPIC_PREFIX"]
    rows, expected = known_rows()
    producer = AgentProducer(env["KAFKA_BOOTSTRAP"])
    good_payload = encode_columns("probe.v1", columns(rows))
    producer.publish(f"{prefix}probes.raw", good_payload, "probe.v1", key="H1")
    # 1) truncated message
    producer.publish(f"{prefix}probes.raw", good_payload[: len(good_payload) // 2], "probe.v1", key="H1")
    # 2) a schema version this build does not know
    v9 = table_from_columns("probe.v1", columns(rows))
    v9 = v9.replace_schema_metadata({SCHEMA_METADATA_KEY: b"probe.v9"})
    producer.publish(f"{prefix}probes.raw", encode(v9), "probe.v9", key="H1")
    # 3) one row with negative t5-t2 next to a good row: the good row still lands
    neg = probe_row(10, t1=rows[0]["t1"], t2=5_000, t3=100, t4=200, t5=4_000, t6=rows[0]["t1"] + 9_000, agent="H3")
    ok = probe_row(11, t1=rows[0]["t1"], t2=5_000, t3=100, t4=300, t5=9_000, t6=rows[0]["t1"] + 9_000, agent="H3")
    producer.publish(f"{prefix}probes.raw", encode_columns("probe.v1", columns([neg, ok])), "probe.v1", key="H3")
    assert producer.flush() == 0

    procs.start("sink")
    procs.start("worker")
    store = tmp_path / "var" / "clickhouse"

    got = wait_for(
        lambda: (t := _query(store, "SELECT count() AS n FROM probes")) is not None and t["n"][0].as_py() == 4,
        what="4 probe rows in the store",
    )
    assert got
    t = _query(store, "SELECT agent_id, seq, status, network_rtt_ns, responder_delay_ns, prober_delay_ns "
                      "FROM probes ORDER BY agent_id, seq")
    by_seq = {(r["agent_id"], r["seq"]): r for r in t.to_pylist()}
    for seq, (net, resp, prober) in expected.items():
        r = by_seq[("H1", seq)]
        assert (r["network_rtt_ns"], r["responder_delay_ns"], r["prober_delay_ns"]) == (net, resp, prober)
    assert by_seq[("H1", 2)]["status"] == "timeout"
    # the good row of the mixed batch: (9000-5000)-(300-100) = 3800; prober (9000)-(4000) = 5000
    r = by_seq[("H3", 11)]
    assert (r["network_rtt_ns"], r["responder_delay_ns"], r["prober_delay_ns"]) == (3_800, 200, 5_000)
    assert ("H3", 10) not in by_seq

    dl = wait_for(
        lambda: (d := _query(store, "SELECT reason, schema, row FROM deadletters ORDER BY source_offset")) is not None
        and d.num_rows == 3 and d,
        what="3 dead letters",
    )
    reasons = dl["reason"].to_pylist()
    assert "not a complete Arrow IPC stream" in reasons[0]
    assert "probe.v9" in reasons[1] and "unknown schema" in reasons[1]
    assert reasons[2] == "negative t5-t2 on the prober RNIC clock"
    assert dl["row"].to_pylist()[2] == 0

    # the dead letters are records on the dead-letter topic too (replayable)
    msgs = read_topic(env["KAFKA_BOOTSTRAP"], f"{prefix}deadletter")
    assert len(msgs) == 3
    assert all(dict(m.headers())["schema"] == b"deadletter.v1" for m in msgs)
    payload_reasons = [pa.ipc.open_stream(m.value()).read_all()["reason"][0].as_py() for m in msgs]
    assert payload_reasons == reasons
