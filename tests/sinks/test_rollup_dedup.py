"""Replays and rollups on the real embedded store (chdb): a replayed batch is counted once in every rollup.

The shipped tiers have no views since schemas/ddl/013 (the store writer inserts every tier under the
batch's token); the first test keeps ClickHouse's rule for views, should one be added again.

ClickHouse's rule: a materialized view's target table deduplicates a
replayed block only when the target has ``non_replicated_deduplication_window``
and the insert sets ``deduplicate_blocks_in_dependent_materialized_views = 1``
(:data:`sinks.clickhouse.INSERT_SETTINGS`). Measured on chdb 26.9: without the
target's setting, three inserts of one batch count 9 in the rollup.
"""

from __future__ import annotations

import pytest

from bench.probe_insert import insert_probes
from schemas.arrow_pa import table_from_columns
from schemas.probe_rows.decompose import decompose
from sinks.clickhouse import ChdbStore, migrate
from sinks.probe_tiers import TIER_TABLES

from probe_rows import columns, known_rows

ROLLUP_DDL = """
CREATE TABLE test_rollup (prober_rnic String, n UInt64) ENGINE = SummingMergeTree ORDER BY prober_rnic
SETTINGS non_replicated_deduplication_window = 1000
"""
ROLLUP_MV = "CREATE MATERIALIZED VIEW test_rollup_mv TO test_rollup AS " \
            "SELECT prober_rnic, count() AS n FROM probes GROUP BY prober_rnic"


@pytest.fixture
def store(tmp_path):
    s = ChdbStore(tmp_path / "ch")
    migrate(s)
    yield s
    s.close()


def _batch(batch_id: str):
    rows, _ = known_rows()
    return decompose(table_from_columns("probe.v1", columns(rows)), batch_id)


def test_a_replayed_batch_counts_once_in_a_materialized_view_rollup(store):
    store.command(ROLLUP_DDL)
    store.command(ROLLUP_MV)
    for _ in range(3):
        store.insert_arrow("probes", _batch("probes.raw/0/7"), dedup_token="probes.raw/0/7")
    store.insert_arrow("probes", _batch("probes.raw/0/8"), dedup_token="probes.raw/0/8")
    raw = store.query_arrow("SELECT count() AS n, uniqExact(agent_id, seq, batch_id) AS u FROM probes").to_pylist()
    rollup = store.query_arrow("SELECT sum(n) AS n FROM test_rollup").to_pylist()
    assert raw == [{"n": 6, "u": 6}]
    assert rollup == [{"n": 6}]


def test_every_tier_deduplicates_replays(store):
    """The tiers (minute, hour per RNIC pair, hour per ToR pair; filled by the writer since 013, no views): each
    table keeps a dedup window, and a replayed batch adds no row to any of them."""
    engines = store.query_arrow(
        "SELECT name, engine_full AS engine FROM system.tables WHERE database = currentDatabase() "
        f"AND name IN ({', '.join(repr(t) for t in TIER_TABLES)})").to_pylist()
    assert sorted(e["name"] for e in engines) == sorted(TIER_TABLES)
    for e in engines:
        assert "non_replicated_deduplication_window" in e["engine"], (
            f"tier {e['name']} lacks non_replicated_deduplication_window: replays would be counted twice")
    batch = _batch("probes.raw/0/1")
    sql = " UNION ALL ".join(f"SELECT '{t}' AS t, count() AS rows, sum(probes) AS probes FROM {t}"
                             for t in TIER_TABLES)
    insert_probes(store, batch, "probes.raw/0/1")
    before = sorted(store.query_arrow(sql).to_pylist(), key=lambda r: r["t"])
    for _ in range(2):
        insert_probes(store, batch, "probes.raw/0/1")
    after = sorted(store.query_arrow(sql).to_pylist(), key=lambda r: r["t"])
    assert [r["probes"] for r in before] == [batch.num_rows] * 3, before
    assert after == before
