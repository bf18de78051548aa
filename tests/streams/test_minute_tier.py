"""The minute tier the stream computes equals what the former views over ``probes`` computed.

The three materialized views of schemas/ddl/005_history.sql are dropped by 011 (the stream computes
the minute tier). Their SELECTs, read from the shipped 005 file, still run here as queries over the
same raw rows, and every stored tier must equal them key for key, histogram bucket for bucket.
"""

from __future__ import annotations

import re
import time
from importlib import resources

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.history_fabric import HOUR_NS, fabric, probe_table, simulate
from bench.probe_insert import insert_probes
from schemas.migrations import split_statements
from schemas.probe_rows.minute_tier import minute_rows, store_bucket
from sinks.clickhouse import ChdbStore, migrate
from sinks.history import load_inventory

KEYS = {
    "probes_1m": ["minute", "pinglist", "prober_rnic", "responder_rnic"],
    "probes_1h_rnic": ["hour", "prober_rnic", "responder_rnic"],
    "probes_1h_tor": ["hour", "prober_tor", "responder_tor", "pinglist"],
}
VALS = "sum(probes) AS probes, sum(timeouts) AS timeouts, mapSort(sumMap(rtt_hist)) AS rtt, " \
       "mapSort(sumMap(responder_hist)) AS resp, mapSort(sumMap(prober_hist)) AS prob"


def _former_views() -> dict[str, str]:
    """``{target table: SELECT}`` of the views 005_history.sql created over ``probes``."""
    sql = resources.files("schemas.ddl").joinpath("005_history.sql").read_text()
    out = {}
    for stmt in split_statements(sql):
        m = re.match(r"CREATE MATERIALIZED VIEW IF NOT EXISTS \w+ TO (\w+) AS\s+(SELECT.*)", stmt, re.S)
        if m:
            out[m.group(1)] = m.group(2)
    assert set(out) == set(KEYS), out.keys()
    return out


@pytest.fixture
def store(tmp_path):
    s = ChdbStore(tmp_path / "ch")
    migrate(s)
    yield s
    s.close()


def _canon(store, sql: str, keys: list[str]) -> list[dict]:
    k = ", ".join(keys)
    return store.query_arrow(f"SELECT {k}, {VALS} FROM ({sql}) GROUP BY {k} ORDER BY {k}").to_pylist()


