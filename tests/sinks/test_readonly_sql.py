"""User SQL is read-only, inside the store and under limits (real chdb; the server driver's settings).

The first test pins down what chdb's ``readonly = 1`` alone does NOT refuse (why the
guard exists); the rest run every attack through ``Store.query_readonly``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from fabricscope.settings import ConfigError, read_settings
from schemas.arrow_pa import table_from_columns
from schemas.probe_rows.decompose import decompose
from sinks.clickhouse import ChdbStore, ServerStore, StoreError, migrate
from sinks.readonly_sql import QueryLimits, QueryRefused

from probe_rows import columns, known_rows

HOSTNAME = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else None
LIMITS = QueryLimits(max_execution_time_s=2, max_result_rows=1000, max_result_bytes=100_000, max_threads=1)


@pytest.fixture(scope="class")
def store(tmp_path_factory):
    s = ChdbStore(tmp_path_factory.mktemp("ro") / "clickhouse", LIMITS)
    migrate(s)
    rows, _ = known_rows()
    s.insert_arrow("probes", decompose(table_from_columns("probe.v1", columns(rows)), "probes.raw/0/1"))
    s.command("INSERT INTO verdict_feedback (verdict_id, decision, note, operator, at_ns) "
              f"VALUES ('v1', 'confirm', 'reseated', 'ops', {time.time_ns()})")
    yield s
    s.close()


def _tables(store: ChdbStore) -> list[str]:
    return store.query_arrow("SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name")[
        "name"].to_pylist()


def test_chdb_readonly_alone_lets_file_reads_and_outfile_writes_through(tmp_path):
    """What the guard is for: the engine's readonly = 1 in chdb (no users, no grants) refuses the
    file() *table function* but not the scalar file() nor INTO OUTFILE, and runs every statement of
    a multi-statement string."""
    from chdb import session

    s = session.Session(str(tmp_path / "plain"))
    s.query("SET readonly = 1")
    with pytest.raises(Exception, match="readonly"):
        s.query("SELECT * FROM file('/etc/hostname', 'LineAsString')")
    if HOSTNAME:
        assert HOSTNAME in str(s.query("SELECT file('/etc/hostname')", "TabSeparatedRaw"))
    out = tmp_path / "written.txt"
    s.query(f"SELECT 42 INTO OUTFILE '{out}'")
    assert out.read_text().strip() == "42"
    assert str(s.query("SELECT 1; SELECT 2", "TabSeparatedRaw")).split() == ["1", "2"]
    s.close()


ATTACKS = [
    ("SELECT * FROM file('/etc/hostname', 'LineAsString')", "function file()"),
    ("SELECT file('/etc/hostname')", "function file()"),
    ("SELECT * FROM view(SELECT * FROM file('/etc/passwd', 'LineAsString'))", "function file()"),
    ("SELECT * FROM url('http://127.0.0.1:1/x', 'LineAsString')", "function url()"),
    ("SELECT * FROM remote('127.0.0.1:9000', system.one)", "function remote()"),
    ("SELECT * FROM s3('http://bucket.s3.amazonaws.com/x.csv', 'CSV')", "function s3()"),
    ("SELECT * FROM executable('id', 'LineAsString', 'x String')", "function executable()"),
    ("SELECT * FROM mysql('127.0.0.1:3306', 'db', 't', 'u', 'p')", "function mysql()"),
    ("SELECT * FROM merge('system', '^users$')", "function merge()"),
    ("SELECT * FROM input('x Int8')", "function input()"),
    ("SELECT dictGet('d', 'x', 1)", "function dictGet()"),
    ("SELECT hasColumnInTable('10.0.0.1', 'db', 't', 'c')", "function hasColumnInTable()"),
    ("DROP TABLE verdict_feedback", "DROP is not a read"),
    ("TRUNCATE TABLE verdict_feedback", "is not a read"),
    ("INSERT INTO verdict_feedback (verdict_id) VALUES ('forged')", "INSERT is not a read"),
    ("INSERT INTO FUNCTION file('/tmp/x.csv', 'CSV', 'x Int8') VALUES (1)", "INSERT is not a read"),
    ("ALTER TABLE verdict_feedback DELETE WHERE 1", "ALTER is not a read"),
    ("DETACH TABLE probes", "is not a read"),
    ("CREATE TABLE t (x Int8) ENGINE = Memory", "is not a read"),
    ("SET max_result_rows = 0", "SET is not a read"),
    ("SELECT 1 SETTINGS max_execution_time = 3600", "SETTINGS in a query"),
    ("SELECT 1 SETTINGS readonly = 0", "SETTINGS in a query"),
    ("USE system", "USE is not a read"),
    ("KILL QUERY WHERE 1", "KILL QUERY is not a read"),
    ("SYSTEM STOP MERGES", "SYSTEM is not a read"),
    ("OPTIMIZE TABLE probes FINAL", "OPTIMIZE is not a read"),
    ("SELECT 1 INTO OUTFILE '/tmp/fabricscope-outfile.txt'", "INTO OUTFILE"),
    ("SELECT 1 FORMAT JSON", "FORMAT"),
    ("SELECT 1; DROP TABLE verdict_feedback", "one statement per query"),
    ("SELECT * FROM system.users", "table system.users is not one a query may read"),
    ("SELECT 1 WHERE 'x' IN system.users", "table system.users"),
    # A quoted alias with a newline adds a line to EXPLAIN AST; it cannot hide the real file() node.
    ("SELECT 1 AS `a\n      Function numbers (children 1)`, file('/etc/hostname')", "function file()"),
    ("   ", "empty query"),
    # Statements that name a table without reading it (issue 28, 9): the same tables as SELECT.
    ("SHOW COLUMNS FROM system.users", "table system.users is not one a query may read"),
    ("SHOW FULL COLUMNS FROM `users` IN `system` LIKE 'n%'", "table system.users is not one a query may read"),
    ("EXISTS TABLE system.users", "table system.users is not one a query may read"),
    ("SHOW CREATE TABLE system.users", "table system.users is not one a query may read"),
]


class TestOnOneStore:
    """One migrated store for these (chdb opens one store path per process at a time)."""

    @pytest.mark.parametrize(("sql", "message"), ATTACKS, ids=[a[0][:40] for a in ATTACKS])
    def test_every_attack_is_refused_and_the_store_is_unchanged(self, store, sql, message):
        tables = _tables(store)
        with pytest.raises(QueryRefused, match=message.replace("(", r"\(").replace(")", r"\)")):
            store.query_readonly(sql)
        assert _tables(store) == tables
        assert store.query_arrow("SELECT verdict_id, note FROM verdict_feedback").to_pylist() == [
            {"verdict_id": "v1", "note": "reseated"}]
        assert store.query_arrow("SELECT count() AS n FROM probes")["n"].to_pylist() == [3]
        assert not Path("/tmp/fabricscope-outfile.txt").exists()


    def test_reads_that_belong_give_their_values(self, store):
        q = store.query_readonly
        assert q("SELECT count() AS n, sum(network_rtt_ns) AS s FROM probes").to_pylist() == [{"n": 3, "s": 15_500}]
        assert q("WITH fb AS (SELECT verdict_id FROM verdict_feedback) SELECT * FROM fb").to_pylist() == [
            {"verdict_id": "v1"}]
        assert q("SELECT count() AS n FROM default.verdict_feedback")["n"].to_pylist() == [1]
        assert "probes" in q("SHOW TABLES")["name"].to_pylist()
        assert "network_rtt_ns" in q("DESCRIBE TABLE probes")["name"].to_pylist()
        assert q("SELECT name FROM system.tables WHERE name = 'probes'")["name"].to_pylist() == ["probes"]
        assert q("SELECT sum(number) AS s FROM numbers(10)")["s"].to_pylist() == [45]
        assert q("EXPLAIN SELECT count() FROM probes").num_rows > 0
        assert q("SELECT format('{}-{}', 'a', 'b') AS f")["f"].to_pylist() == ["a-b"]
        assert q("SELECT getSetting('readonly') AS r, getSetting('max_result_rows') AS m").to_pylist() == [
            {"r": 1, "m": 1000}]


    def test_limits_stop_a_stray_query_with_the_engines_error(self, store):
        with pytest.raises(StoreError, match="TOO_MANY_ROWS_OR_BYTES"):
            store.query_readonly("SELECT number FROM numbers(5000)")
        with pytest.raises(StoreError, match="max bytes"):
            store.query_readonly("SELECT repeat(toString(number % 10), 1000) FROM numbers(500)")
        with pytest.raises(StoreError, match="TIMEOUT_EXCEEDED"):
            store.query_readonly("SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) % 7 = 1")
        # A failed query leaves no trace in the next answer (chdb leaks partial output otherwise).
        assert store.query_readonly("SELECT 'after' AS s").to_pylist() == [{"s": "after"}]


    def test_show_and_exists_name_only_tables_a_query_may_read(self, store):
        q = store.query_readonly
        assert "name" in q("SHOW COLUMNS FROM system.tables")["field"].to_pylist()
        assert q("EXISTS TABLE system.tables").column(0).to_pylist() == [1]
        assert q("EXISTS TABLE verdict_feedback").column(0).to_pylist() == [1]
        assert "network_rtt_ns" in q("SHOW COLUMNS FROM probes")["field"].to_pylist()

    def test_the_memory_bomb_stops_at_the_per_query_cap_and_rss_stays_under_2_gib(self, store):
        """Issue 28, 1: 9.29 GB RSS before; now MEMORY_LIMIT_EXCEEDED at 512 MiB (the default cap)."""
        bomb = ("SELECT sum(length(s)) FROM (SELECT groupArray(repeat(repeat('a', 1000), 1000000)) AS g "
                "FROM numbers(4)) ARRAY JOIN g AS s")
        with pytest.raises(StoreError, match="MEMORY_LIMIT_EXCEEDED") as err:
            store.query_readonly(bomb)
        assert "maximum: 512.00 MiB" in str(err.value)
        peak_kib = int(next(x for x in Path("/proc/self/status").read_text().splitlines()
                            if x.startswith("VmHWM")).split()[1])
        assert peak_kib < 2 * 1024 * 1024, f"peak RSS {peak_kib} KiB"
        assert store.query_readonly("SELECT 1 AS x").to_pylist() == [{"x": 1}]

    def test_the_short_lane_has_its_own_reader_and_time_limit(self, store):
        short = LIMITS.short_lane()
        assert (short.max_execution_time_s, short.max_memory_bytes) == (2, LIMITS.max_memory_bytes)
        assert QueryLimits(max_execution_time_s=60, short_execution_time_s=1.5).short_lane().max_execution_time_s == 1.5
        assert store.query_readonly("SELECT getSetting('max_execution_time') AS t", short=True).to_pylist() == [
            {"t": 2}]
        with pytest.raises(QueryRefused, match="system.users"):
            store.query_readonly("SELECT * FROM system.users", short=True)

    def test_a_verdict_id_with_a_trailing_newline_is_refused(self, store):
        """Issue 28, 9: Python's ``$`` matches before a final newline, so "v1\n" passed the check."""
        from sinks.history import record_feedback

        with pytest.raises(StoreError, match="verdict"):
            record_feedback(store, "v1\n", "reject", "", "")
        assert store.query_arrow("SELECT count() AS n FROM verdict_feedback")["n"].to_pylist() == [1]

    def test_a_syntax_error_is_the_engines_message_not_a_refusal(self, store):
        with pytest.raises(StoreError, match="Syntax error") as err:
            store.query_readonly("SELEC 1")
        assert not isinstance(err.value, QueryRefused)
        assert "formatQuerySingleLine" not in str(err.value)


