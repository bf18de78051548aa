"""The baseline a busy host is judged against when it has none of its own (busy since before one was learned)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from streams.pingmesh.busy_host import busy_by_delay, fleet_baseline, host_delay_p50
from streams.pingmesh.triage_config import TriageConfig

HEALTHY, BUSY = 96, 158  # histogram buckets: 2^(96.5/8) = 4,277 ns and 2^(158.5/8) = 920,782 ns
HOSTS = {"H1": HEALTHY, "H2": HEALTHY, "H3": BUSY, "H4": HEALTHY, "H5": BUSY, "H6": BUSY}


def delays(buckets: dict[str, int]) -> pa.Table:
    """One responder delay row per host (slot 0, 100 probes), all in one bucket."""
    hs = sorted(buckets)
    return pa.table({"host": pa.array(hs, pa.string()), "role": ["responder"] * len(hs), "slot": [0] * len(hs),
                     "bucket": pa.array([buckets[h] for h in hs], pa.int64()), "n": [100] * len(hs)})


def test_delay_of_the_buckets_is_as_computed_by_hand():
    p50 = host_delay_p50(delays(HOSTS))
    assert p50[("H1", "responder")] == pytest.approx(4277.35, abs=0.01)
    assert p50[("H5", "responder")] == pytest.approx(920781.9, abs=0.1)


def test_without_learned_baselines_the_fleet_baseline_is_the_window_median():
    p50 = host_delay_p50(delays(HOSTS))
    # three at 4,277 ns, three at 920,782 ns: the median is their mean, 462,530 ns
    assert fleet_baseline(p50, {}) == {"responder": pytest.approx(462529.6, abs=0.1)}


def test_learned_baselines_make_the_fleet_baseline_not_the_window():
    p50 = host_delay_p50(delays(HOSTS))
    learned = {("H1", "responder"): 4000.0, ("H2", "responder"): 5000.0, ("H4", "responder"): 6000.0,
               ("H1", "prober"): 7000.0}
    assert fleet_baseline(p50, learned) == {"responder": 5000.0, "prober": 7000.0}


def test_a_host_busy_before_its_baseline_was_learned_is_busy_beside_two_other_busy_hosts():
    # Panel 1 with H3, H5, H6 busy (seed 1317, scenario 145): H5 was busy from the start, so it has no
    # baseline of its own; the others were learned healthy at 4,000 ns. Against the window's median
    # (462,530 ns) H5's 920,782 ns is 2x, not 10x; against the learned ones' (4,000 ns) it is 230x.
    table = delays(HOSTS)
    learned = {(h, "responder"): 4000.0 for h in ("H1", "H2", "H3", "H4", "H6")}
    busy = busy_by_delay(table, learned, set(), TriageConfig())
    assert [(b.host, b.baseline_ns) for b in busy] == [("H3", 4000.0), ("H5", 4000.0), ("H6", 4000.0)]
    # nothing learned yet (the first window): the window's median, and no host is 10x over it
    assert busy_by_delay(table, {}, set(), TriageConfig()) == []