def test_stored_tiers_equal_the_former_views_over_the_same_rows(store):
    fab = fabric(tors=3, rnics_per_tor=4)
    load_inventory(store, fab.inventory)
    start = (time.time_ns() // HOUR_NS - 3) * HOUR_NS
    p = simulate(fab, start, hours=2, per_hour=400, seed=5)
    n = len(p.t1)
    cuts = [0, n // 3, n // 3 + 7, n]  # three batches, one tiny, splitting minutes and hours
    for i in range(3):
        insert_probes(store, probe_table(fab, p, slice(cuts[i], cuts[i + 1]), f"probes.raw/0/{i}"), f"b{i}")
    views = store.query_arrow("SELECT name FROM system.tables WHERE "
                              "database = currentDatabase() AND engine = 'MaterializedView'").to_pylist()
    assert views == [], "the writer fills every tier; a view would count its rows twice"
    for table, select in _former_views().items():
        want = _canon(store, select, KEYS[table])
        got = _canon(store, f"SELECT * FROM {table}", KEYS[table])
        assert sum(r["probes"] for r in got) == n, table
        assert got == want, table
    # and the tier really holds timeouts and histograms (not two empty results)
    tot = store.query_arrow("SELECT sum(timeouts) AS t, arraySum(mapValues(sumMap(rtt_hist))) AS h "
                            "FROM probes_1m").to_pylist()[0]
    assert tot == {"t": int(p.timeout.sum()), "h": n - int(p.timeout.sum())}


def test_minute_rows_by_hand():
    """Two batches, two minutes, a timeout and a null delay: counts and buckets computed by hand."""
    m0 = 1_800_000_000 * 1_000_000_000 // 60_000_000_000 * 60_000_000_000
    rows = {
        "batch_id": ["r/0/1", "r/0/1", "r/0/1", "r/0/2", "r/0/1"],
        "t1": [m0 + 1, m0 + 2, None, m0 + 3, m0 + 60_000_000_000],
        "upload_ns": [m0 + 9] * 5,
        "pinglist": ["tor_mesh"] * 5,
        "prober_rnic": ["a"] * 5,
        "responder_rnic": ["b"] * 5,
        "status": ["ok", "timeout", "ok", "ok", "ok"],
        "network_rtt_ns": [1024, None, 1024, 2000, 1],
        "responder_delay_ns": [100, None, None, 100, 100],
        "prober_delay_ns": [0, None, 5, 5, 5],
    }
    t = pa.table({k: pa.array(v, pa.int64() if k.endswith("ns") or k == "t1" else None) for k, v in rows.items()})
    got = minute_rows(t).to_pylist()
    s0 = m0 // 1_000_000_000
    assert [(r["batch_id"], r["minute"], r["probes"], r["timeouts"]) for r in got] == [
        ("r/0/1", s0, 3, 1), ("r/0/1", s0 + 60, 1, 0), ("r/0/2", s0, 1, 0)]
    # 1024 ns -> 16*10 = 160; 2000 ns -> floor(16*10.966) = 175; 1 ns -> 0; 100 -> floor(16*6.644) = 106;
    # 0 ns counts as 1 ns -> 0; 5 -> floor(16*2.3219) = 37
    assert got[0]["rtt_hist"] == [(160, 2)]
    assert got[0]["responder_hist"] == [(106, 1)]
    assert got[0]["prober_hist"] == [(0, 1), (37, 1)]
    assert got[2]["rtt_hist"] == [(175, 1)] and got[1]["rtt_hist"] == [(0, 1)]
    assert list(store_bucket(np.array([1024, 2000, 1, 100, 0, 5]))) == [160, 175, 0, 106, 0, 37]


def test_merging_a_blocks_minute_rows_sums_counts_and_histograms():
    from schemas.probe_rows.minute_tier import merge_minute_rows

    m = pa.map_(pa.uint16(), pa.uint64())
    rows = pa.table({
        "minute": pa.array([60, 60, 120, 60], pa.int64()), "pinglist": ["tor_mesh"] * 4,
        "prober_rnic": ["a", "a", "a", "b"], "responder_rnic": ["b"] * 4,
        "probes": pa.array([3, 2, 1, 1], pa.uint64()), "timeouts": pa.array([1, 0, 0, 0], pa.uint64()),
        "rtt_hist": pa.array([[(160, 2)], [(160, 1), (175, 1)], [(0, 1)], []], m),
        "responder_hist": pa.array([[], [], [], [(1, 1)]], m),
        "prober_hist": pa.array([[(37, 2)], [(37, 2)], [], []], m),
        "batch_id": ["r/0/1", "r/0/2", "r/0/2", "r/0/3"],
    })
    got = merge_minute_rows(rows).to_pylist()
    assert [(r["minute"], r["prober_rnic"], r["probes"], r["timeouts"], r["rtt_hist"], r["prober_hist"])
            for r in got] == [(60, "a", 5, 1, [(160, 3), (175, 1)], [(37, 4)]), (60, "b", 1, 0, [], []),
                              (120, "a", 1, 0, [(0, 1)], [])]
    assert got[1]["responder_hist"] == [(1, 1)] and "batch_id" not in got[0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["tor_mesh", "inter_tor"]), st.sampled_from("abc"),
                          st.sampled_from("bcd"), st.integers(0, 5), st.lists(st.tuples(st.integers(0, 600),
                                                                                     st.integers(1, 9)), max_size=4)),
                min_size=1, max_size=40))
