"""The closed loop as a service on the real broker: an ``undetermined`` verdict over a core pair of the
benchmark's three-tier fabric makes the service republish the pinglists of the agents that bounce probes
over those links; two windows later the lists go back to Eq. 1's (the withdrawal). Bad input is counted,
another origin's verdicts are left alone, and the command stops on SIGTERM."""

from __future__ import annotations

import signal

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from bench.accuracy import SIZES
from fabricscope.loop_service import LoopService
from producers import controller as ctl
from schemas.arrow_pa import arrow_schema
from schemas.codec import decode, encode, headers_for
from sinks.clickhouse import ChdbStore, migrate
from sinks.kafka_sink import StoreWriter

from conftest import read_topic, wait_for

WINDOW_NS = 20_000_000_000
T = 1_800_000_000 * 10**9
GROUP = "P0S1->X2|P1S1->X2"  # no 5-tuple splits it: the loop answers with bounced probes
CORE_PAIRS = ("P0S1->X1|P1S1->X1", "P0S1->X2|P1S1->X2", "P0S2->X3|P1S2->X3", "P0S2->X4|P1S2->X4")


def _verdict(i: int, kind: str, location: str, start: int) -> dict:
    return {"verdict_id": f"v{i}", "window_start_ns": start, "window_end_ns": start + WINDOW_NS,
            "kind": kind, "location": location, "votes": 3.0, "confidence": 0.5, "failed_probes": 17,
            "total_probes": 200, "impact": "P2", "job_id": None, "revision_of": None, "evidence": "{}",
            "emitted_ns": start + WINDOW_NS}


