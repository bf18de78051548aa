"""The live verdict feed: NEW when a problem first appears, CLEARED after three closed windows without it,
probe noise counted but never printed, one origin at a time; on the real embedded store."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from fabricscope.live_feed import VerdictFeed, format_event, tick
from schemas.arrow_pa import table_from_columns

from conftest import REPO

S = 1_000_000_000
W = 20 * S
T0 = 1_796_149_680 * S  # 2026-12-01T18:28:00Z, a window start


def _v(vid: str, ws: int, kind: str = "switch", location: str = "A->S3", impact: str = "P1",
       job: str | None = "job-lab", emitted: int | None = None) -> dict:
    return {"verdict_id": vid, "window_start_ns": ws, "window_end_ns": ws + W, "kind": kind, "location": location,
            "impact": impact, "job_id": job, "emitted_ns": emitted or ws + W + 2 * S}


def test_new_then_cleared_after_three_quiet_windows():
    feed = VerdictFeed(T0)
    ev = feed.update([_v("a", T0), _v("b", T0, impact="P2", job=None)], T0)
    assert [format_event(e) for e in ev] == ["18:28:22 NEW P1 switch A->S3 (job job-lab)"]
    assert feed.update([_v("a", T0)], T0) == []  # the same verdict again: nothing
    assert feed.update([_v("c", T0 + W, impact="P0")], T0 + W) == []  # still there, now P0: no second NEW
    assert feed.active[("switch", "A->S3")].impact == "P0"
    assert feed.update([], T0 + 3 * W) == []  # two quiet windows after its last one
    ev = feed.update([], T0 + 4 * W)          # the third
    assert [format_event(e) for e in ev] == [
        "18:29:40 CLEARED switch A->S3 (last seen in the window 2026-12-01T18:28:20Z – 18:28:40Z (20 s))"]
    assert feed.counts() == "3 verdicts: 1 new, 1 cleared, 0 active"
    ev = feed.update([_v("d", T0 + 6 * W)], T0 + 6 * W)  # back: NEW again
    assert [e.what for e in ev] == ["NEW"]


def test_probe_noise_is_counted_not_shown():
    feed = VerdictFeed(T0)
    assert feed.update([_v("s", T0, kind="stale_qpn", location="C3", impact="P2", job=None)], T0) == []
    assert feed.counts() == "1 verdict (1 probe noise): 0 new, 0 cleared, 0 active"


@pytest.fixture
def store(migrated_store):
    return migrated_store


def _insert(store, rows: list[dict], origin: str) -> None:
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    n = len(rows)
    cols |= {"votes": [1.0] * n, "confidence": [1.0] * n, "failed_probes": [5] * n, "total_probes": [9] * n,
             "revision_of": [None] * n, "evidence": ["{}"] * n}
    t = table_from_columns("verdict.v1", cols)
    store.insert_arrow("verdicts", t.append_column("origin", pa.array([origin] * n)))


def test_tick_reads_the_store_and_follows_one_origin(store):
    now = time.time_ns() // W * W - 10 * W
    _insert(store, [_v("old", now - 30 * W, emitted=now - 29 * W)], "lab")  # before the run: not this feed's
    _insert(store, [_v("lab1", now, location="B->S1")], "lab")
    _insert(store, [_v("demo1", now, kind="busy_host", location="H2")], "demo")
    feed, lines = VerdictFeed(now - W, "lab"), []
    tick(feed, store.query_readonly, lines.append)
    assert [ln[9:] for ln in lines] == ["NEW P1 switch B->S1 (job job-lab)"]
    _insert(store, [_v("lab2", now + 4 * W, location="C->S2")], "lab")
    lines.clear()
    tick(feed, store.query_readonly, lines.append)
    assert [ln[9:18] for ln in lines] == ["NEW P1 sw", "CLEARED s"]
    assert "B->S1" in lines[1] and feed.counts() == "2 verdicts: 2 new, 1 cleared, 1 active (P1 1)"


def test_tick_survives_a_store_that_does_not_answer():
    def down(sql: str) -> pa.Table:
        raise ConnectionError("endpoint restarting")

    lines: list[str] = []
    assert tick(VerdictFeed(T0), down, lines.append) == [] and lines == []


def test_verdicts_command_prints_the_problems_of_the_period(tmp_path):
    import os
    import subprocess
    import sys

    from sinks.clickhouse import migrate, open_store

    ws = time.time_ns() // W * W - 5 * W
    store = open_store(tmp_path / "var" / "clickhouse")
    try:
        migrate(store)
        _insert(store, [_v("x", ws, location="A->S3"), _v("y", ws, kind="stale_qpn", location="C3", job=None)], "lab")
        _insert(store, [_v("z", ws, kind="busy_host", location="H2")], "demo")
    finally:
        store.close()
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "FABRICSCOPE_VAR": str(tmp_path / "var"), "KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    r = subprocess.run([sys.executable, "-m", "fabricscope", "verdicts", "--since", "10 min", "--origin", "lab"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [ln[9:] for ln in r.stdout.splitlines()] == ["NEW P1 switch A->S3 (job job-lab)"]
    assert "2 verdicts (1 probe noise): 1 new, 0 cleared, 1 active (P1 1)" in r.stderr
