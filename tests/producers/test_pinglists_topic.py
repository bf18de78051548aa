"""The controller's pinglists on their compacted topic: one pinglist.v1 batch per agent, readable by
the workers' codec, with the job's traffic class on every entry (R-Pingmesh §3.2)."""

from __future__ import annotations

import pytest

from producers.controller import Registry, build_pinglists, pinglist_for_host
from producers.controller_publish import pinglist_columns, publish_pinglists
from producers.kafka_producer import AgentProducer
from producers.sim.fabrics import panel1
from schemas.arrow_pa import table_from_columns
from schemas.codec import decode

from conftest import read_topic


def _lists():
    inv = panel1()
    reg = Registry.from_inventory(inv)
    lists = build_pinglists(inv, reg, seed=1, now_ns=0)
    return inv, {h: pinglist_for_host(lists, h) for h in inv.hosts}


def test_columns_build_the_schema_for_every_entry():
    _, by_host = _lists()
    t = table_from_columns("pinglist.v1", pinglist_columns("H1", by_host["H1"], 5))
    assert t.num_rows == len(by_host["H1"]) > 0
    assert set(t["prober_host"].to_pylist()) == {"H1"}
    assert set(t["pinglist"].to_pylist()) <= {"tor_mesh", "inter_tor", "service"}
    assert t["agent_id"].unique().to_pylist() == ["H1"]


@pytest.mark.kafka
def test_every_agent_reads_its_list_back_from_the_compacted_topic(kafka_bootstrap, topic_prefix):
    inv, by_host = _lists()
    p = AgentProducer(kafka_bootstrap)
    sent = publish_pinglists(p, topic_prefix, by_host, now_ns=42)
    assert p.flush() == 0
    got = {m.key().decode(): decode(m.value(), "pinglist.v1")[1]
           for m in read_topic(kafka_bootstrap, f"{topic_prefix}pinglists")}
    assert sorted(got) == sorted(inv.hosts)
    assert sum(t.num_rows for t in got.values()) == sent
    for host, t in got.items():
        assert t["responder_rnic"].to_pylist() == [e["responder_rnic"] for e in by_host[host]]
        assert t["traffic_class"].to_pylist() == [e["traffic_class"] for e in by_host[host]]