def test_the_writers_merge_equals_the_workers_merge(rows):
    """The store writer's merge (one sort, ``reduceat``) gives the rows the worker's ``merge_minute_rows`` gives."""
    from schemas.probe_rows.minute_tier import merge_minute_rows
    from sinks.probe_tiers import merge_minute_rows as writer_merge

    m = pa.map_(pa.uint16(), pa.uint64())

    def hist(entries):  # a map's keys are distinct
        return sorted(dict(entries).items())

    t = pa.table({
        "minute": pa.array([60 * r[0] for r in rows], pa.int64()), "pinglist": [r[1] for r in rows],
        "prober_rnic": [r[2] for r in rows], "responder_rnic": [r[3] for r in rows],
        "probes": pa.array([r[4] + len(r[5]) for r in rows], pa.uint64()),
        "timeouts": pa.array([r[4] for r in rows], pa.uint64()),
        "rtt_hist": pa.array([hist(r[5]) for r in rows], m),
        "responder_hist": pa.array([hist(r[5][:1]) for r in rows], m),
        "prober_hist": pa.array([[] for _ in rows], m), "batch_id": [f"r/0/{i}" for i in range(len(rows))],
    })
    key = ["minute", "pinglist", "prober_rnic", "responder_rnic"]
    want = sorted(merge_minute_rows(t).to_pylist(), key=lambda r: [r[k] for k in key])
    merged = writer_merge(t)
    # in probes_1m's ORDER BY order (pinglist, prober, responder, minute), so the engine need not sort the block
    order_by = [(r["pinglist"], r["prober_rnic"], r["responder_rnic"], r["minute"]) for r in merged.to_pylist()]
    assert order_by == sorted(order_by) and len(set(order_by)) == len(order_by)
    got = sorted(merged.to_pylist(), key=lambda r: [r[k] for k in key])
    assert got == want
    assert sum(r["probes"] for r in got) == sum(r[4] + len(r[5]) for r in rows)


@pytest.mark.parametrize("pairs", [65_536, 70_000])
def test_histograms_past_sixteen_bits_of_groups(pairs):
    """Up to 65,536 groups the histogram keys sort as uint32, past it as int64: both give each group its own
    buckets (two rows a group: buckets 160 and 175, or 160 twice), and the writer's merge keeps them."""
    from sinks.probe_tiers import merge_minute_rows as writer_merge

    m0 = 1_800_000_000 * 1_000_000_000 // 60_000_000_000 * 60_000_000_000
    i = np.arange(pairs)
    prober = np.char.add("p", (i // 300).astype(str))
    responder = np.char.add("r", (i % 300).astype(str))
    rtt = np.where(i % 2 == 0, 2000, 1024)  # even groups: 175 and 160; odd: 160 twice
    t = pa.table({
        "batch_id": ["r/0/1"] * (2 * pairs), "t1": pa.array(np.full(2 * pairs, m0 + 1)),
        "upload_ns": pa.array(np.full(2 * pairs, m0 + 9)), "pinglist": ["tor_mesh"] * (2 * pairs),
        "prober_rnic": np.concatenate([prober, prober]), "responder_rnic": np.concatenate([responder, responder]),
        "status": ["ok"] * (2 * pairs), "network_rtt_ns": pa.array(np.concatenate([rtt, np.full(pairs, 1024)])),
        "responder_delay_ns": pa.array(np.full(2 * pairs, 100)), "prober_delay_ns": pa.array(np.full(2 * pairs, 5)),
    })
    got = minute_rows(t)
    assert got.num_rows == pairs
    hist = {(p, r): h for p, r, h in zip(got["prober_rnic"].to_pylist(), got["responder_rnic"].to_pylist(),
                                         got["rtt_hist"].to_pylist(), strict=True)}
    assert hist[("p0", "r0")] == [(160, 1), (175, 1)] and hist[("p0", "r1")] == [(160, 2)]
    last = pairs - 1
    want_last = [(160, 2)] if last % 2 else [(160, 1), (175, 1)]
    assert hist[(f"p{last // 300}", f"r{last % 300}")] == want_last
    merged = writer_merge(pa.concat_tables([got, got]))  # every key twice: counts double, buckets stay
    assert merged.num_rows == pairs
    m = {(p, r): h for p, r, h in zip(merged["prober_rnic"].to_pylist(), merged["responder_rnic"].to_pylist(),
                                      merged["rtt_hist"].to_pylist(), strict=True)}
    assert m[("p0", "r0")] == [(160, 2), (175, 2)] and m[("p0", "r1")] == [(160, 4)]
