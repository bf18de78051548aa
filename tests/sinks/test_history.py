"""History schema on the real embedded store (chdb): the views fill the rollups, ToRs
come from the inventory, and a replayed batch counts once in every rollup."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bench.history_fabric import HOUR_NS, fabric, grouped_quantiles, probe_table, simulate
from bench.probe_insert import insert_probes
from schemas.saved_queries import SavedQueryError, parse_duration, render_named
from sinks.clickhouse import ChdbStore, StoreError, migrate
from sinks.history import load_inventory, record_feedback

from conftest import REPO


@pytest.fixture
def store(tmp_path):
    s = ChdbStore(tmp_path / "ch")
    migrate(s)
    yield s
    s.close()


def _totals(store, table: str) -> dict:
    return store.query_arrow(
        f"SELECT sum(probes) AS n, sum(timeouts) AS t, arraySum(mapValues(sumMap(rtt_hist))) AS h FROM {table}"
    ).to_pylist()[0]


def test_views_fill_every_rollup_and_a_replay_counts_once(store):
    fab = fabric(tors=3, rnics_per_tor=4)
    load_inventory(store, fab.inventory)
    start = (time.time_ns() // HOUR_NS - 3) * HOUR_NS
    p = simulate(fab, start, hours=2, per_hour=50, seed=1)
    batch = probe_table(fab, p, slice(None), "probes.raw/0/7")
    for _ in range(3):  # the sink replays after a crash: same token
        insert_probes(store, batch, "probes.raw/0/7")
    n, t = len(p.t1), int(p.timeout.sum())
    expected = {"n": n, "t": t, "h": n - t}
    for table in ("probes_1m", "probes_1h_rnic", "probes_1h_tor"):
        assert _totals(store, table) == expected, table
    # A different batch is new data, counted again.
    insert_probes(store, batch, "probes.raw/0/8")
    assert _totals(store, "probes_1h_tor") == {k: 2 * v for k, v in expected.items()}


def test_tor_rollup_uses_the_inventory_and_merges_histograms_exactly(store):
    fab = fabric(tors=3, rnics_per_tor=4)
    load_inventory(store, fab.inventory)
    start = (time.time_ns() // HOUR_NS - 3) * HOUR_NS
    p = simulate(fab, start, hours=2, per_hour=200, seed=2)
    # Two inserts split mid-hour: the rollup must merge their histograms.
    half = len(p.t1) // 2
    insert_probes(store, probe_table(fab, p, slice(0, half), "b1"), "b1")
    insert_probes(store, probe_table(fab, p, slice(half, None), "b2"), "b2")
    got = store.query_arrow(
        "SELECT prober_tor, responder_tor, sum(probes) AS n, round(fs_hist_quantile(sumMap(rtt_hist), 0.99)) AS p99 "
        "FROM probes_1h_tor GROUP BY prober_tor, responder_tor ORDER BY prober_tor, responder_tor"
    ).to_pylist()
    tor = np.array([int(t[1:]) for t in fab.tors])
    key = tor[p.src] * 10 + tor[p.dst]
    ok = ~p.timeout
    want = grouped_quantiles(key[ok], p.rtt[ok], (0.99,))
    counts = np.bincount(key, minlength=100)
    assert [(r["prober_tor"], r["responder_tor"]) for r in got] == [(f"T{k // 10:02d}", f"T{k % 10:02d}")
                                                                      for k in sorted(want)]
    for r in got:
        k = int(r["prober_tor"][1:]) * 10 + int(r["responder_tor"][1:])
        assert r["n"] == counts[k]
        assert r["p99"] == want[k][0]


def test_rnic_missing_from_the_inventory_rolls_up_under_empty_tor(store):
    fab = fabric(tors=2, rnics_per_tor=4)
    start = (time.time_ns() // HOUR_NS - 2) * HOUR_NS
    p = simulate(fab, start, hours=1, per_hour=5, seed=3)
    insert_probes(store, probe_table(fab, p, slice(None), "b"), "b")
    got = store.query_arrow("SELECT prober_tor, responder_tor, sum(probes) AS n FROM probes_1h_tor "
                            "GROUP BY prober_tor, responder_tor").to_pylist()
    assert got == [{"prober_tor": "", "responder_tor": "", "n": len(p.t1)}]


def test_feedback_needs_a_known_verdict_and_a_valid_decision(store):
    with pytest.raises(StoreError, match="no verdict"):
        record_feedback(store, "v-404", "confirm")
    with pytest.raises(StoreError, match="confirm, reject"):
        record_feedback(store, "v-1", "maybe")


def test_saved_query_parameters_are_checked_and_quoted():
    assert parse_duration("90d") == 90 * 86400
    assert parse_duration("12h") == 43200
    with pytest.raises(SavedQueryError, match="duration"):
        parse_duration("ninety days")
    sql = render_named("rnic_history", {"rnic": "x' OR 1=1 --", "since": "1h"})
    assert "'x\\' OR 1=1 --'" in sql
    assert "toIntervalSecond(3600)" in sql
    with pytest.raises(SavedQueryError, match="needs -p rnic"):
        render_named("rnic_history")
    assert "'' = ''" in render_named("rtt_tor_hourly")  # optional filters default to all
    with pytest.raises(SavedQueryError, match="has no parameter"):
        render_named("top_suspects", {"bogus": "1"})
    with pytest.raises(SavedQueryError, match="expected an integer"):
        render_named("top_suspects", {"limit": "1; DROP TABLE probes"})
    with pytest.raises(SavedQueryError, match="saved queries are"):
        render_named("nope")


def test_inventory_command_loads_rnic_tors(tmp_path):
    import subprocess
    import sys

    from producers.sim.fabrics import panel1

    inv = panel1()
    inv.dump(tmp_path / "cluster.yaml")
    env = {"FABRICSCOPE_VAR": str(tmp_path / "var"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "fabricscope", "history", "inventory", str(tmp_path / "cluster.yaml")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"{len(inv.rnics)} RNICs loaded" in r.stderr
    store = ChdbStore(tmp_path / "var" / "clickhouse")
    got = store.query_arrow("SELECT rnic, host, tor FROM rnic_inventory FINAL ORDER BY rnic").to_pylist()
    store.close()
    assert got == [{"rnic": r.id, "host": r.host, "tor": r.tor} for r in sorted(inv.rnics.values(), key=lambda r: r.id)]


def test_grafana_dashboard_queries_run_on_the_store(store):
    """Every panel of infra/grafana/fabricscope-history.json runs on the real schema
    (Grafana's $__timeFilter(col) macro replaced by a 7-day filter)."""
    import json
    import re

    dash = json.loads((REPO / "infra/grafana/fabricscope-history.json").read_text())
    fab = fabric(tors=2, rnics_per_tor=4)
    load_inventory(store, fab.inventory)
    p = simulate(fab, (time.time_ns() // HOUR_NS - 2) * HOUR_NS, hours=1, per_hour=20, seed=4)
    insert_probes(store, probe_table(fab, p, slice(None), "g"), "g")
    assert len(dash["panels"]) >= 6
    for panel in dash["panels"]:
        sql = re.sub(r"\$__timeFilter\(([\w.]+)\)", r"\1 >= now() - INTERVAL 7 DAY", panel["targets"][0]["rawSql"])
        rows = store.query_arrow(sql)
        if "probes_1" in sql:
            assert rows.num_rows > 0, panel["title"]


def test_feedback_through_the_running_sink_endpoint(tmp_path):
    """While the pipeline's sink owns the embedded store, `fabricscope verdict` writes through its endpoint."""
    import subprocess
    import sys

    import pyarrow as pa

    from schemas.arrow_pa import arrow_schema
    from sinks.query_endpoint import serve

    path = tmp_path / "var" / "clickhouse"
    owner = ChdbStore(path)
    migrate(owner)
    v = {"verdict_id": "w1", "window_start_ns": time.time_ns(), "window_end_ns": time.time_ns(), "kind": "rnic",
         "location": "A3", "votes": 1.0, "confidence": 0.8, "failed_probes": 30, "total_probes": 200,
         "impact": "P1", "job_id": "j", "revision_of": None, "evidence": "{}", "emitted_ns": time.time_ns()}
    owner.insert_arrow("verdicts", pa.Table.from_pylist([v], schema=arrow_schema("verdict.v1")))
    server = serve(owner, path)
    try:
        env = {"FABRICSCOPE_VAR": str(tmp_path / "var"), "PATH": "/usr/bin:/bin"}
        r = subprocess.run([sys.executable, "-m", "fabricscope", "verdict", "confirm", "w1", "--note", "bad optic"],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        got = owner.query_arrow("SELECT verdict_id, decision, note FROM verdict_feedback").to_pylist()
        assert got == [{"verdict_id": "w1", "decision": "confirm", "note": "bad optic"}]
    finally:
        server.stop()
        owner.close()
