"""The embedded store (real chdb): migrations, Arrow inserts, replay deduplication, the lock rule."""

from __future__ import annotations

import pytest

from schemas.arrow_pa import table_from_columns
from schemas.migrations import migrations, split_statements
from schemas.probe_rows.decompose import decompose
from sinks.clickhouse import ChdbStore, StoreError, migrate

from probe_rows import columns, known_rows


def test_migrations_are_numbered_and_idempotent(tmp_path):
    names = [m.name for m in migrations()]
    assert names[:4] == ["001_probes.sql", "002_verdicts.sql", "003_deadletters.sql", "004_host_links.sql"]
    store = ChdbStore(tmp_path / "ch")
    assert migrate(store) == names
    assert migrate(store) == []
    store.close()


def test_split_statements_drops_comments():
    assert split_statements("-- c\nCREATE TABLE a (x Int8) ENGINE=Memory;\nSELECT 1;\n") == [
        "CREATE TABLE a (x Int8) ENGINE=Memory",
        "SELECT 1",
    ]


def test_replayed_batch_with_the_same_token_is_written_once(tmp_path):
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    rows, _ = known_rows()
    enriched = decompose(table_from_columns("probe.v1", columns(rows)), "probes.raw/0/1")
    for _ in range(3):
        store.insert_arrow("probes", enriched, dedup_token="probes.raw/0/1")
    store.insert_arrow("probes", enriched, dedup_token="probes.raw/0/2")
    t = store.query_arrow("SELECT count() AS n, uniqExact(agent_id, seq) AS u, sum(network_rtt_ns) AS s FROM probes")
    assert t.to_pylist() == [{"n": 6, "u": 3, "s": 2 * 15_500}]
    store.close()


def test_second_process_on_the_same_store_gets_a_clear_error(tmp_path):
    import subprocess
    import sys

    store = ChdbStore(tmp_path / "ch")
    code = (
        "import sys; from sinks.clickhouse import ChdbStore, StoreError\n"
        "try:\n    ChdbStore(sys.argv[1])\nexcept StoreError as e:\n    print(e); sys.exit(3)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ch")], capture_output=True, text=True)
    store.close()
    assert r.returncode == 3, r.stderr
    assert "owns it" in r.stdout


def test_bad_token_is_refused(tmp_path):
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    rows, _ = known_rows()
    enriched = decompose(table_from_columns("probe.v1", columns(rows)), "x")
    with pytest.raises(StoreError, match="dedup token"):
        store.insert_arrow("probes", enriched, dedup_token="a'; DROP TABLE probes")
    store.close()