def _send(bootstrap: str, topic: str, payload: bytes, origin: str | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    extra = [("origin", origin.encode())] if origin else []
    p.produce(topic, payload, key=b"x", headers=[*headers_for("verdict.v1"), *extra])
    assert p.flush(10) == 0


def _verdicts(rows: list[dict]) -> bytes:
    return encode(pa.Table.from_pylist(rows, schema=arrow_schema("verdict.v1")))


def _lists(bootstrap: str, prefix: str) -> dict[str, list[int]]:
    """Per agent, the entry counts of each list published for it, in order."""
    out: dict[str, list[int]] = {}
    for m in read_topic(bootstrap, f"{prefix}pinglists"):
        out.setdefault(m.key().decode(), []).append(decode(m.value(), "pinglist.v1")[1].num_rows)
    return out


@pytest.mark.kafka
def test_an_undetermined_core_pair_gets_bounced_probes_then_they_are_withdrawn(kafka_bootstrap, topic_prefix,
                                                                                   tmp_path):
    inv = SIZES[3][1](1)
    now = [T]
    svc = LoopService(inv, kafka_bootstrap, topic_prefix, seed=1, clock=lambda: now[0], bounce=True)
    try:
        wait_for(lambda: svc.poll_once(0.2) >= 0 and svc.assigned, what="the loop's partitions")
        topic = f"{topic_prefix}verdicts"
        _send(kafka_bootstrap, topic, b"not arrow")  # unread: counted, the service goes on
        _send(kafka_bootstrap, topic, _verdicts([_verdict(1, "undetermined", GROUP, T - WINDOW_NS)]), origin="lab")
        _send(kafka_bootstrap, topic, _verdicts([_verdict(2, "undetermined", GROUP, T - WINDOW_NS),
                                                 _verdict(3, "undetermined", "A1->T1|B1->T1", T - WINDOW_NS)]))
        wait_for(lambda: svc.poll_once(0.2) >= 0 and svc.published > 0, what="the loop's pinglists")
        assert svc.unread == 1 and svc.other_origin == 1
        assert svc.loop.answered == 1 and svc.loop.refused == 1  # access links: no switch group to split
        assert [a.how for a in svc.loop.active.values()] == ["bounce"]
        bouncers = {e["prober_host"] for e in svc.loop.entries(now[0])}
        base = {h: len(ctl.pinglist_for_host(svc.base, h)) for h in bouncers}
        got = _lists(kafka_bootstrap, topic_prefix)
        assert set(got) == bouncers and bouncers  # only the agents whose lists changed
        # 8 bounced 5-tuples per member link, each from an RNIC under the link's lower end
        assert sum(got[h][-1] - base[h] for h in bouncers) == 16
        # the next window: its identifiability row counts the bounced probes, and the pair they split is gone
        now[0] = T + WINDOW_NS
        svc.poll_once(0.2)
        # two windows after the request with nothing renewing it: withdrawn, Eq. 1's lists again
        now[0] = T + 2 * WINDOW_NS
        svc.poll_once(0.2)
        assert not svc.loop.active
        got = _lists(kafka_bootstrap, topic_prefix)
        assert {h: v[-1] for h, v in got.items()} == base and all(len(v) == 2 for v in got.values())
    finally:
        svc.close()
    # one identifiability row per window, stored by the writer in the fabric's table
    store = ChdbStore(tmp_path / "ch")
    try:
        migrate(store)
        w = StoreWriter(store, kafka_bootstrap, topic_prefix)
        try:
            wait_for(lambda: w.poll_once(timeout=0.5) >= 0 and w.stats.rows_by_table.get("identifiability", 0) >= 3,
                     what="the identifiability rows in the store")
        finally:
            w.close()
        rows = store.query_arrow("SELECT window_start_ns, links, identifiable, ambiguous_groups, structural_groups, "
                                 "uncovered, loop_entries FROM identifiability ORDER BY window_start_ns").to_pylist()
    finally:
        store.close()
    assert [(r["window_start_ns"] - T) // WINDOW_NS for r in rows] == [0, 1, 2]
    assert all(r["links"] == 24 and r["uncovered"] == "" for r in rows)
    # Eq. 1, the builder and, with --bounce, standing bounced probes on the 8 core links: every link identifiable
    # (without them 16 of 24: tests/producers/test_pinglist_feed.py); the loop's bounces come and go beside them
    assert all((r["identifiable"], r["ambiguous_groups"], r["structural_groups"]) == (24, "", "") for r in rows)
    assert [r["loop_entries"] for r in rows] == [0, 16, 0]


@pytest.mark.kafka
def test_the_loop_command_stops_on_sigterm(pipeline_env):
    env, procs = pipeline_env
    p = procs.start("pinglist", "loop")
    log = procs.logdir / "pinglist-0.log"
    wait_for(lambda: "answering undetermined verdicts for" in log.read_text() or p.poll() is not None,
             what="the loop's start line")
    assert p.poll() is None, log.read_text()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=15) == 0, log.read_text()


class _SlowBroker:
    """The service's producer against a broker that takes a while: each of the first ``slow`` flushes
    returns with everything still queued (as the real producer does, which keeps sending until the broker
    takes the batches); ``produced`` counts the lists handed to it."""

    def __init__(self, slow: int) -> None:
        self.slow, self.produced, self.queued = slow, 0, 0

    def publish(self, topic: str, payload: bytes, schema_key: str, key: str | None = None) -> None:
        self.produced += 1
        self.queued += 1

    def flush(self, timeout: float = 30.0) -> int:
        if self.slow:
            self.slow -= 1
            return self.queued
        self.queued = 0
        return 0

    def close(self, timeout: float = 0.0) -> int:
        return self.queued


def test_lists_the_broker_has_not_taken_are_waited_for_never_published_twice() -> None:
    inv = SIZES[3][1](1)
    svc = LoopService(inv, "127.0.0.1:9", "slow.", seed=1, clock=lambda: T, bounce=True)
    svc._producer.close()
    svc._producer = slow = _SlowBroker(slow=1)
    try:
        assert not svc.publish_all(T)  # handed over, not yet taken: not in force, not counted
        hosts = slow.produced
        assert hosts == len(svc.hosts) and svc.published == 0
        assert svc.publish_all(T) and slow.produced == hosts and svc.published == hosts  # waited for
        svc.on_verdicts(pa.Table.from_pylist([_verdict(1, "undetermined", GROUP, T - WINDOW_NS)],
                                             schema=arrow_schema("verdict.v1")), T)
        slow.slow = 2
        assert svc.publish(T) == 0  # the loop's lists handed over; the broker is slow again
        changed = slow.produced - hosts
        assert changed > 0 and not svc._in_force
        assert svc.publish(T) == 0 and slow.produced == hosts + changed  # still queued: not sent again
        assert svc.publish(T) == 0 and slow.produced == hosts + changed  # taken: in force, nothing changed since
        assert svc.published == hosts + changed and sum(map(len, svc._in_force.values())) == 16
    finally:
        svc.close()
