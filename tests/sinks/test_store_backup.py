"""ClickHouse BACKUP/RESTORE of the whole store on chdb (docs/storage.md's backup commands, run for real):
the schema of every migration, rows in probes and its rollups, a verdict; back up to a File destination,
restore as another database, every table holds the same rows."""

from __future__ import annotations

from pathlib import Path

import chdb

from schemas.cluster_ddl import render_migrations

NOW_NS = "toUnixTimestamp64Nano(now64(9))"


def _rows(cur, sql: str) -> list[tuple]:  # noqa: ANN001 - a chdb DB-API cursor
    cur.execute(sql)
    return cur.fetchall()


def test_backup_to_a_file_destination_and_restore(tmp_path: Path):
    backups = tmp_path / "backups"
    backups.mkdir()
    cfg = tmp_path / "backups.xml"  # a server needs the same allowed_path (docs/storage.md)
    cfg.write_text(f"<clickhouse><backups><allowed_path>{backups}/</allowed_path></backups></clickhouse>\n")
    conn = chdb.connect(f"{tmp_path / 'db'}?config-file={cfg}")
    cur = conn.cursor()
    try:
        for m in render_migrations(None):
            for stmt in m.statements:
                cur.execute(stmt)
        cur.execute("INSERT INTO probes (agent_id, upload_ns, seq, pinglist, prober_rnic, responder_rnic, t1, "
                    "status, network_rtt_ns, batch_id) "
                    f"SELECT 'h' || toString(number % 4), {NOW_NS}, number, 'tor-mesh', "
                    "'r' || toString(number % 8), 'r' || toString((number + 1) % 8), "
                    f"{NOW_NS} - number * 1000000, if(number % 50 = 0, 'timeout', 'ok'), "
                    "if(number % 50 = 0, NULL, 4000 + number % 700), 'b1' FROM numbers(5000)")
        cur.execute("INSERT INTO verdicts (verdict_id, window_start_ns, window_end_ns, kind, location, votes, "
                    "confidence, failed_probes, total_probes, impact, evidence, emitted_ns) "
                    f"VALUES ('v1', {NOW_NS}, {NOW_NS}, 'switch', 'A->S1', 3, 0.9, 10, 100, 'P1', '{{}}', {NOW_NS})")
        db = _rows(cur, "SELECT currentDatabase()")[0][0]
        tables = [t for (t,) in _rows(cur, "SELECT name FROM system.tables WHERE database = currentDatabase() "
                                           "AND engine LIKE '%MergeTree' ORDER BY name")]
        before = {t: _rows(cur, f"SELECT count() FROM {t}")[0][0] for t in tables}
        assert before["probes"] == 5000 and before["verdicts"] == 1

        status = _rows(cur, f"BACKUP DATABASE {db} TO File('{backups}/store-1')")
        assert status[0][1] == "BACKUP_CREATED"
        status = _rows(cur, f"RESTORE DATABASE {db} AS restored FROM File('{backups}/store-1') "
                      "SETTINGS allow_different_database_def = 1")
        assert status[0][1] == "RESTORED"
        after = {t: _rows(cur, f"SELECT count() FROM restored.{t}")[0][0] for t in tables}
        assert after == before
        # the same rows, not only as many
        for t in ("probes", "verdicts"):
            assert _rows(cur, f"SELECT sum(cityHash64(*)) FROM restored.{t}") == \
                _rows(cur, f"SELECT sum(cityHash64(*)) FROM {t}")
    finally:
        cur.close()
        conn.close()
