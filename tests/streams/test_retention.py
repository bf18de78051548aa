"""Raw retention: ``anomalies`` keeps every timeout, service probe and probe over its flow's baseline plus a
seeded 1 % sample; the minute tier still counts every probe."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from schemas.arrow_pa import table_from_columns
from schemas.probe_rows.decompose import decompose
from schemas.probe_rows.retention import RetentionPolicy, over_baseline, retained, sampled

from probe_rows import columns, probe_row


def retention_rows():
    t1 = 1_800_000_000 * 10**9
    rows = [probe_row(i, t1=t1 + i, t2=1_000, t3=100, t4=300, t5=1_000 + 5_000 + 200 + 10 * i, t6=t1 + i + 9_000,
                      agent="H1") for i in range(6)]
    rows[1]["status"] = "timeout"
    for k in ("t2", "t3", "t4", "t5", "t6"):
        rows[1][k] = None
    rows[2]["pinglist"], rows[2]["job_id"] = "service", "job-a"
    return rows


def test_anomalies_keeps_timeouts_service_and_over_baseline_rows():
    t = decompose(table_from_columns("probe.v1", columns(retention_rows())), "probes.raw/0/1")
    rtt = t["network_rtt_ns"].to_pylist()  # 5000 + 10 i
    flow = [f"{p}|{a}|{b}|{s}" for p, a, b, s in zip(t["pinglist"].to_pylist(), t["prober_rnic"].to_pylist(),
                                                      t["responder_rnic"].to_pylist(), t["src_port"].to_pylist(),
                                                      strict=True)]
    # row 4's flow has a baseline under its RTT; row 5's flow a baseline over it; others none
    base = pa.table({"flow": [flow[4], flow[5]], "baseline_ns": [rtt[4] - 1.0, rtt[5] + 1.0]})
    assert list(over_baseline(t, base)) == [False, False, False, False, True, False]
    kept = retained(t, RetentionPolicy("anomalies", sample=0.0), base)
    assert kept["seq"].to_pylist() == [1, 2, 4]
    assert retained(t, RetentionPolicy("full"), base).num_rows == 6
    assert retained(t, RetentionPolicy("anomalies", sample=1.0), base).num_rows == 6


def test_the_sample_is_uniform_seeded_and_a_function_of_the_row():
    n = 200_000
    agents = pa.array(np.where(np.arange(n) % 2, "H1", "H2"))
    seqs = pa.array(np.arange(n, dtype=np.uint64))
    a = sampled(agents, seqs, 0.01, seed=0)
    assert abs(a.mean() - 0.01) < 4 * np.sqrt(0.01 * 0.99 / n)  # 4 sigma
    assert np.array_equal(a, sampled(agents, seqs, 0.01, seed=0))
    assert np.array_equal(a[1000:2000], sampled(agents[1000:2000], seqs[1000:2000], 0.01, seed=0))  # per row
    assert not np.array_equal(a, sampled(agents, seqs, 0.01, seed=1))


def test_bad_policy_is_named():
    with pytest.raises(ValueError, match="'some' is not one of full, anomalies"):
        RetentionPolicy("some")
    with pytest.raises(ValueError, match="sample 2.0 is not a fraction"):
        RetentionPolicy("anomalies", sample=2.0)


def test_the_policy_comes_from_the_environment_and_names_a_bad_variable():
    p = RetentionPolicy.from_environ({"FABRICSCOPE_RAW_RETENTION": "anomalies", "FABRICSCOPE_RAW_SAMPLE": "0.05",
                                      "FABRICSCOPE_RAW_SAMPLE_SEED": "3"})
    assert p == RetentionPolicy("anomalies", 0.05, 3)
    assert RetentionPolicy.from_environ({}) == RetentionPolicy()
    with pytest.raises(ValueError, match="FABRICSCOPE_RAW_SAMPLE='lots' is not a number"):
        RetentionPolicy.from_environ({"FABRICSCOPE_RAW_SAMPLE": "lots"})
