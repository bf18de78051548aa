"""30 simulated days of a 100-RNIC fabric in the real embedded store (chdb); every saved
query runs, and its answer is compared with the same numbers computed here in numpy/Python
straight from the generated rows (not from the store)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from bench.history_fabric import HOUR_NS, fabric, grouped_quantiles, probe_table, simulate
from bench.probe_insert import insert_probes
from schemas.saved_queries import names, render_named
from sinks.clickhouse import ChdbStore, migrate
from sinks.history import load_inventory, record_feedback

from conftest import REPO

DAYS = 30
KINDS = ("rnic", "switch", "host_down", "busy_host", "undetermined")


def _verdicts(fab, now_s: int) -> list[dict]:
    """450 verdicts, one every 6000 s back from now (none near a --since cut), and some revisions."""
    out = []
    for i in range(450):
        ws = (now_s - (i * 6000 + 1234)) // 20 * 20
        kind = KINDS[i % 5]
        if kind == "rnic":
            loc = fab.rnics[i % 7]
        elif kind == "switch":
            loc = f"{fab.rnics[i % 7]}->{fab.tors[i % 7]}" if i % 2 else f"{fab.tors[i % 4]}->S{i % 2}"
        else:
            loc = fab.hosts[i % 6]
        base = {"verdict_id": f"v{i:04d}", "window_start_ns": ws * 10**9, "window_end_ns": (ws + 20) * 10**9,
                "kind": kind, "location": loc, "votes": float(i % 9), "confidence": (i % 10) / 10,
                "failed_probes": i % 17 + 1, "total_probes": 200, "impact": f"P{i % 3}",
                "job_id": None if i % 4 == 0 else f"job-{i % 5}", "revision_of": None, "evidence": "{}",
                "emitted_ns": (ws + 30) * 10**9}
        out.append(base)
        if i % 25 == 0:
            out.append({**base, "verdict_id": f"v{i:04d}-r", "revision_of": base["verdict_id"], "impact": "P0",
                        "confidence": 0.95})
    return out


def _feedback(verdicts: list[dict]) -> list[tuple[str, str, int]]:
    """(verdict_id, decision, at_ns): every third verdict reviewed, every 9th changes its mind."""
    fb = []
    for n, v in enumerate(verdicts):
        if n % 3:
            continue
        first = "confirm" if n % 2 == 0 else "reject"
        fb.append((v["verdict_id"], first, 1_000))
        if n % 9 == 0:
            fb.append((v["verdict_id"], "reject" if first == "confirm" else "confirm", 2_000))
    return fb


@pytest.fixture(scope="module")
def month(tmp_path_factory):
    """The store with 30 days of probes and verdicts, plus the generated truth."""
    path = tmp_path_factory.mktemp("month") / "clickhouse"
    store = ChdbStore(path)
    migrate(store)
    fab = fabric(tors=10, rnics_per_tor=10)
    load_inventory(store, fab.inventory)
    now_s = int(time.time())
    start = (now_s * 10**9 // HOUR_NS - 24 * DAYS + 1) * HOUR_NS
    p = simulate(fab, start, hours=24 * DAYS, per_hour=20, seed=11)
    per_day = len(p.t1) // DAYS
    t0 = time.perf_counter()
    for d in range(DAYS):
        batch = f"probes.raw/0/{d}"
        insert_probes(store, probe_table(fab, p, slice(d * per_day, (d + 1) * per_day), batch), batch)
    load_s = time.perf_counter() - t0
    verdicts = _verdicts(fab, now_s)
    store.insert_arrow("verdicts", pa.Table.from_pylist(verdicts, schema=_verdict_schema()), "verdicts/0/0")
    fb = _feedback([v for v in verdicts if v["revision_of"] is None])
    base_ns = time.time_ns()
    for vid, decision, dt in fb:
        record_feedback(store, vid, decision, note="checked", at_ns=base_ns + dt)
    state = {"store": store, "path": path, "fab": fab, "p": p, "start": start, "now_s": now_s,
             "verdicts": verdicts, "feedback": fb, "load_s": load_s}
    yield state
    if state["store"] is not None:  # chdb allows one open store per process: never leave it open
        state["store"].close()


def _verdict_schema() -> pa.Schema:
    from schemas.arrow_pa import arrow_schema

    return arrow_schema("verdict.v1")


def _run(month, name: str, **params: str) -> list[dict]:
    t0 = time.perf_counter()
    rows = month["store"].query_arrow(render_named(name, params)).to_pylist()
    month.setdefault("ms", {})[name] = round((time.perf_counter() - t0) * 1000, 1)
    return rows


def _live(month, since_s: int) -> list[dict]:
    revised = {v["revision_of"] for v in month["verdicts"] if v["revision_of"]}
    cut = (month["now_s"] - since_s) * 10**9
    return [v for v in month["verdicts"] if v["window_start_ns"] >= cut and v["verdict_id"] not in revised]


def test_the_month_loaded_through_the_views(month):
    p = month["p"]
    got = month["store"].query_arrow("SELECT sum(probes) AS n, sum(timeouts) AS t FROM probes_1h_rnic").to_pylist()
    assert got == [{"n": len(p.t1), "t": int(p.timeout.sum())}]
    assert len(p.t1) == 100 * 20 * 24 * DAYS
    print(f"\nloaded {len(p.t1):,} probe rows in {month['load_s']:.1f} s")


def test_top_suspects(month):
    for since, since_s in (("7d", 7 * 86400), ("31d", 31 * 86400)):
        got = _run(month, "top_suspects", since=since, limit="10")
        groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
        for v in _live(month, since_s):
            if v["kind"] != "undetermined":
                groups[(v["kind"], v["location"])].append(v)
        want = sorted(
            ({"kind": k, "location": loc, "windows": len(vs), "worst_impact": min(v["impact"] for v in vs),
              "failed_probes": sum(v["failed_probes"] for v in vs),
              "jobs": len({v["job_id"] for v in vs if v["job_id"]})} for (k, loc), vs in groups.items()),
            key=lambda r: (-r["windows"], -r["failed_probes"], r["location"]),
        )[:10]
        assert [{k: r[k] for k in want[0]} for r in got] == want
        for r in got:
            vs = groups[(r["kind"], r["location"])]
            assert r["confidence"] == pytest.approx(np.mean([v["confidence"] for v in vs]), abs=5e-4)


def test_rtt_per_tor_pair_per_hour(month):
    p, fab = month["p"], month["fab"]
    got = _run(month, "rtt_tor_hourly", since="31d")
    tor = np.array([int(t[1:]) for t in fab.tors])
    hour = (p.t1 - month["start"]) // HOUR_NS
    key = hour * 10_000 + tor[p.src] * 100 + tor[p.dst]
    ok = ~p.timeout
    want_q = grouped_quantiles(key[ok], p.rtt[ok], (0.5, 0.99, 0.999))
    uniq, counts = np.unique(key, return_counts=True)
    want_n = dict(zip(uniq.tolist(), counts.tolist(), strict=True))
    want_t = Counter(key[p.timeout].tolist())
    assert len(got) == len(want_n)
    for r in got:
        h = (int(r["hour"].timestamp()) * 10**9 - month["start"]) // HOUR_NS
        k = h * 10_000 + int(r["prober_tor"][1:]) * 100 + int(r["responder_tor"][1:])
        assert (r["probes"], r["timeouts"]) == (want_n[k], want_t.get(k, 0))
        assert [r["p50_ns"], r["p99_ns"], r["p999_ns"]] == want_q[k]
    one_pair = _run(month, "rtt_tor_hourly", since="31d", src_tor="T01", dst_tor="T03")
    assert one_pair == [r for r in got if (r["prober_tor"], r["responder_tor"]) == ("T01", "T03")]
    assert len(one_pair) == 24 * DAYS


def test_rtt_per_pinglist_per_hour_and_summary(month):
    p = month["p"]
    hourly = _run(month, "rtt_pinglist_hourly", since="31d")
    hour = (p.t1 - month["start"]) // HOUR_NS
    key = hour * 10 + p.pinglist
    ok = ~p.timeout
    want = grouped_quantiles(key[ok], p.rtt[ok], (0.5, 0.99, 0.999))
    assert len(hourly) == len(want) == 24 * DAYS * 3
    names_ = ["tor_mesh", "inter_tor", "service"]
    for r in hourly:
        k = ((int(r["hour"].timestamp()) * 10**9 - month["start"]) // HOUR_NS) * 10 + names_.index(r["pinglist"])
        assert [r["p50_ns"], r["p99_ns"], r["p999_ns"]] == want[k]
    summary = {r["pinglist"]: r for r in _run(month, "rtt_pinglist_summary", since="31d")}
    whole = grouped_quantiles(p.pinglist[ok], p.rtt[ok], (0.5, 0.99, 0.999))
    for i, name in enumerate(names_):
        sel = p.pinglist == i
        assert summary[name]["probes"] == int(sel.sum())
        assert summary[name]["timeouts"] == int((sel & p.timeout).sum())
        assert [summary[name][c] for c in ("p50_ns", "p99_ns", "p999_ns")] == whole[i]


def test_rtt_per_pinglist_per_minute_for_short_ranges(month):
    p = month["p"]
    before = time.time()
    minutely = _run(month, "rtt_pinglist_minutely", since="2d")
    after = time.time()  # the query's cut lies between before's and after's, however long it ran
    cut_s = int(before) - 2 * 86400
    minute = p.t1 // (60 * 10**9)
    ok = ~p.timeout
    want = grouped_quantiles((minute * 10 + p.pinglist)[ok], p.rtt[ok], (0.5, 0.99, 0.999))
    names_ = ["tor_mesh", "inter_tor", "service"]
    got = {int(r["minute"].timestamp()) // 60 * 10 + names_.index(r["pinglist"]): r for r in minutely}
    assert got and min(k // 10 for k in got) * 60 >= cut_s - 2  # nothing older than --since
    inside = {k for k in want if (k // 10) * 60 >= int(after) - 2 * 86400 + 60}  # clear of the cut's minute
    assert inside and inside <= set(got)
    for k in inside:
        assert [got[k]["p50_ns"], got[k]["p99_ns"], got[k]["p999_ns"]] == want[k]
        sel = (minute == k // 10) & (p.pinglist == k % 10)
        assert (got[k]["probes"], got[k]["timeouts"]) == (int(sel.sum()), int((sel & p.timeout).sum()))


def test_rtt_per_service_per_hour_from_raw_probes(month):
    p = month["p"]
    cut = lambda t_ns: (t_ns - 7 * 86400 * 10**9) // HOUR_NS + 1  # noqa: E731 - the first whole hour inside
    while True:  # a query that ran across the turn of an hour has an unknown cut: ask again
        before = time.time_ns()
        got = _run(month, "rtt_service_hourly", since="7d")
        if cut(before) == cut(time.time_ns()):
            break
    cut_hour = cut(before)
    hour = p.t1 // HOUR_NS
    sel = (p.pinglist == 2) & (hour >= cut_hour)
    job = p.src % 4
    key = hour * 10 + job
    want_q = grouped_quantiles(key[sel & ~p.timeout], p.rtt[sel & ~p.timeout], (0.5, 0.99, 0.999))
    uniq, counts = np.unique(key[sel], return_counts=True)
    want_n = dict(zip(uniq.tolist(), counts.tolist(), strict=True))
    rows = [r for r in got if int(r["hour"].timestamp()) * 10**9 // HOUR_NS >= cut_hour]
    assert len(rows) == len(want_n) == 4 * (len(set((hour[sel]).tolist())))
    for r in rows:
        k = int(r["hour"].timestamp()) * 10**9 // HOUR_NS * 10 + int(r["job"].split("-")[1])
        assert r["probes"] == want_n[k]
        assert [r["p50_ns"], r["p99_ns"], r["p999_ns"]] == want_q[k]


def test_loss_heatmap(month):
    p, fab = month["p"], month["fab"]
    got = _run(month, "loss_heatmap", since="31d")
    tor = np.array([int(t[1:]) for t in fab.tors])
    key = tor[p.src] * 100 + tor[p.dst]
    n = np.bincount(key, minlength=10_000)
    t = np.bincount(key[p.timeout], minlength=10_000)
    assert len(got) == int((n > 0).sum()) == 100  # every ordered pair, ToR-mesh on the diagonal
    for r in got:
        k = int(r["prober_tor"][1:]) * 100 + int(r["responder_tor"][1:])
        assert (r["probes"], r["timeouts"]) == (n[k], t[k])
        assert r["loss"] == pytest.approx(t[k] / n[k], abs=1e-6)
    worst = max(got, key=lambda r: r["loss"])
    assert (worst["prober_tor"], worst["responder_tor"]) == ("T01", "T03")  # the injected lossy pair


def test_rnic_history(month):
    rnic = month["fab"].rnics[3]
    got = _run(month, "rnic_history", since="31d", rnic=rnic)
    latest = {}
    for vid, decision, _dt in sorted(month["feedback"], key=lambda f: f[2]):
        latest[vid] = decision
    want = sorted((v for v in _live(month, 31 * 86400)
                   if v["location"] == rnic or rnic in v["location"].split("->")),
                  key=lambda v: (-v["window_start_ns"], v["verdict_id"]))
    assert any("->" in v["location"] for v in want) and any(v["location"] == rnic for v in want)
    assert [(r["verdict_id"], r["kind"], r["impact"], r["feedback"]) for r in got] == [
        (v["verdict_id"], v["kind"], v["impact"], latest.get(v["verdict_id"], "")) for v in want]


def test_job_timeline(month):
    got = _run(month, "job_timeline", since="31d", job="job-0")
    want = sorted((v for v in _live(month, 31 * 86400) if v["job_id"] == "job-0"),
                  key=lambda v: (v["window_start_ns"], v["impact"], v["location"]))
    assert [(r["verdict_id"], r["impact"], r["kind"]) for r in got] == [
        (v["verdict_id"], v["impact"], v["kind"]) for v in want]
    assert {r["impact"] for r in got} == {"P0", "P1", "P2"}
    assert any(r["verdict_id"].endswith("-r") for r in got)  # the revision, not the revised verdict


def test_precision_from_operator_feedback(month):
    got = {r["kind"]: r for r in _run(month, "precision", since="31d")}
    latest: dict[str, str] = {}
    for vid, decision, _ in sorted(month["feedback"], key=lambda f: f[2]):
        latest[vid] = decision
    for kind in KINDS:
        vs = [v for v in _live(month, 31 * 86400) if v["kind"] == kind]
        c = sum(latest.get(v["verdict_id"]) == "confirm" for v in vs)
        r = sum(latest.get(v["verdict_id"]) == "reject" for v in vs)
        assert (got[kind]["verdicts"], got[kind]["confirmed"], got[kind]["rejected"]) == (len(vs), c, r)
        assert got[kind]["unreviewed"] == len(vs) - c - r
        assert got[kind]["precision"] == pytest.approx(c / (c + r), abs=1e-4)


def test_jobs_hit_joins_verdicts_to_jobs_by_id_and_by_placement(month):
    fab, now_s = month["fab"], month["now_s"]
    day_ago = (now_s - 86400) * 10**9
    ended, began = (now_s - 43200) * 10**9, (now_s - 2 * 86400) * 10**9
    jobs = [  # (job_id, hosts, rnics, start_ns, end_ns)
        ("4242", [], list(fab.rnics[:7]), began, None),    # holds every RNIC the rnic verdicts name
        ("job-1", [], [], began, None),                     # named by the verdicts' job_id
        ("77", list(fab.hosts[:6]), [], began, ended),      # every host verdict's host, but ended 12 h ago
        ("78", list(fab.hosts[:6]), [], ended, None),       # the same hosts, started 12 h ago
    ]
    strs = pa.list_(pa.string())
    month["store"].insert_arrow("jobs", pa.table({
        "job_id": [j[0] for j in jobs], "parent_id": [j[0] for j in jobs], "name": ["n"] * 4, "user": ["u"] * 4,
        "partition": ["p"] * 4, "state": ["RUNNING", "RUNNING", "COMPLETED", "RUNNING"],
        "nodes": pa.array([[]] * 4, strs), "hosts": pa.array([j[1] for j in jobs], strs),
        "rnics": pa.array([j[2] for j in jobs], strs), "unmapped": pa.array([[]] * 4, strs),
        "submit_ns": [j[3] for j in jobs], "start_ns": [j[3] for j in jobs],
        "end_ns": pa.array([j[4] for j in jobs], pa.int64()), "source": ["slurm"] * 4,
        "observed_ns": [time.time_ns()] * 4}))
    revised = {v["revision_of"] for v in month["verdicts"] if v["revision_of"]}
    live = [v for v in month["verdicts"] if v["verdict_id"] not in revised and v["impact"] in ("P0", "P1")
            and v["window_start_ns"] >= day_ago]
    want = {}
    for jid, hosts, rnics, start, end in jobs:
        hit = [v for v in live if (v["job_id"] == jid or v["location"] in rnics or v["location"] in hosts)
               and v["window_end_ns"] > start and (end is None or v["window_start_ns"] < end)]
        if hit:
            want[jid] = (min(v["impact"] for v in hit), len(hit))
    assert set(want) == {"4242", "job-1", "77", "78"}  # the case is not empty
    assert want["77"][1] + want["78"][1] == sum(1 for v in live if v["location"] in fab.hosts[:6])
    rows = _run(month, "jobs_hit", since="86400")
    assert {r["job_id"]: (r["worst_impact"], r["verdicts"]) for r in rows} == want


def test_node_actions_newest_first(month):
    now = time.time_ns()
    rows = [{"action_id": f"a{i}", "at_ns": now - i * 3600 * 10**9, "action": a, "node": n, "host": n,
             "verdict_id": f"v{i}", "kind": "rnic", "location": "X", "reason": "", "why": "w", "outcome": o,
             "dry_run": o == "dry-run"}
            for i, (a, n, o) in enumerate([("resume", "H1", "done"), ("drain", "H1", "done"),
                                           ("refused", "H4", "refused"), ("drain", "H9", "dry-run")])]
    rows[-1]["at_ns"] = now - 9 * 86400 * 10**9  # older than the default week
    month["store"].insert_arrow("node_actions", pa.Table.from_pylist(rows))
    got = _run(month, "node_actions")
    assert [(r["action"], r["node"], r["outcome"]) for r in got] == [
        ("resume", "H1", "done"), ("drain", "H1", "done"), ("refused", "H4", "refused")]


def test_every_saved_query_is_covered(month):
    tested = set(month.get("ms", {}))
    assert set(names()) <= tested, set(names()) - tested
    print("\nquery ms:", month["ms"])


def test_report_csv_matches_sql_and_pngs_are_written(month, tmp_path):
    from fabricscope.report_tail_rtt import tail_rtt_report

    store = month["store"]
    store.command("SYSTEM STOP TTL MERGES probes")  # raw rows past 14 days must not vanish between two reads
    out = tmp_path / "report"
    result = tail_rtt_report(store.query_arrow, "31d", out)
    for csv_name, query in (("rtt_pinglist_hourly.csv", "rtt_pinglist_hourly"), ("tor_heatmap.csv", "loss_heatmap"),
                            ("rtt_service_hourly.csv", "rtt_service_hourly")):
        from_csv = pacsv.read_csv(out / csv_name).to_pylist()
        from_sql = store.query_arrow(render_named(query, {"since": "31d"})).to_pylist()
        assert len(from_csv) == len(from_sql) > 0
        for a, b in zip(from_csv, from_sql, strict=True):
            assert {k: v for k, v in a.items() if k != "hour"} == {k: v for k, v in b.items() if k != "hour"}
            if "hour" in a:
                assert a["hour"].timestamp() == b["hour"].timestamp()
    for png in ("tail_rtt_by_pinglist.png", "tail_rtt_by_service.png", "tor_heatmap.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    assert {r["pinglist"] for r in result["summary"].to_pylist()} == {"tor_mesh", "inter_tor", "service"}
    keep = REPO / "var" / "report-test"
    keep.mkdir(parents=True, exist_ok=True)
    for png in out.glob("*.png"):
        (keep / png.name).write_bytes(png.read_bytes())


def test_cli_saved_query_and_feedback_on_the_closed_store(month, tmp_path):
    """`fabricscope query NAME` and `fabricscope verdict confirm` as a user runs them."""
    store = month["store"]
    vid = month["verdicts"][1]["verdict_id"]
    store.close()
    month["store"] = None  # the CLI processes open it now; it is the module's last test
    env = {"FABRICSCOPE_VAR": str(month["path"].parent), "PATH": "/usr/bin:/bin"}
    exe = [sys.executable, "-m", "fabricscope"]
    r = subprocess.run([*exe, "verdict", "reject", vid, "--note", "cable fine"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*exe, "query", "rnic_history", "-p", f"rnic={month['verdicts'][1]['location']}",
                        "--since", "31d", "--csv"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = pacsv.read_csv(pa.py_buffer(r.stdout.encode())).to_pylist()
    assert {"verdict_id": vid, "feedback": "reject"} in [{"verdict_id": x["verdict_id"], "feedback": x["feedback"]}
                                                          for x in rows]
    r = subprocess.run([*exe, "verdict", "confirm", "nope"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "no verdict 'nope'" in r.stderr
