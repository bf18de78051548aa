"""`fabricscope bench scale` plumbing on a tiny fabric through the real broker, workers, reducer and store
writer: every probe row produced is stored and counted in the minute tier, each window's summary and
verdict are timed, and `--json` prints one object with the figures the benchmark promises."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from bench import scale as bench_scale

pytestmark = pytest.mark.kafka


def test_rates_follow_the_paper_scaled_by_rate() -> None:
    sim = bench_scale.build_simulator(128, rate=0.5)
    lists = sim.pinglists(0)
    per_rnic = sum(e["rate_pps"] for es in lists.values() for e in es) / len(sim.inv.rnics)
    assert per_rnic == pytest.approx(75.0)  # 0.5 x 150 probes/s
    assert {name for name, es in lists.items() if es} == {"tor_mesh", "inter_tor", "service"}
    assert len(lists["service"]) == 128  # one job connection per RNIC


def test_tiny_fabric_through_the_pipeline(kafka_bootstrap: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fabricscope", "bench", "scale", "--rnics", "64", "--windows", "1", "--rate", "0.1",
         "--workers", "1", "--timeout", "150", "--json"],
        capture_output=True, text=True, timeout=240, env={**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("rows_produced", "rows_stored", "rows_s", "lag", "window_figures", "verdict_latency_p50_s",
                "verdict_latency_p99_s", "reduce_ms_max", "reducer_rss_mib_max", "cpu_us_per_row",
                "cores_for_1_5m_rows_s", "peak_rss_mib", "load_avg"):
        assert key in r, key
    # 64 RNICs x 15 probes/s x 20 s, every probe stored once and counted once in the minute tier
    assert r["rows_produced"] == pytest.approx(64 * 15 * 20, rel=0.01)
    assert r["complete"] is True
    assert r["rows_stored"] == r["rows_produced"] == r["minute_tier_probes"]
    assert set(r["cpu_us_per_row"]) == {"worker", "reducer", "store_writer", "broker"}
    assert set(r["peak_rss_mib"]) == {"sink", "worker0", "reducer"}  # the reducer in a process of its own
    assert r["lag"] and {"t_s", "rows_stored"} <= r["lag"][0].keys()
    # the one whole window: the dead uplink's switch verdict, timed from the watermark to the store
    whole = [w for w in r["window_figures"] if w["verdicts"]]
    assert len(whole) == 1 and whole[0]["timeouts"] > 0
    assert whole[0]["reduce_ms"] >= 0 and whole[0]["verdict_latency_s"] >= whole[0]["reduce_ms"] / 1000
    # the legs add up: close, then to the broker, then to the store
    legs = whole[0]["reduce_ms"] / 1000 + whole[0]["send_ms"] / 1000 + whole[0]["store_s"]
    assert legs == pytest.approx(whole[0]["verdict_latency_s"], abs=0.01)
    assert r["verdict_latency_p99_s"] == pytest.approx(whole[0]["verdict_latency_s"], abs=1e-3)
    assert not math.isnan(r["cores_for_1_5m_rows_s"]) and r["cores_for_1_5m_rows_s"] > 0


def test_startup_profile_loads_the_same_index_per_message_and_coalesced(kafka_bootstrap: str) -> None:
    p = bench_scale.profile_startup(kafka_bootstrap, rnics=64, rate=0.1, rounds=2, modes=(0, 400, 200_000))
    per_message, small, whole = p.loads
    assert p.rnics == 64 and p.probe_rows > 0
    # 8 agents (hosts) x 2 rounds; an upload carries a paths message only when it probed a tuple it had not
    # traced yet, so the second round of an agent may have none: how many depends on the round's start time
    n = per_message.messages
    assert n == small.messages == whole.messages == per_message.apply_calls and 8 < n <= 16
    assert whole.apply_calls == 1  # every path row of the fabric in one update
    assert math.ceil(p.path_rows / 400) <= small.apply_calls < n  # a few messages per update of <= 400 rows
    assert per_message.entries == small.entries == whole.entries > 0
    assert f"{n} messages in 1 index updates" in bench_scale.startup_report(p)


def test_longest_stall_after_a_restart_by_hand() -> None:
    samples = [(0.0, {0: (2, 10), 1: (5, 10)}), (5.0, {0: (4, 10), 1: (5, 10)}), (10.0, {0: (4, 10), 1: (5, 10)}),
               (12.0, {0: (10, 10), 1: (5, 10)}), (20.0, {0: (10, 10), 1: (7, 10)}), (21.0, {0: (10, 10), 1: (10, 10)})]
    # partition 0 commits at 5 (2 -> 4) and 12 (done): stalls of 4 and 7 s; partition 1 waits from 1 to 20
    assert bench_scale.longest_stall(samples, 1.0) == 19.0
    assert bench_scale.longest_stall(samples[:4], 1.0) == 11.0  # still waiting at the last sample
    assert bench_scale.longest_stall(samples, 12.0) == 8.0  # partition 0 done: only 1's wait from 12 to 20
    assert math.isnan(bench_scale.longest_stall(samples, 21.0))  # no sample after it
    assert math.isnan(bench_scale.longest_stall(samples, float("nan")))
    assert bench_scale.longest_stall([(0.0, {0: (3, 3)}), (1.0, {0: (3, 3)})], 0.0) == 0.0
