"""The reducer's flow baselines reach workers as whole snapshots: what the reducer evicts, workers forget."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from schemas.codec import CodecError, decode
from schemas.probe_rows.baselines import SNAPSHOT_HEADER, BaselineSnapshots, snapshot_messages
from schemas.recent_mirror import RecentTopicMirror


def _baseline(flows: list[str], ns: float = 1000.0) -> pa.Table:
    return pa.table({"flow": flows, "baseline_ns": [ns] * len(flows), "windows": [3] * len(flows)})


def _feed(snap: BaselineSnapshots, messages: list) -> None:
    for headers, value in messages:
        snap.apply(decode(value, "flow_baseline.v1")[1], headers)


def test_a_snapshot_is_taken_only_when_all_its_parts_arrived_and_replaces_the_last():
    snap = BaselineSnapshots()
    first = snapshot_messages(_baseline([f"f{i}" for i in range(5)]), generation=1, chunk=2)
    assert [dict(h)[SNAPSHOT_HEADER] for h, _ in first] == [b"1/0/3", b"1/1/3", b"1/2/3"]
    _feed(snap, first[:2])
    assert snap.current is None  # two of three parts
    _feed(snap, first[2:])
    assert snap.current.column("flow").to_pylist() == ["f0", "f1", "f2", "f3", "f4"]
    # the reducer evicted f0..f3 and learnt g0: the next snapshot holds f4 and g0 only
    _feed(snap, snapshot_messages(_baseline(["f4", "g0"], 2000.0), generation=2, chunk=2))
    assert snap.current.to_pydict() == {"flow": ["f4", "g0"], "baseline_ns": [2000.0, 2000.0]}


def test_an_unfinished_snapshot_is_dropped_when_a_newer_one_starts():
    snap = BaselineSnapshots()
    _feed(snap, snapshot_messages(_baseline(["a"]), generation=1))
    cut = snapshot_messages(_baseline(["b", "c", "d"]), generation=2, chunk=2)[:1]  # its reducer died here
    _feed(snap, cut + snapshot_messages(_baseline(["e"]), generation=3))
    assert snap.current["flow"].to_pylist() == ["e"]


def test_an_empty_snapshot_forgets_every_baseline():
    snap = BaselineSnapshots()
    _feed(snap, snapshot_messages(_baseline(["a", "b"]), generation=1))
    empty = snapshot_messages(_baseline([]), generation=2)
    assert len(empty) == 1
    _feed(snap, empty)
    assert snap.current.num_rows == 0


def test_messages_without_the_header_are_merged_by_flow():
    snap = BaselineSnapshots()
    old = _baseline(["a", "b"]).select(["flow", "baseline_ns"])
    snap.apply(old, [("schema", b"flow_baseline.v1")])
    snap.apply(pa.table({"flow": ["b", "c"], "baseline_ns": [5.0, 6.0]}), None)
    assert sorted(zip(snap.current["flow"].to_pylist(), snap.current["baseline_ns"].to_pylist(),
                      strict=True)) == [("a", 1000.0), ("b", 5.0), ("c", 6.0)]


@pytest.mark.parametrize("bad", [b"7/3/3", b"7/x/3", b"7/1"])
def test_a_malformed_snapshot_header_is_named(bad):
    with pytest.raises(CodecError, match="snapshot header"):
        BaselineSnapshots().apply(_baseline(["a"]), [(SNAPSHOT_HEADER, bad)])


@pytest.mark.kafka
def test_a_starting_worker_reads_only_recent_snapshots_and_keeps_the_newest(kafka_bootstrap, new_topic):
    topic = new_topic("latency.baselines")
    prod = Producer({"bootstrap.servers": kafka_bootstrap})
    now_ms = int(time.time() * 1000)
    # an hour-old snapshot of a flow since evicted, then two recent ones; a bad header in between
    for headers, value in snapshot_messages(_baseline(["gone"]), 1, chunk=1):
        prod.produce(topic, value, headers=headers, timestamp=now_ms - 3_600_000)
    for gen, flows in ((2, ["a", "b", "c"]), (3, ["b", "c", "d"])):
        for headers, value in snapshot_messages(_baseline(flows, float(gen)), gen, chunk=2):
            prod.produce(topic, value, headers=headers, timestamp=now_ms - 30_000)
        if gen == 2:
            prod.produce(topic, value, headers=[("schema", b"flow_baseline.v1"), (SNAPSHOT_HEADER, b"junk")],
                         timestamp=now_ms - 30_000)
    assert prod.flush(10) == 0

    snap = BaselineSnapshots()
    mirror = RecentTopicMirror(kafka_bootstrap, topic, None, lookback_s=300, apply_with_headers=snap.apply)
    assert mirror.catch_up(timeout=30) == 4  # 2 + 2 parts; the hour-old one not read, the junk skipped
    assert mirror.undecodable == 1
    assert snap.current.to_pydict() == {"flow": ["b", "c", "d"], "baseline_ns": [3.0, 3.0, 3.0]}
    mirror.close()
