"""TopicMirror on the real broker: every message applied in order, per message or coalesced into fewer calls
(``coalesce_rows``), with the same path index either way; each catch-up applies what was published before it,
the partitions paused in between (the mirror resumes them for the catch-up)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from schemas.arrow_pa import table_from_columns
from schemas.codec import encode, headers_for
from schemas.topic_mirror import TopicMirror
from streams.pingmesh.path_index import PathIndex

pytestmark = pytest.mark.kafka

T0 = 1_800_000_000 * 10**9


@pytest.fixture
def topic(new_topic) -> str:  # noqa: ANN001
    return new_topic("paths.traced")


CATCH_UP_S = 60.0
"""The poll timeout of a catch-up in these tests: long enough for a loaded machine, it only bounds a hang."""

def _paths(rows: list[tuple[str, int, str, int, bool]]) -> bytes:
    """rows: (src_ip, src_port, hops, trace_ns, complete), forward traces to 10.0.1.1:4791, as path.v1."""
    n = len(rows)
    cols = list(zip(*rows, strict=True))
    return encode(table_from_columns("path.v1", {
        "agent_id": ["a1"] * n, "upload_ns": [T0] * n, "trace_ns": list(cols[3]), "direction": ["forward"] * n,
        "src_rnic": ["r0"] * n, "dst_rnic": ["r1"] * n, "src_ip": list(cols[0]), "dst_ip": ["10.0.1.1"] * n,
        "src_port": list(cols[1]), "dst_port": [4791] * n, "hops": list(cols[2]), "complete": list(cols[4])}))


def _registry(rnics: list[str]) -> bytes:
    n = len(rnics)
    return encode(table_from_columns("registry.v1", {
        "agent_id": ["c"] * n, "upload_ns": [T0] * n, "host": ["h1"] * n, "rnic": rnics, "tor": ["A"] * n,
        "ip": [f"10.0.0.{i}" for i in range(n)], "gid": ["g"] * n, "gid_index": [3] * n, "qpn": [7] * n}))


def _publish(bootstrap: str, topic: str, messages: list[tuple[str, bytes]]) -> None:
    prod = Producer({"bootstrap.servers": bootstrap})
    for schema, payload in messages:
        prod.produce(topic, payload, partition=0, headers=headers_for(schema))
    assert prod.flush(10) == 0


# Five path messages of 2, 2, 1, 3 and 5 rows. Port 50000 is traced three times (the newest complete trace
# wins: S2 at T0 + 2), port 50001 first incomplete, then complete (complete beats incomplete: S3).
PATH_MESSAGES = [
    [("10.0.0.1", 50000, "r0,A,S1,B,r1", T0, True), ("10.0.0.1", 50001, "r0,A,S3", T0, False)],
    [("10.0.0.1", 50000, "r0,A,S2,B,r1", T0 + 2, True), ("10.0.0.2", 50002, "r2,A,S1,B,r1", T0, True)],
    [("10.0.0.1", 50000, "r0,A,S4,B,r1", T0 + 1, True)],
    [("10.0.0.1", 50001, "r0,A,S3,B,r1", T0 + 1, True), ("10.0.0.3", 50003, "r3,A,S2,B,r1", T0, True),
     ("10.0.0.3", 50004, "r3,A,S4,B,r1", T0, True)],
    [("10.0.0.4", 50005 + i, f"r4,A,S{i + 1},B,r1", T0, True) for i in range(5)],
]


def test_coalesced_calls_carry_every_row_in_order_and_split_at_the_row_limit_and_the_schema(kafka_bootstrap, topic):
    msgs = [("path.v1", _paths(m)) for m in PATH_MESSAGES]
    _publish(kafka_bootstrap, topic, msgs[:3] + [("registry.v1", _registry(["r0", "r1"]))]
             + [("path.v1", b"not arrow")] + msgs[3:])
    calls: list[tuple[str, int]] = []

    def record(t: pa.Table) -> None:
        calls.append((t.schema.metadata[b"fabricscope.schema"].decode(), t.num_rows))

    m = TopicMirror(kafka_bootstrap, topic, record, coalesce_rows=4)
    assert m.catch_up() == 6  # six messages decoded and applied; the undecodable one skipped
    assert m.undecodable == 1
    # 2 + 2 rows (a third message would pass 4), then 1 (the registry's schema ends it), the registry's 2
    # rows, then 3 (5 more would pass 4), then the 5-row message alone: larger than the limit, not split
    assert calls == [("path.v1", 4), ("path.v1", 1), ("registry.v1", 2), ("path.v1", 3), ("path.v1", 5)]
    assert m.applied_calls == 5

    _publish(kafka_bootstrap, topic, [("path.v1", _paths(PATH_MESSAGES[2]))] * 3)
    assert m.catch_up() == 3 and calls[5:] == [("path.v1", 3)]  # later catch-ups coalesce what they bring
    assert m.catch_up() == 0 and m.applied_calls == 6
    m.close()

    per_message: list[int] = []
    one = TopicMirror(kafka_bootstrap, topic, lambda t: per_message.append(t.num_rows))
    assert one.catch_up() == 9 and per_message == [2, 2, 1, 2, 3, 5, 1, 1, 1] and one.applied_calls == 9
    one.close()


def test_a_path_index_fed_coalesced_equals_one_fed_per_message(kafka_bootstrap, topic):
    _publish(kafka_bootstrap, topic, [("path.v1", _paths(m)) for m in PATH_MESSAGES])
    indexes = []
    for coalesce in (0, 4, 1_000):
        index = PathIndex()
        m = TopicMirror(kafka_bootstrap, topic, index.update, coalesce_rows=coalesce)
        assert m.catch_up() == 5
        assert m.applied_calls == {0: 5, 4: 3, 1_000: 1}[coalesce]
        m.close()
        got = index.latest.sort_by([("src_port", "ascending")])
        indexes.append(list(zip(got["src_port"].to_pylist(), got["hops"].to_pylist(), strict=True)))
    assert indexes[0] == indexes[1] == indexes[2]
    assert indexes[0][:5] == [(50000, "r0,A,S2,B,r1"), (50001, "r0,A,S3,B,r1"), (50002, "r2,A,S1,B,r1"),
                              (50003, "r3,A,S2,B,r1"), (50004, "r3,A,S4,B,r1")]
    assert len(indexes[0]) == 10


WARM = """
import json, sys
from streams.runtime.app import build_app
from streams.runtime.config import RuntimeConfig
app = build_app(RuntimeConfig(bootstrap=sys.argv[1], topic_prefix=sys.argv[2], var_dir=sys.argv[3], role=sys.argv[4]))
app.warm_side_inputs()
print(json.dumps({"paths": None if app._paths is None else len(app._paths),
                  "apply_calls": None if app._paths_mirror is None else app._paths_mirror.applied_calls,
                  "rnics": sorted(app._rnics)}))
