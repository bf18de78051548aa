"""Bad input through the real worker: each bad record lands on the dead-letter topic with its reason,
the good rows of the same batches and every later batch still reach the store, and the worker lives.
RNICs are checked against the registry topic (published first, as the controller does).

Real broker, real ``fabricscope worker`` and ``fabricscope sink`` processes, real chdb.
"""

from __future__ import annotations

import pytest
from reliability import query, store_counts

from producers.kafka_producer import AgentProducer
from schemas.arrow_nano import encode_columns
from schemas.arrow_pa import SCHEMA_METADATA_KEY, table_from_columns
from schemas.codec import encode

from conftest import REPO, wait_for
from probe_rows import BASE_NS, PROBER_RNIC0, RESPONDER_RNIC0, columns, probe_row

pytestmark = pytest.mark.kafka

CRASHER = REPO / "tests" / "fixtures" / "codec_crashes" / "segfault-1077.bin"


def good(seq: int, agent: str = "H1", t1: int = BASE_NS) -> dict:
    """A valid ok probe: network 10 000 ns, responder 2 000 ns, prober 3 000 ns."""
    return probe_row(seq, t1=t1, t2=PROBER_RNIC0 + 1_000, t3=RESPONDER_RNIC0 + 4_000, t4=RESPONDER_RNIC0 + 6_000,
                     t5=PROBER_RNIC0 + 13_000, t6=t1 + 15_000, agent=agent)


def test_bad_records_go_to_the_deadletter_topic_and_the_rest_flows(pipeline_env, tmp_path):
    env, procs = pipeline_env
    topic = f"{env['FABRICSCOPE_TOPIC_PREFIX']}probes.raw"
    p = AgentProducer(env["KAFKA_BOOTSTRAP"])

    def send(payload: bytes, agent: str = "H1") -> None:
        p.publish(topic, payload, "probe.v1", key=agent)

    registry = {"agent_id": ["controller"] * 2, "upload_ns": [BASE_NS] * 2, "host": ["H1", "H2"],
                "rnic": ["A1", "A2"], "tor": ["T1", "T1"], "ip": ["10.1.0.1", "10.1.0.2"],
                "gid": ["fe80::1", "fe80::2"], "gid_index": [3, 3], "qpn": [77, 77]}
    p.publish(f"{env['FABRICSCOPE_TOPIC_PREFIX']}registry", encode_columns("registry.v1", registry), "registry.v1",
              key="controller")
    send(encode_columns("probe.v1", columns([good(0), good(1), good(2)])))  # 3 good
    no_t6 = table_from_columns("probe.v1", columns([good(3)])).drop_columns(["t6"])
    assert no_t6.schema.metadata[SCHEMA_METADATA_KEY] == b"probe.v1"
    send(encode(no_t6))  # a missing column
    send(CRASHER.read_bytes())  # a corrupt batch that once segfaulted the worker
    send(b"\x00\x01garbage, not Arrow at all")
    send(encode_columns("probe.v1", columns([good(20, "H2"), good(21, "H2"), good(21, "H2")])), "H2")  # dup seq
    jump = good(30, "H3")
    jump["t6"] = jump["t1"] + 20_000_000_000  # the host clock jumped 20 s between t1 and t6
    wrap = good(31, "H3")
    wrap["t5"] = 500  # the prober RNIC's counter wrapped between t2 and t5
    send(encode_columns("probe.v1", columns([jump, wrap, good(32, "H3")])), "H3")
    stranger = good(51, "H5")
    stranger["responder_rnic"] = "Z9"  # not in the registry
    send(encode_columns("probe.v1", columns([good(50, "H5"), stranger])), "H5")
    send(encode_columns("probe.v1", columns([good(40, "H4"), good(41, "H4")])), "H4")  # after all of it
    assert p.flush() == 0

    procs.start("sink")
    worker = procs.start("worker")
    store = tmp_path / "var" / "clickhouse"
    # 3 + 2 + 1 + 1 + 2 good rows; 7 dead-letter records
    wait_for(lambda: store_counts(store) == (9, 9), timeout=180, what="9 good probe rows")  # with the start
    dl = wait_for(lambda: (t := query(store, "SELECT source_offset, reason, row FROM deadletters "
                                             "ORDER BY source_offset, row")) is not None and t.num_rows >= 7 and t,
                  timeout=60, what="7 dead letters")
    got = [(r["source_offset"], r["row"], r["reason"]) for r in dl.to_pylist()]
    assert len(got) == 7
    # partitions are keyed by agent: compare by reason, and check each one's row index
    reasons = {(row, reason.split(":")[0] if "Arrow IPC" in reason else reason) for _, row, reason in got}
    assert (None, "probe.v1: missing columns t6") in reasons
    ipc = [r for _, row, r in got if row is None and "not a complete Arrow IPC stream" in r]
    assert len(ipc) == 2
    assert (2, "duplicate (agent_id, seq) in the batch") in reasons
    assert (0, "t6-t1 over 10000000000 ns on the prober host clock (clock jump or counter wrap)") in reasons
    assert (1, "negative t5-t2 on the prober RNIC clock") in reasons
    assert (1, "unknown RNIC 'Z9' in responder_rnic (not in the registry)") in reasons
    rows = query(store, "SELECT agent_id, seq, network_rtt_ns FROM probes ORDER BY agent_id, seq").to_pylist()
    assert [(r["agent_id"], r["seq"]) for r in rows] == [
        ("H1", 0), ("H1", 1), ("H1", 2), ("H2", 20), ("H2", 21), ("H3", 32), ("H4", 40), ("H4", 41), ("H5", 50)]
    assert {r["network_rtt_ns"] for r in rows} == {10_000}
    assert worker.poll() is None, "the worker died on bad input"
