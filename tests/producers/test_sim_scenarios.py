"""Simulator scenarios, the Panel 1 job, and the encoded upload stream (producers/sim)."""

from __future__ import annotations

import pytest

from producers.sim import LinkDown, Simulator
from producers.sim.fabrics import panel1, random_clos
from producers.sim.scenarios import SCENARIOS, panel1_job_connections, scenario_faults
from producers.sim.stream import encoded_uploads
from schemas.scenarios import BY_NAME

T0 = 1_800_000_000_000_000_000
S = 1_000_000_000


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_has_its_truth_and_runs(name):
    inv = random_clos(3, n_tors=3, n_spines=4, hosts_per_tor=2, rnics_per_host=2)
    faults = scenario_faults(name, inv, seed=3, start_ns=T0)
    sim = Simulator(inv, seed=3, faults=faults)
    truth = sim.truth()
    if name == "healthy":
        assert truth == []
    else:
        assert [t["kind"] for t in truth] == [BY_NAME[name].verdict]
    batches = sim.upload_batches(T0)
    lost = sum(int((b[1]["status"] == "timeout").sum()) for b in batches)
    if name in ("healthy", "latency-link"):
        assert lost == 0
    elif name not in ("switch-link-lossy", "partial-5tuple", "host-restart"):
        assert lost > 0


def test_scenario_draw_depends_on_seed_and_names_are_checked():
    inv = panel1()
    drawn = {scenario_faults("switch-link-down", inv, seed=s)[0] for s in range(20)}
    assert len(drawn) > 3
    with pytest.raises(ValueError, match="choose one of"):
        scenario_faults("nope", inv, seed=1)


def test_panel1_job_flows_through_s3_and_s1_and_fails_with_a_s3():
    probe = Simulator(panel1(), seed=1)
    conns = panel1_job_connections(probe)
    assert probe.path("A2", "B2", conns[0]["src_port"])[2] == "S3"
    assert probe.path("A1", "B1", conns[1]["src_port"])[2] == "S1"
    sim = Simulator(panel1(), seed=1, faults=[LinkDown("A", "S3")], inter_tor="even", connections=conns)
    rows = [b[1] for b in sim.upload_batches(T0)]
    svc = [
        (r["prober_rnic"][i], r["status"][i])
        for r in rows
        for i in range(len(r["seq"]))
        if r["pinglist"][i] == "service"
    ]
    assert {s for s in svc if s[0] == "A2"} == {("A2", "timeout")}
    assert {s for s in svc if s[0] == "A1"} == {("A1", "ok")}
    assert all(
        r["job_id"][i] == "job-h1h3" for r in rows for i in range(len(r["seq"])) if r["pinglist"][i] == "service"
    )


def test_encoded_uploads_decode_with_pyarrow_and_carry_registry_updates():
    pytest.importorskip("pyarrow")
    from producers.sim import HostRestart
    from schemas.codec import decode

    sim = Simulator(panel1(), seed=2, faults=[HostRestart("H5", start_ns=T0 + 1 * S, downtime_s=2.0)])
    out = list(encoded_uploads(sim, T0, n_batches=2))
    keys = [k for k, _, _ in out]
    assert keys[0] == "registry.v1"  # H5 is back with new QPNs at 3 s, inside the first batch
    reg = [(a, p) for k, a, p in out if k == "registry.v1"]
    assert len(reg) == 1
    key, table = decode(reg[0][1])
    assert key == "registry.v1" and sorted(table.column("rnic").to_pylist()) == ["C1", "C2"]
    assert table.column("qpn").to_pylist()[0] == sim.qpn_at(table.column("rnic").to_pylist()[0], T0 + 4 * S)
    probes = [decode(p)[1] for k, _, p in out if k == "probe.v1"]
    paths = [decode(p)[1] for k, _, p in out if k == "path.v1"]
    assert sum(t.num_rows for t in probes) > 400 and sum(t.num_rows for t in paths) > 50
