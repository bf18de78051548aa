"""The migrations rendered for one node (run on chdb) and for a named cluster (every statement parsed by
chdb's own parser: ``formatQuery``), with the shape a sharded, replicated deployment needs."""

from __future__ import annotations

import re

import pytest

from schemas.cluster_ddl import EVERYWHERE, ClusterDDLError, ClusterRenderer, ddl_script, render_migrations
from schemas.migrations import LEDGER_DDL, migrations
from sinks.clickhouse import ChdbStore

CLUSTER = "fabric"


def _sql_string(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


@pytest.fixture(scope="module")
def chdb_store(tmp_path_factory: pytest.TempPathFactory):
    store = ChdbStore(tmp_path_factory.mktemp("ddl") / "clickhouse")
    yield store
    store.close()


def _creates(stmts: list[str]) -> dict[str, str]:
    """``{table: statement}`` of the CREATE TABLE statements."""
    out = {}
    for s in stmts:
        m = re.match(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", s)
        if m:
            out[m.group(1)] = s
    return out


def test_single_node_rendering_is_the_migrations_and_runs_on_chdb(chdb_store):
    single = render_migrations(None)
    assert single[0].statements == (LEDGER_DDL,)
    assert [(m.number, m.statements) for m in single[1:]] == [(m.number, m.statements) for m in migrations()]
    for m in single:
        for stmt in m.statements:
            chdb_store.command(stmt)
    tables = set(chdb_store.query_arrow("SELECT name FROM system.tables WHERE database = currentDatabase()")
                 ["name"].to_pylist())
    assert set(_creates([s for m in single for s in m.statements])) <= tables
    # the single-node tables do what the store writer relies on: a re-inserted batch is dropped
    for _ in range(2):
        chdb_store.command("INSERT INTO coverage (window_start_ns, window_end_ns, job_id, connections_expected, "
                           "connections_probed, links_total, links_covered, agents_silent, sufficient) "
                           "SETTINGS insert_deduplication_token = 'cov-1' "
                           "VALUES (1795000000000000000, 1795000020000000000, 'j', 1, 1, 1, 1, '', true)")
    assert chdb_store.query_arrow("SELECT count() AS n FROM coverage")["n"][0].as_py() == 1


def test_every_cluster_statement_parses_on_chdb(chdb_store):
    rendered = [s for m in render_migrations(CLUSTER) for s in m.statements]
    assert len(rendered) > sum(len(m.statements) for m in migrations())  # Distributed tables were added
    for stmt in rendered:
        formatted = chdb_store.query_arrow(f"SELECT formatQuery({_sql_string(stmt)}) AS q")["q"][0].as_py()
        # the parser read ON CLUSTER as the clause (not, say, an alias)
        assert f"ON CLUSTER {CLUSTER}" in formatted, formatted[:200]


def test_cluster_tables_are_replicated_of_the_same_family_with_distributed_fronts():
    single = _creates([s for m in render_migrations(None) for s in m.statements])
    stmts = [s for m in render_migrations(CLUSTER) for s in m.statements]
    cluster = _creates(stmts)
    for name, stmt in single.items():
        family = re.search(r"ENGINE = (\w*MergeTree)", stmt).group(1)
        if name in EVERYWHERE:
            local = cluster[name]
            path = "/clickhouse/tables/all/{database}/{table}"
            assert f"ENGINE = Replicated{family}('{path}', '{{replica}}'" in local
            continue
        local, front = cluster[f"{name}_local"], cluster[name]
        assert f"ENGINE = Replicated{family}('/clickhouse/tables/{{shard}}/{{database}}/{{table}}', '{{replica}}'" \
            in local, name
        assert "replicated_deduplication_window = " in local and "non_replicated" not in local
        assert re.search(rf"ENGINE = Distributed\('{CLUSTER}', currentDatabase\(\), '{name}_local', cityHash64\(",
                         front)
        assert f"AS {name}_local" in front
    # engine arguments survive: ReplacingMergeTree(updated_ns) keeps its version column
    assert cluster["rnic_inventory"].count("'{replica}', updated_ns)") == 1
    # every statement runs on the whole cluster
    assert all(f"ON CLUSTER {CLUSTER}" in s for s in stmts)
    # views read and write the shard-local tables (or a table copied to every node)
    for s in stmts:
        if s.startswith("CREATE MATERIALIZED VIEW"):
            target = re.search(r" TO (\w+) AS ", s).group(1)
            assert target.endswith("_local"), s[:120]
            for src in re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", s):
                assert src.endswith("_local") or src in EVERYWHERE, f"view reads {src}: {s[:120]}"


def test_hand_rendered_table_alter_and_drop():
    r = ClusterRenderer("c1")
    got = r.render("CREATE TABLE IF NOT EXISTS t (a Int8, b String CODEC(ZSTD)) ENGINE = ReplacingMergeTree(a) "
                   "ORDER BY (b, a) SETTINGS non_replicated_deduplication_window = 5")
    assert got == [
        "CREATE TABLE IF NOT EXISTS t_local ON CLUSTER c1 (a Int8, b String CODEC(ZSTD)) ENGINE = "
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}', a) "
        "ORDER BY (b, a) SETTINGS replicated_deduplication_window = 5",
        "CREATE TABLE IF NOT EXISTS t ON CLUSTER c1 AS t_local\n"
        "ENGINE = Distributed('c1', currentDatabase(), 't_local', cityHash64(b))",
    ]
    assert r.render("ALTER TABLE t ADD COLUMN c UInt8 CODEC(T64)") == [
        "ALTER TABLE t_local ON CLUSTER c1 ADD COLUMN c UInt8 CODEC(T64)",
        "ALTER TABLE t ON CLUSTER c1 ADD COLUMN c UInt8",
    ]
    assert r.render("ALTER TABLE t MODIFY TTL x + INTERVAL 1 DAY") == [
        "ALTER TABLE t_local ON CLUSTER c1 MODIFY TTL x + INTERVAL 1 DAY"]
    assert r.render("CREATE MATERIALIZED VIEW IF NOT EXISTS v TO t AS SELECT a, b FROM t AS s") == [
        "CREATE MATERIALIZED VIEW IF NOT EXISTS v ON CLUSTER c1 TO t_local AS SELECT a, b FROM t_local AS s"]
    assert r.render("DROP VIEW IF EXISTS v") == ["DROP VIEW IF EXISTS v ON CLUSTER c1"]
    assert r.render("DROP TABLE t") == ["DROP TABLE t ON CLUSTER c1", "DROP TABLE t_local ON CLUSTER c1 SYNC"]
    # a table without any SETTINGS gets the replicated window
    assert r.render("CREATE TABLE u (a Int8) ENGINE = MergeTree ORDER BY a")[0].endswith(
        "\nSETTINGS replicated_deduplication_window = 10000")


def test_what_cannot_render_says_so():
    with pytest.raises(ClusterDDLError, match="cannot render for a cluster"):
        ClusterRenderer("c1").render("INSERT INTO t VALUES (1)", "099_x.sql")
    with pytest.raises(ClusterDDLError, match="only \\*MergeTree engines"):
        ClusterRenderer("c1").render("CREATE TABLE m (a Int8) ENGINE = Memory", "099_x.sql")
    with pytest.raises(ClusterDDLError, match="cluster name"):
        ClusterRenderer("a cluster; DROP")


def test_store_ddl_cli_prints_both_variants():
    from typer.testing import CliRunner

    from fabricscope.cli import app, register_all

    register_all()
    single = CliRunner().invoke(app, ["store", "ddl"])
    assert single.exit_code == 0, single.output
    assert single.output == ddl_script(None)
    clustered = CliRunner().invoke(app, ["store", "ddl", "--cluster", CLUSTER])
    assert clustered.exit_code == 0, clustered.output
    assert clustered.output == ddl_script(CLUSTER)
    assert "ON CLUSTER" not in single.output and "Distributed(" in clustered.output
    # each migration is recorded, so a store writer started afterwards applies none
    for m in migrations():
        assert f"VALUES ({m.number}, '{m.name}', " in clustered.output

    bad = CliRunner().invoke(app, ["store", "ddl", "--cluster", "no way"])
    assert bad.exit_code == 2 and "cluster name" in bad.output


def test_a_store_built_from_the_script_needs_no_migration(chdb_store):
    from schemas.migrations import split_statements
    from sinks.clickhouse import migrate

    for stmt in split_statements(ddl_script(None)):  # idempotent: the store may hold the schema already
        chdb_store.command(stmt)
    assert migrate(chdb_store) == []
    recorded = chdb_store.query_arrow("SELECT DISTINCT number FROM schema_migrations ORDER BY number")
    assert recorded["number"].to_pylist() == [m.number for m in migrations()]
