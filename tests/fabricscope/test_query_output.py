"""`fabricscope query` output: a row cap, counts, vertical layout, ISO times from the result's ClickHouse
types, CSV/JSON with every row. Results come from the real embedded engine (chdb)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from fabricscope.result_output import column_types, count_line, print_result, print_result_table

from conftest import REPO

T0 = 1_796_149_740  # 2026-12-01T18:29:00Z
SQL = (f"SELECT toDateTime({T0} + number, 'UTC') AS t, toDateTime64({T0}, 3, 'UTC') AS t64, "
       "toUInt32(number) AS n, number / 3 AS f FROM numbers(250)")


@pytest.fixture(scope="module")
def engine():
    import tempfile

    import chdb.session as cs

    session = cs.Session(tempfile.mkdtemp(prefix="fs-query-out-"))
    yield lambda sql: session.query(sql, "ArrowTable")
    session.close()


def _table(engine, sql=SQL, width=120, **kw) -> str:
    result = engine(sql)
    buf = io.StringIO()
    print_result_table(result, Console(file=buf, width=width, color_system=None), column_types(engine, sql, result),
                       pager=False, **kw)
    return buf.getvalue()


def test_types_come_from_describe_and_name_the_datetime(engine):
    result = engine(SQL)
    assert str(result.schema.field("t").type) == "uint32"  # why DESCRIBE is needed at all
    assert column_types(engine, SQL, result) == {"t": "DateTime('UTC')", "t64": "DateTime64(3, 'UTC')",
                                                 "n": "UInt32", "f": "Float64"}
    assert column_types(engine, "SELECT 1 AS one", engine("SELECT 1 AS one")) == {}  # no uint32: not asked


def test_table_caps_rows_and_says_how_many(engine):
    out = _table(engine)
    assert "2026-12-01T18:29:00Z" in out and "2026-12-01T18:30:39Z" in out  # rows 0 and 99
    assert "2026-12-01T18:30:40Z" not in out  # row 100 is not shown
    assert "0.333333" in out and "0.3333333" not in out
    assert out.rstrip().endswith("250 rows (showing 100; --limit N or --all for more, --csv/--json for every row)")
    assert "showing 7;" in _table(engine, limit=7)
    every = _table(engine, limit=None)
    assert "2026-12-01T18:33:09Z" in every and every.rstrip().endswith("250 rows")


def test_empty_and_single_results_say_so(engine):
    assert _table(engine, "SELECT 1 AS x WHERE 0").strip() == "0 rows"
    assert _table(engine, "SELECT 1 AS x").rstrip().endswith("\n1 row")
    assert count_line(186_871, 100).startswith("186,871 rows (showing 100;")


def test_vertical_and_wide_results_print_one_field_per_line(engine):
    out = _table(engine, "SELECT 1 AS a, 'x' AS b", vertical=True)
    assert out.splitlines()[:4] == ["Row 1:", "──────", "a: 1", "b: x"]
    wide = "SELECT " + ", ".join(f"'{'v' * 20}' AS column_{i}" for i in range(31))
    out = _table(engine, wide, width=80)
    assert "column_30: " + "v" * 20 in out and "…" not in out
    assert "31 columns are wider than the terminal" in out


def test_csv_and_json_stream_every_row_with_iso_times(engine):
    result = engine(SQL)
    types = column_types(engine, SQL, result)
    buf = io.StringIO()
    print_result(result, "csv", types, out=buf)
    lines = list(csv.reader(io.StringIO(buf.getvalue())))
    assert len(lines) == 251 and lines[0] == ["t", "t64", "n", "f"]
    assert lines[1] == ["2026-12-01T18:29:00Z", "2026-12-01T18:29:00.000Z", "0", "0"]
    assert lines[250][0] == "2026-12-01T18:33:09Z"
    buf = io.StringIO()
    print_result(result, "csv", types, tz="local", out=buf)  # the row-by-row path
    assert len(buf.getvalue().splitlines()) == 251
    buf = io.StringIO()
    print_result(result, "json", types, out=buf)
    rows = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert len(rows) == 250 and rows[1] == {"t": "2026-12-01T18:29:01Z", "t64": "2026-12-01T18:29:00Z",
                                            "n": 1, "f": pytest.approx(1 / 3)}
    buf = io.StringIO()
    print_result(result, "json", types, ns=True, out=buf)
    assert json.loads(buf.getvalue().splitlines()[0])["t"] == T0


def _fs(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FABRICSCOPE_VAR": str(tmp_path / "var"), "COLUMNS": "100",
           "KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    return subprocess.run([sys.executable, "-m", "fabricscope", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_the_command_prints_now_as_a_time_and_caps_the_table(tmp_path):
    r = _fs(tmp_path, "query", f"SELECT toDateTime({T0}, 'UTC') AS t, number FROM numbers(1000)")
    assert r.returncode == 0, r.stderr
    assert "2026-12-01T18:29:00Z" in r.stdout and str(T0) not in r.stdout
    assert "1,000 rows (showing 100;" in r.stdout
    r = _fs(tmp_path, "query", f"SELECT toDateTime({T0}, 'UTC') AS t", "--csv", "--ns")
    assert list(csv.reader(io.StringIO(r.stdout))) == [["t"], [str(T0)]]


def test_ns_prints_the_stored_integers_of_timestamp_columns_in_every_mode():
    import datetime as dt
    import io

    import pyarrow as pa

    from fabricscope.result_output import print_result

    t = pa.table({"window_start": pa.array([dt.datetime(2026, 12, 1, 20, 56, 40, tzinfo=dt.UTC)],
                                           pa.timestamp("s", tz="UTC")), "kind": ["switch"]})
    for mode in ("json", "csv"):
        out = io.StringIO()
        print_result(t, mode, ns=True, out=out)
        assert "1796158600" in out.getvalue() and "2026" not in out.getvalue(), (mode, out.getvalue())
