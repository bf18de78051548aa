"""Hostping end to end on the real broker: `fabricscope source hostping-sim` -> Faust worker -> sink -> chdb.

Two sim hosts (Figure 2 topology): one with RNIC2's PCIe link capped at 67 Gb/s (Hostping
Figure 8a), one whose memory channel cpu0->mem0 degrades a different RNIC's path each round
(Figure 9). Three rounds, 30 s of event time apart. No mock: the worker, the sink and the
source are `fabricscope` processes on a real Kafka broker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from producers.hostping.sim_source import loopback_upload, sim_host
from producers.kafka_producer import AgentProducer
from schemas.verdicts import WINDOW_NS
from sinks.query_endpoint import find_endpoint, query_remote

from conftest import wait_for

pytestmark = pytest.mark.kafka

# Recent (the store's TTL drops rows older than 2 years at insert) and a multiple of the 20 s window.
START_NS = time.time_ns() // WINDOW_NS * WINDOW_NS - 300_000_000_000
ROUND_NS = 30_000_000_000
RNIC_HOST, FLAP_HOST, UPI_HOST = "sim-rnic_pcie_link_failure", "sim-memory_channel_flapping", "sim-upi_overload"


def _query(store, sql: str):  # noqa: ANN001
    url = find_endpoint(store)
    return query_remote(url, sql) if url else None


def _rows(store, sql: str, n: int, what: str) -> list[dict]:  # noqa: ANN001
    return wait_for(lambda: (t := _query(store, sql)) is not None and t.num_rows >= n and t.to_pylist(),
                    timeout=180, what=what)


def test_sim_hosts_give_abnormal_and_flapping_links_and_named_verdicts(pipeline_env, tmp_path):
    env, procs = pipeline_env
    src = subprocess.run(
        [sys.executable, "-m", "fabricscope", "source", "hostping-sim", "--pattern", "rnic_pcie_link_failure",
         "--pattern", "memory_channel_flapping", "--pattern", "upi_overload",
         "--rounds", "3", "--round-interval", "30", "--no-realtime",
         "--start-ns", str(START_NS)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert src.returncode == 0, src.stderr
    assert "21 messages (3 rounds)" in src.stderr  # 3 topologies + 3 rounds x 3 hosts x (bus reading, loopback)
    # a loopback batch from a host that never published its topology goes to the dead letters
    ghost = loopback_upload(sim_host("healthy", "ghost"), "healthy", "agent-ghost", 0, START_NS)
    producer = AgentProducer(env["KAFKA_BOOTSTRAP"])
    producer.publish(f"{env['FABRICSCOPE_TOPIC_PREFIX']}loopback.raw", ghost.payload, ghost.schema, key="ghost")
    assert producer.flush() == 0

    procs.start("sink")
    procs.start("worker")
    store = tmp_path / "var" / "clickhouse"

    links = wait_for(lambda: (t := _query(store, "SELECT host, link, state, cause, round_ns, evidence "
                                                 "FROM host_links ORDER BY host, link, round_ns")) is not None
                     and all(len({r["round_ns"] for r in t.to_pylist() if r["host"] == h}) == 3
                             for h in (RNIC_HOST, FLAP_HOST, UPI_HOST)) and t.to_pylist(),
                     timeout=180, what="3 rounds of every sim host")  # includes the start of worker and sink
    state = {(r["host"], r["link"], (r["round_ns"] - START_NS) // ROUND_NS): r for r in links}

    # RNIC PCIe link failure: every path of rnic2 is abnormal in every round; nothing else is
    for k in range(3):
        r = state[(RNIC_HOST, "sw2->rnic2", k)]
        assert (r["state"], r["cause"]) == ("abnormal", "failure")
        assert json.loads(r["evidence"]) == {"abnormal_cnt": k + 1, "gray_streak": 0, "link_type": "rnic_pcie",
                                             "pattern": "rnic_pcie_link_failure"}
    assert {(ln, s["state"]) for (h, ln, _), s in state.items() if h == RNIC_HOST and s["state"] != "normal"} == {
        ("sw2->rnic2", "abnormal")}
    # 4 RNICs x (8 GPUs + 2 memory nodes) paths cross 4 rnic + 8 gpu + 4 root-port + 2 memory + 1 UPI links
    assert sum(1 for (h, _, k) in state if h == RNIC_HOST and k == 0) == 19

    # memory channel flapping: gray, gray, then flapping after the third consecutive gray
    assert [state[(FLAP_HOST, "cpu0->mem0", k)]["state"] for k in range(3)] == ["gray", "gray", "flapping"]
    assert state[(FLAP_HOST, "cpu0->mem0", 2)]["cause"] == "failure"
    assert json.loads(state[(FLAP_HOST, "cpu0->mem0", 2)]["evidence"])["gray_streak"] == 3

    verdicts = _rows(store, "SELECT verdict_id, window_start_ns, kind, location, impact, confidence, "
                            "total_probes, failed_probes, evidence FROM verdicts FINAL ORDER BY window_start_ns, kind",
                     7, "7 Hostping verdicts")
    got = [(v["kind"], v["location"], v["window_start_ns"] - START_NS) for v in verdicts]
    assert got == [
        ("rnic_pcie_link_failure", f"{RNIC_HOST}:sw2->rnic2", 0),
        ("upi_overload", f"{UPI_HOST}:cpu0->cpu1", 0),
        ("rnic_pcie_link_failure", f"{RNIC_HOST}:sw2->rnic2", 20_000_000_000),  # round at +30 s
        ("upi_overload", f"{UPI_HOST}:cpu0->cpu1", 20_000_000_000),
        ("memory_channel_flapping", f"{FLAP_HOST}:cpu0->mem0", 60_000_000_000),
        ("rnic_pcie_link_failure", f"{RNIC_HOST}:sw2->rnic2", 60_000_000_000),
        ("upi_overload", f"{UPI_HOST}:cpu0->cpu1", 60_000_000_000),
    ]
    assert len({v["verdict_id"] for v in verdicts}) == 7
    assert {v["impact"] for v in verdicts} == {"P2"}
    # idle rounds test 4 RNICs x 10 endpoints; busy (overload) rounds 4 x (2 GPUs + 2 memory nodes)
    assert {(v["kind"], v["total_probes"], v["failed_probes"], v["confidence"]) for v in verdicts} == {
        ("rnic_pcie_link_failure", 40, 0, 1.0), ("memory_channel_flapping", 40, 0, 1.0),
        ("upi_overload", 16, 0, 1.0)}
    ev = json.loads(verdicts[0]["evidence"])
    assert (ev["host"], ev["cause"], ev["where"], ev["link_type"], ev["round_ns"]) == (
        RNIC_HOST, "failure", "sw2->rnic2", "rnic_pcie", START_NS)

    # the bus monitor's reading reached the worker (hostmetrics.raw mirror): congestion, not failure
    for k in range(3):
        r = state[(UPI_HOST, "cpu0->cpu1", k)]
        assert (r["state"], r["cause"]) == ("abnormal", "congestion")
    upi = json.loads(next(v["evidence"] for v in verdicts if v["kind"] == "upi_overload"))
    assert (upi["utilisation"], upi["cause"]) == (0.95, "congestion")

    # the raw rounds and bus readings are stored too: 3 idle rounds x 40 paths for two hosts, 3 busy rounds
    # x 16 for the UPI host, and the ghost's 40; one bus_util row per link, host and round (v1: no source)
    n_links = sum(len(sim_host(p, "h").bus_util()) for p in ("rnic_pcie_link_failure", "memory_channel_flapping",
                                                             "upi_overload"))
    wait_for(lambda: (_query(store, "SELECT count() AS n FROM loopback") or {"n": [0]})["n"][0].as_py() == 328,
             timeout=60, what="328 loopback rows")
    bus = wait_for(lambda: (t := _query(store, "SELECT count() AS n, any(source) AS s FROM host_metrics "
                                               "WHERE metric = 'bus_util'")) is not None
                   and t.to_pylist()[0]["n"] == 3 * n_links and t.to_pylist(), timeout=60, what="every bus reading")
    assert bus[0]["s"] == ""

    dead = _rows(store, "SELECT source_topic, reason FROM deadletters", 1, "the ghost host's dead letter")
    assert dead[0]["source_topic"].endswith("loopback.raw")
    assert "no host_topology.v1 record" in dead[0]["reason"] and "'ghost'" in dead[0]["reason"]
