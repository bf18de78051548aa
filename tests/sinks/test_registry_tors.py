"""ToR names for every source: the store writer fills ``rnic_inventory`` from the registry topic (each agent
registers its RNICs with their ToR), so the simulator's data rolls up under its ToRs (A, B, C of Panel 1)
with no inventory file, and the ToR heatmap names them. Real broker, real embedded store."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from schemas.arrow_pa import table_from_columns
from schemas.codec import encode
from schemas.headers import headers_for
from schemas.saved_queries import render_named
from sinks.clickhouse import ChdbStore, migrate
from sinks.history import registry_inventory
from sinks.kafka_sink import StoreWriter
from sinks.probe_tiers import tor_of_rnic

from probe_rows import columns, probe_row

sim = pytest.importorskip("producers.sim")
from producers.sim.fabrics import panel1  # noqa: E402

S = 1_000_000_000


def test_registry_rows_without_a_tor_name_nothing():
    reg = table_from_columns("registry.v1", {
        "agent_id": ["H1", "H1", "H2"], "upload_ns": [5, 5, 7], "host": ["H1", "H1", "H2"],
        "rnic": ["A1", "A2", "B1"], "tor": ["A", "", "B"], "ip": ["10.0.0.1", "10.0.0.2", "10.0.1.1"],
        "gid": ["g1", "g2", "g3"], "gid_index": [3, 3, 3], "qpn": [1000, 1001, 1002]})
    assert registry_inventory(reg).to_pylist() == [
        {"rnic": "A1", "host": "H1", "tor": "A", "updated_ns": 5},
        {"rnic": "B1", "host": "H2", "tor": "B", "updated_ns": 7}]


@pytest.mark.kafka
def test_the_writer_learns_the_sims_tors_from_the_registry(kafka_bootstrap, topic_prefix, tmp_path):
    inv = panel1()
    now = time.time_ns()
    s = sim.Simulator(inv, seed=1)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    # what `fabricscope source sim` publishes first (producers/sim_publish.py)
    p.produce(f"{topic_prefix}registry", encode(table_from_columns("registry.v1", s.registry_columns(now))),
              key=b"controller", headers=headers_for("registry.v1"))
    minute = now // S // 60 * 60 - 120  # two minutes ago: inside the heatmap's range
    pairs = [("A1", "B1", 100, 7), ("B1", "A1", 50, 0), ("A1", "A2", 10, 0)]  # prober, responder, probes, timeouts
    for prober, responder, n, timeouts in pairs:
        host = inv.rnics[prober].host
        rows = []
        for i in range(n):
            t1 = minute * S + i * 1_000_000
            row = probe_row(i, t1=t1, t2=1_000, t3=100, t4=300, t5=6_000, t6=t1 + 9_000, agent=host, src=prober,
                            dst=responder)
            row["pinglist"] = "tor_mesh" if inv.rnics[prober].tor == inv.rnics[responder].tor else "inter_tor"
            row["responder_host"] = inv.rnics[responder].host
            if i < timeouts:
                row.update(status="timeout", t2=None, t3=None, t4=None, t5=None, t6=None)
            rows.append(row)
        p.produce(f"{topic_prefix}probes.raw", encode(table_from_columns("probe.v1", columns(rows))),
                  key=host.encode(), headers=headers_for("probe.v1"))
    assert p.flush(30) == 0
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    w = StoreWriter(store, kafka_bootstrap, topic_prefix)
    try:
        deadline = time.monotonic() + 60
        while w.stats.rows_by_table.get("rnic_inventory", 0) < len(inv.rnics) or w.held_rows() < 160:
            assert time.monotonic() < deadline, w.stats
            w.poll_once(timeout=0.5)
        w.poll_once(timeout=0.5, force=True)  # the block: its hourly tiers take the ToRs just learnt
        assert tor_of_rnic(store) == {r.id: r.tor for r in inv.rnics.values()}
        # the heatmap reads the hourly tier (hour >= now - since): 2 h holds the hour of a row 2 min old
        # whatever the minute the test runs at (1 h left it out in an hour's first 2 minutes)
        heat = store.query_arrow(render_named("loss_heatmap", {"since": "2h"})).to_pylist()
    finally:
        w.close()
        store.close()
    assert [(r["prober_tor"], r["responder_tor"], r["probes"], r["timeouts"]) for r in heat] == [
        ("A", "A", 10, 0), ("A", "B", 100, 7), ("B", "A", 50, 0)]
    assert [r["loss"] for r in heat] == [0.0, 0.07, 0.0]
