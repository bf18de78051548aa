"""Replays and rollups on the real embedded store (chdb): a replayed batch is counted once in every rollup.

ClickHouse's rule: a materialized view's target table deduplicates a
replayed block only when the target has ``non_replicated_deduplication_window``
and the insert sets ``deduplicate_blocks_in_dependent_materialized_views = 1``
(:data:`sinks.clickhouse.INSERT_SETTINGS`). Measured on chdb 26.9: without the
target's setting, three inserts of one batch count 9 in the rollup.
"""

from __future__ import annotations

import re

import pytest

from schemas.arrow_pa import table_from_columns
from sinks.clickhouse import ChdbStore, migrate
from sinks.probe_tiers import insert_probes
from streams.pingmesh.rtt import decompose

from probe_rows import columns, known_rows

TO_TARGET = re.compile(r"\bTO\s+(?:`?\w+`?\.)?`?(\w+)`?")
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


def test_every_shipped_rollup_deduplicates_replays(store):
    """The rollups of ``schemas/ddl`` (the hourly views over the minute tier since 011): each target table keeps
    a dedup window, and a replay adds no row to it."""
    views = store.query_arrow(
        "SELECT name, create_table_query FROM system.tables WHERE database = currentDatabase() "
        "AND engine = 'MaterializedView'"
    ).to_pylist()
    if not views:
        pytest.skip("no rollups in schemas/ddl yet (materialized views are added by a later migration)")
    names = sorted({m.group(1) for v in views if (m := TO_TARGET.search(v["create_table_query"]))})
    in_list = ", ".join(repr(n) for n in names) or "''"
    targets = store.query_arrow(
        "SELECT name, engine_full AS engine FROM system.tables WHERE database = currentDatabase() "
        f"AND name IN ({in_list})"
    ).to_pylist()
    target_tables = [t for t in targets if t["engine"] and "MergeTree" in t["engine"]]
    assert target_tables, f"materialized views {[v['name'] for v in views]} write to no MergeTree table"
    for t in target_tables:
        assert "non_replicated_deduplication_window" in t["engine"], (
            f"rollup table {t['name']} lacks non_replicated_deduplication_window: replays would be counted twice"
        )
    insert_probes(store, _batch("probes.raw/0/1"), "probes.raw/0/1")  # minute tier, then the hourly views
    before = {t["name"]: store.query_arrow(f"SELECT count() AS n FROM {t['name']}")["n"][0].as_py()
              for t in target_tables}
    for _ in range(2):
        insert_probes(store, _batch("probes.raw/0/1"), "probes.raw/0/1")
    after = {t["name"]: store.query_arrow(f"SELECT count() AS n FROM {t['name']}")["n"][0].as_py()
             for t in target_tables}
    assert all(before.values()), before  # the views did fire
    assert after == before