"""


@pytest.mark.parametrize("role", ["stream", "reducer"])
def test_a_stream_worker_loads_paths_and_registry_before_joining_its_group(kafka_bootstrap, topic_prefix, tmp_path,
                                                                          role):
    import json
    import subprocess
    import sys

    from schemas import topics as T

    from conftest import REPO

    paths = T.topic_name(T.PATHS_TRACED, topic_prefix)
    prod = Producer({"bootstrap.servers": kafka_bootstrap})
    for p, m in enumerate(PATH_MESSAGES[:3]):  # three messages over three partitions: one coalesced call
        prod.produce(paths, _paths(m), partition=p, headers=headers_for("path.v1"))
    prod.produce(T.topic_name(T.REGISTRY, topic_prefix), _registry(["r0", "r1", "r2"]), key=b"controller",
                 headers=headers_for("registry.v1"))  # a compacted topic: keyed
    assert prod.flush(10) == 0
    out = subprocess.run([sys.executable, "-c", WARM, kafka_bootstrap, topic_prefix, str(tmp_path), role], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if role == "stream":  # tuples 50000, 50001, 50002 (50000 three times): 3 entries, from one update call
        assert got == {"paths": 3, "apply_calls": 1, "rnics": ["r0", "r1", "r2"]}
    else:  # the reducer has no path index and reads its own registry copy when it starts
        assert got == {"paths": None, "apply_calls": None, "rnics": []}


def test_each_catch_up_applies_what_was_published_before_it(kafka_bootstrap, new_topic):
    topic = new_topic("registry", partitions=3)
    seen: list[str] = []
    # a catch-up gives up on a poll that waits past its timeout (5 s in the workers); on a loaded machine the
    # first fetch after a resume can take longer, so the test allows more: it asserts what is applied, not when
    mirror = TopicMirror(kafka_bootstrap, topic, lambda t: seen.extend(t["rnic"].to_pylist()))
    p = Producer({"bootstrap.servers": kafka_bootstrap})

    def publish(rnics: list[str], partition: int) -> None:
        p.produce(topic, _registry(rnics), partition=partition, headers=headers_for("registry.v1"))
        p.flush(30)

    assert mirror.catch_up() == 0  # empty topic: nothing to wait for
    publish(["r1", "r2"], 0)
    publish(["r3"], 2)
    assert mirror.catch_up(timeout=CATCH_UP_S) == 2
    assert sorted(seen) == ["r1", "r2", "r3"]
    for round_ in range(3):  # published while the mirror is paused between calls
        publish([f"a{round_}"], 0)
        publish([f"b{round_}"], 1)
        assert mirror.catch_up(timeout=CATCH_UP_S) == 2
        assert sorted(seen[-2:]) == [f"a{round_}", f"b{round_}"]
    assert mirror.catch_up() == 0
    assert len(seen) == 9
    mirror.close()
