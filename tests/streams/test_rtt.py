"""RTT decomposition and row validation (R-Pingmesh §4.2.1), on hand-computed rows."""

from __future__ import annotations

from schemas.arrow_pa import table_from_columns
from schemas.probe_rows.decompose import decompose
from schemas.probe_rows.validate import split_probes

from probe_rows import columns, known_rows, probe_row


def test_decomposition_matches_hand_computed_values():
    rows, expected = known_rows()
    out = decompose(table_from_columns("probe.v1", columns(rows)), "probes.raw/0/7")
    got = {
        r["seq"]: (r["network_rtt_ns"], r["responder_delay_ns"], r["prober_delay_ns"]) for r in out.to_pylist()
    }
    assert got == expected
    assert set(out["batch_id"].to_pylist()) == {"probes.raw/0/7"}


def test_validation_names_each_bad_row_and_keeps_the_good_ones():
    rows, _ = known_rows()
    bad = [
        probe_row(20, t1=100, t2=5_000, t3=100, t4=200, t5=4_000, t6=9_000),  # negative t5-t2
        probe_row(21, t1=100, t2=5_000, t3=500, t4=100, t5=9_000, t6=9_000),  # negative t4-t3
        probe_row(22, t1=100, t2=0, t3=0, t4=10, t5=20_000_000_000, t6=20_000_000_100),  # clock jump
        probe_row(23, t1=100, t2=5_000, t3=None, t4=200, t5=9_000, t6=9_000),  # ok with a missing reading
        {**probe_row(24, t1=100, t2=1, t3=1, t4=2, t5=3, t6=200), "status": "lost"},
        probe_row(0, t1=100, t2=1, t3=1, t4=2, t5=3, t6=200),  # duplicate (agent, seq) of rows[0]
        probe_row(25, t1=100, t2=1, t3=1, t4=2, t5=3, t6=200, dst="Z9"),  # unknown RNIC
    ]
    split = split_probes(table_from_columns("probe.v1", columns(rows + bad)), known_rnics={"A1", "A2"})
    assert split.good["seq"].to_pylist() == [0, 1, 2]
    assert split.bad_index == [3, 4, 5, 6, 7, 8, 9]
    assert split.reasons == [
        "negative t5-t2 on the prober RNIC clock",
        "negative t4-t3 on the responder RNIC clock",
        "t5-t2 over 10000000000 ns on the prober RNIC clock (clock jump or counter wrap)",
        "status ok but t3 is null",
        "status is not one of ('ok', 'timeout')",
        "duplicate (agent_id, seq) in the batch",
        "unknown RNIC 'Z9' in responder_rnic (not in the registry)",
    ]
