"""Event-time windows and the watermark (R-Pingmesh §5 20 s period)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from analyzer_fabric import Faults, S, last_uploads, panel1, window

from streams.pingmesh.windows import WINDOW_NS, WatermarkTracker, split_by_window, window_start, window_starts

START = 1_000 * 20 * S


def _batch(agent: str, upload_s: float, t1_s: list[float]):
    probes, _, _ = window(panel1(), Faults(), start_ns=START)
    t = probes.slice(0, len(t1_s))
    cols = {n: t[n] for n in t.column_names}
    cols["agent_id"] = pa.array([agent] * len(t1_s))
    cols["prober_host"] = pa.array([agent] * len(t1_s))
    cols["upload_ns"] = pa.array([int(upload_s * S)] * len(t1_s), pa.int64())
    cols["t1"] = pa.array([int(x * S) for x in t1_s], pa.int64())
    return pa.table(cols)


def test_windows_are_20_s_aligned_to_the_epoch_by_t1():
    assert WINDOW_NS == 20 * S
    assert window_start(45 * S) == 40 * S
    assert window_start(40 * S) == 40 * S
    b = _batch("H1", 61, [39.9, 40.0, 59.999, 60.0])
    assert window_starts(b).tolist() == [20 * S, 40 * S, 40 * S, 60 * S]
    parts = split_by_window(b)
    assert sorted(parts) == [20 * S, 40 * S, 60 * S]
    assert parts[40 * S].num_rows == 2


def test_window_closes_when_every_live_agent_uploaded_past_its_end():
    tr = WatermarkTracker()
    tr.observe(_batch("H1", 45, [41, 44]))
    tr.observe(_batch("H2", 45, [42]))
    assert tr.close_ready() == []
    tr.observe(_batch("H1", 60, [55]))
    assert tr.close_ready() == []  # H2 has not uploaded past 60 s yet
    tr.observe(_batch("H2", 61, [59]))
    assert tr.close_ready() == [40 * S]


def test_window_closes_on_grace_when_an_agent_lags():
    tr = WatermarkTracker()
    tr.observe(_batch("H1", 45, [41]))
    tr.observe(_batch("H2", 50, [46]))
    tr.heartbeat("H1", 69 * S, "H1")
    assert tr.close_ready() == []  # H2 at 50 s, newest 69 s: 69 - 10 < 60
    tr.heartbeat("H1", 70 * S, "H1")
    assert tr.close_ready() == [40 * S]


def test_silent_agent_is_not_waited_for():
    tr = WatermarkTracker(grace_ns=100 * S)
    tr.observe(_batch("H1", 45, [41]))
    tr.observe(_batch("H2", 41, [40.5]))
    tr.heartbeat("H1", 61 * S, "H1")
    assert tr.live_agents() == ["H1", "H2"]
    assert tr.close_ready() == []
    tr.heartbeat("H1", 62 * S, "H1")  # H2 silent 21 s: not live any more
    assert tr.live_agents() == ["H1"]
    assert tr.close_ready() == [40 * S]


def test_late_rows_are_counted_and_returned_not_dropped():
    tr = WatermarkTracker()
    tr.observe(_batch("H1", 45, [41]))
    tr.heartbeat("H1", 75 * S, "H1")
    assert tr.close_ready() == [40 * S]
    r = tr.observe(_batch("H2", 76, [44, 59, 61]))
    assert r.late_rows == 2 and r.late is not None and r.late.num_rows == 2
    assert list(r.on_time) == [60 * S]
    assert tr.late_batches == 1 and tr.late_rows == 2


def test_watermark_never_reads_the_wall_clock():
    # the same uploads give the same closes whatever the current time: a year-2000 stream closes too
    tr = WatermarkTracker()
    tr.observe(_batch("H1", 946_684_805, [946_684_801]))
    tr.heartbeat("H1", 946_684_835 * S, "H1")
    assert tr.close_ready() == [window_start(946_684_801 * S)]


def test_host_last_upload_feeds_host_down():
    probes, _, _ = window(panel1(), Faults(silent_hosts={"H3"}), start_ns=START)
    tr = WatermarkTracker()
    tr.observe(probes)
    assert "H3" not in tr.host_last_upload
    assert max(tr.host_last_upload.values()) == START + 20 * S
    assert set(last_uploads(panel1(), None, START)) >= set(tr.host_last_upload)
    assert np.all(np.array(list(tr.host_last_upload.values())) <= START + 20 * S)


def _watermark_by_scan(tr: WatermarkTracker) -> int | None:
    """The watermark's definition, one pass over every agent (what the tracker computed before it kept a heap)."""
    if not tr.last_upload:
        return None
    newest = max(tr.last_upload.values())
    oldest_live = min(t for t in tr.last_upload.values() if newest - t <= tr.liveness_ns)
    return max(oldest_live, newest - tr.grace_ns)


def test_incremental_watermark_equals_a_scan_over_every_agent_after_each_upload():
    # 200 agents uploading every ~5 s with jitter, some lagging, some dying and coming back, some
    # out-of-order (older) uploads: after every single upload the heap's answer is the scan's
    rng = np.random.default_rng(7)
    tr = WatermarkTracker()
    clock = {f"a{i}": START + int(rng.integers(0, 5 * S)) for i in range(200)}
    dead_until: dict[str, int] = {}
    checked = 0
    for _ in range(6_000):
        a = f"a{int(rng.integers(0, 200))}"
        step = int(rng.integers(1 * S, 9 * S))
        if rng.random() < 0.01:  # silent for 25-60 s (past the liveness time), then back
            dead_until[a] = clock[a] + int(rng.integers(25 * S, 60 * S))
        clock[a] += step
        if clock[a] < dead_until.get(a, 0):
            continue
        t = clock[a] - (int(rng.integers(0, 12 * S)) if rng.random() < 0.05 else 0)  # a stale upload
        tr.heartbeat(a, t, f"h{a}")
        assert tr.watermark() == _watermark_by_scan(tr)
        assert tr.newest() == max(tr.last_upload.values())
        checked += 1
    assert checked > 4_000
    assert len(tr._heap) <= 2 * len(tr.last_upload) + 64  # stale entries are compacted away


def test_watermark_of_a_tracker_built_from_saved_upload_times():
    tr = WatermarkTracker(last_upload={"H1": 45 * S, "H2": 61 * S, "H3": 30 * S})
    assert tr.newest() == 61 * S
    assert tr.watermark() == 51 * S  # H3 is 31 s behind (not live); H1 at 45 s; grace gives 61 - 10 = 51
    tr.heartbeat("H1", 70 * S)
    assert tr.watermark() == 61 * S  # H1 at 70 s: H2 at 61 s is now the oldest live
