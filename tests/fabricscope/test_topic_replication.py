"""Topic replication that fits the cluster, producer delivery settings, and `fabricscope topics --describe`
(existing against expected) on the real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from fabricscope.kafka_admin import create_topics, describe_topics, min_insync_for, plan_topics, replication_for
from fabricscope.settings import ConfigError, Settings, read_settings
from schemas.topics import ALL_TOPICS, PROBES_RAW, VERDICTS

from conftest import wait_for


@pytest.mark.parametrize(("brokers", "rf", "isr"), [(1, 1, 1), (2, 2, 1), (3, 3, 2), (5, 3, 2), (12, 3, 2)])
def test_replication_defaults_to_min_3_brokers_and_min_isr_one_less(brokers, rf, isr):
    assert replication_for(brokers) == rf
    assert min_insync_for(rf) == isr


def test_configured_replication_must_fit_the_cluster():
    assert replication_for(5, 5) == 5 and min_insync_for(5, 3) == 3
    with pytest.raises(ValueError, match="KAFKA_REPLICATION_FACTOR=3 but the cluster has 1 broker"):
        replication_for(1, 3)
    with pytest.raises(ValueError, match="KAFKA_MIN_INSYNC_REPLICAS=3 must be from 1 to the replication \\(2\\)"):
        min_insync_for(2, 3)
    with pytest.raises(ValueError, match="no broker"):
        replication_for(0)


def test_plan_gives_every_topic_its_partitions_replicas_isr_and_retention():
    plans = {p.name: p for p in plan_topics("x.", brokers=3)}
    assert set(plans) == {f"x.{t.name}" for t in ALL_TOPICS}
    raw, verdicts = plans["x.probes.raw"], plans["x.verdicts"]
    assert (raw.partitions, raw.replication, raw.config["min.insync.replicas"]) == (PROBES_RAW.partitions, 3, "2")
    assert raw.config["retention.ms"] == str(7 * 86_400_000)
    assert verdicts.config["retention.ms"] == VERDICTS.config["retention.ms"] == str(30 * 86_400_000)
    assert plans["x.registry"].config["cleanup.policy"] == "compact"


def test_producer_settings_default_to_acks_all_with_idempotence(monkeypatch):
    for k in ("KAFKA_ACKS", "KAFKA_IDEMPOTENCE", "KAFKA_REPLICATION_FACTOR"):
        monkeypatch.delenv(k, raising=False)
    s = Settings()
    assert s.kafka_producer_config() == {"acks": "all", "enable.idempotence": "true"}
    assert s.kafka_replication_factor is None and s.kafka_min_insync_replicas is None
    monkeypatch.setenv("KAFKA_ACKS", "1")
    with pytest.raises(ConfigError, match="KAFKA_IDEMPOTENCE=true needs KAFKA_ACKS=all"):
        read_settings()
    monkeypatch.setenv("KAFKA_IDEMPOTENCE", "false")
    assert read_settings().kafka_producer_config() == {"acks": "1", "enable.idempotence": "false"}
    monkeypatch.setenv("KAFKA_REPLICATION_FACTOR", "0")
    with pytest.raises(ConfigError, match="KAFKA_REPLICATION_FACTOR='0': Input should be greater than or equal to 1"):
        read_settings()


def test_faust_app_producers_are_idempotent_with_acks_all(tmp_path):
    from streams.runtime.app import build_app
    from streams.runtime.config import RuntimeConfig

    # what `fabricscope worker` hands in on a 3-broker cluster
    app = build_app(RuntimeConfig(replication=3, var_dir=str(tmp_path))).app

    assert app.conf.producer_acks == -1 and app.conf.topic_replication_factor == 3
    assert app.conf.stream_buffer_maxsize == 256  # four 64-message steps, not Faust's 4,096
    extra = app.producer._settings_extra()
    assert extra["acks"] == "all" and extra["enable_idempotence"] is True


@pytest.mark.kafka
def test_describe_shows_existing_against_expected(kafka_bootstrap, topic_prefix):
    # CreateTopics returns before every broker's metadata lists the new topics: wait until they show.
    def described():
        d = describe_topics(kafka_bootstrap, topic_prefix)
        return d if all(s.partitions is not None for s in d[1]) else None

    brokers, states = wait_for(described, timeout=90, what="the test's topics in the metadata")
    assert brokers >= 1
    rf = replication_for(brokers)
    by = {s.topic: s for s in states}
    raw = by[f"{topic_prefix}probes.raw"]
    assert (raw.partitions, raw.replication, raw.min_insync, raw.retention_ms) == \
        (4, rf, max(1, rf - 1), str(7 * 86_400_000))
    assert all(not s.differences for s in states), [(s.topic, s.differences) for s in states if s.differences]
    assert sum(raw.leaders.values()) == 4

    # a topic made by hand with other partitions and retention; and one missing
    other = "d" + topic_prefix
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(f"{other}probes.raw", 2, 1, config={"retention.ms": "3600000"})])[
        f"{other}probes.raw"].result()
    wait_for(lambda: f"{other}probes.raw" in admin.list_topics(timeout=10).topics, timeout=90,
             what="the hand-made topic in the metadata")
    try:
        _, states = describe_topics(kafka_bootstrap, other)
        raw = next(s for s in states if s.topic == f"{other}probes.raw")
        assert f"partitions 2 (want {PROBES_RAW.partitions})" in raw.differences
        assert f"retention.ms 3600000 (want {7 * 86_400_000})" in raw.differences
        assert next(s for s in states if s.topic == f"{other}verdicts").differences == ["missing"]

        env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap, "FABRICSCOPE_TOPIC_PREFIX": other}
        r = subprocess.run([sys.executable, "-m", "fabricscope", "topics", "--describe", "--json"], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, r.stderr
        doc = json.loads(r.stdout)
        got = {t["topic"]: t for t in doc["topics"]}
        assert doc["brokers"] == brokers and got[f"{other}probes.raw"]["partitions"] == 2
        assert not got[f"{other}probes.raw"]["ok"] and got[f"{other}verdicts"]["differences"] == ["missing"]
        # creating leaves the odd topic as it is and adds the missing ones
        assert create_topics(kafka_bootstrap, other)[f"{other}probes.raw"] == "exists"
        r = subprocess.run([sys.executable, "-m", "fabricscope", "topics", "--describe"],
                           env={**env, "COLUMNS": "300"}, capture_output=True, text=True, timeout=120)
        row = next(line for line in r.stdout.splitlines() if f"{other}probes.raw" in line)
        assert r.returncode == 1 and "2 (want 4)" in row and "partitions 2 (want 4)" in row, r.stdout
    finally:
        admin.delete_topics([f"{other}{t.name}" for t in ALL_TOPICS])