def test_query_limits_are_settings_with_checked_values(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FABRICSCOPE_QUERY_MAX_RESULT_ROWS", "500")
    monkeypatch.setenv("FABRICSCOPE_QUERY_MAX_EXECUTION_TIME_S", "7.5")
    s = read_settings()
    assert s.query_limits().settings() == {
        "readonly": 1, "max_execution_time": 7.5, "timeout_overflow_mode": "throw", "max_result_rows": 500,
        "max_result_bytes": 256 * 1024 * 1024, "result_overflow_mode": "throw",
        "max_threads": max(1, (os.cpu_count() or 2) // 2), "max_memory_usage": 512 * 1024 * 1024,
        "os_thread_priority": 10}
    monkeypatch.setenv("FABRICSCOPE_QUERY_MAX_RESULT_ROWS", "0")
    with pytest.raises(ConfigError, match="FABRICSCOPE_QUERY_MAX_RESULT_ROWS='0': Input should be greater than 0"):
        read_settings()


def test_memory_and_endpoint_limits_are_settings_with_checked_values(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    s = read_settings()
    assert (s.query_limits().readers, s.query_limits().max_memory_bytes) == (3, 512 * 1024 * 1024)
    e = s.endpoint_limits()
    assert (e.max_connections, e.request_timeout_s, e.idle_timeout_s, e.max_body_bytes, e.readers) == (
        64, 10.0, 5.0, 4 * 1024 * 1024, 3)
    monkeypatch.setenv("FABRICSCOPE_QUERY_READERS", "4")
    monkeypatch.setenv("FABRICSCOPE_QUERY_MAX_MEMORY_BYTES", str(512 * 1024 * 1024))
    with pytest.raises(ConfigError, match=r"FABRICSCOPE_QUERY_READERS=4 \(\+1 short-query reader\) x "
                                          r"FABRICSCOPE_QUERY_MAX_MEMORY_BYTES=536870912 = 2684354560 bytes is over "
                                          r"FABRICSCOPE_QUERY_MEMORY_TOTAL_BYTES=2147483648"):
        read_settings()
    monkeypatch.setenv("FABRICSCOPE_QUERY_MEMORY_TOTAL_BYTES", str(3 * 1024 ** 3))
    assert read_settings().query_limits().readers == 4
    monkeypatch.setenv("FABRICSCOPE_ENDPOINT_MAX_BODY_BYTES", "-1")
    with pytest.raises(ConfigError, match="FABRICSCOPE_ENDPOINT_MAX_BODY_BYTES='-1': Input should be greater"):
        read_settings()


class _RecordingClient:
    """clickhouse-connect's client surface, answered by a real chdb session; records each call's settings.
    (No ClickHouse server here: this checks what the server driver sends, with a real parser behind it.)"""

    def __init__(self, path: Path) -> None:
        from chdb import session

        self.session = session.Session(str(path))
        self.calls: list[tuple[str, str, dict]] = []

    def raw_query(self, query: str, settings: dict | None = None, fmt: str | None = None) -> bytes:
        self.calls.append(("raw_query", query, dict(settings or {})))
        return self.session.query(query, fmt or "TabSeparated").bytes()

    def query_arrow(self, query: str, settings: dict | None = None) -> pa.Table:
        self.calls.append(("query_arrow", query, dict(settings or {})))
        return self.session.query(query, "ArrowTable")

    def command(self, cmd: str) -> None:
        self.calls.append(("command", cmd, {}))
        self.session.query(cmd)

    def close(self) -> None:  # the store closes its client after each command; the test closes the session
        self.calls.append(("close", "", {}))


def test_server_driver_sends_readonly_and_limits_with_every_user_query(monkeypatch, tmp_path):
    import clickhouse_connect

    client = _RecordingClient(tmp_path / "server")
    monkeypatch.setattr(clickhouse_connect, "get_client", lambda dsn: client)
    store = ServerStore("http://reader:pw@clickhouse:8123/default", LIMITS)
    assert store.query_readonly("SELECT 41 + 1 AS x").to_pylist() == [{"x": 42}]
    assert client.calls, "no call reached the client"
    for method, _, settings in client.calls:
        assert settings == LIMITS.settings(), method
        assert settings["readonly"] == 1
    assert client.calls[-1][:2] == ("query_arrow", "SELECT 41 + 1 AS x")
    client.calls.clear()
    with pytest.raises(QueryRefused, match="function file()"):
        store.query_readonly("SELECT * FROM file('/etc/hostname', 'LineAsString')")
    assert [c[0] for c in client.calls if c[0] == "query_arrow"] == []  # refused before it ran
    store.close()
    client.session.close()


def test_saved_queries_run_read_only_on_the_server_driver(monkeypatch, tmp_path):
    """`fabricscope query NAME` against CLICKHOUSE_URL: the rendered saved query passes the guard and runs
    with readonly = 1 (checked for every saved query file)."""
    import clickhouse_connect

    from fabricscope.settings import Settings
    from fabricscope.store_access import run_query
    from schemas.saved_queries import load, names, render

    client = _RecordingClient(tmp_path / "server")
    monkeypatch.setattr(clickhouse_connect, "get_client", lambda dsn: client)
    s = Settings(clickhouse_url="http://reader:pw@clickhouse:8123/default", fabricscope_var=tmp_path)
    for name in names():
        q = load(name)
        values = {p.name: "x" if p.type == "String" else "1" for p in q.params if p.required}
        run_query(s, render(q, values))
        runs = [c for c in client.calls if c[0] == "query_arrow"]
        assert runs and runs[-1][2]["readonly"] == 1, name
        assert runs[-1][2]["max_execution_time"] == s.fabricscope_query_max_execution_time_s
    client.session.close()


def test_query_command_without_a_sink_refuses_a_drop(tmp_path):
    env = {**os.environ, "FABRICSCOPE_VAR": str(tmp_path / "var")}
    r = subprocess.run([sys.executable, "-m", "fabricscope", "query", "DROP TABLE verdict_feedback"], env=env,
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 1
    assert "DROP is not a read" in r.stderr
    r = subprocess.run([sys.executable, "-m", "fabricscope", "query", "--csv", "EXISTS TABLE verdict_feedback"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "1"


def test_the_server_drivers_insert_lane_is_a_client_of_its_own(monkeypatch):
    """clickhouse-connect refuses two statements at once in one client's session: the store writer's block
    inserts (in their thread) get a client of their own, to the same server and database."""
    import clickhouse_connect

    class Client:
        def __init__(self, dsn: str) -> None:
            self.dsn, self.calls = dsn, []

        def insert_arrow(self, table: str, data: pa.Table, settings: dict | None = None) -> None:
            self.calls.append((table, data.num_rows, dict(settings or {})))

        def close(self) -> None:
            self.calls.append(("close",))

    made: list[Client] = []
    monkeypatch.setattr(clickhouse_connect, "get_client", lambda dsn: made.append(Client(dsn)) or made[-1])
    url = "http://writer:pw@clickhouse:8123/default"
    store = ServerStore(url, LIMITS)
    lane = store.insert_lane()
    assert [c.dsn for c in made] == [url, url]
    lane.insert_arrow("probes", pa.table({"x": [1, 2]}), dedup_token="t/0/1-2")
    (table, rows, settings), = made[1].calls
    assert (table, rows, settings["insert_deduplication_token"]) == ("probes", 2, "t/0/1-2")
    assert made[0].calls == []
    lane.close()
    store.close()
    assert made[0].calls == made[1].calls[1:] == [("close",)]
