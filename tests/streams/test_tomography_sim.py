"""The analyzer over the seeded Clos simulator (``producers/sim``): Panel 1 faults, random Clos
fabrics with random faulted links, and confidence calibration."""

from __future__ import annotations

import random

import pytest

sim = pytest.importorskip("producers.sim")
from analyzer_sim import T0, S, right, run  # noqa: E402

from producers.sim.fabrics import panel1, random_clos  # noqa: E402

PANEL1_FAULTS = [
    (sim.LinkDown(a="A", b="S3"), ("switch", "A->S3")),
    (sim.RnicDown(rnic="A3"), ("rnic", "A3")),
    (sim.BusyHost(host="H1"), ("busy_host", "H1")),
    (sim.HostDown(host="H3"), ("host_down", "H3")),
    # a tail is judged against the flow's own history: two healthy windows before the fault
    (sim.LatencyLink(a="B", b="S2", start_ns=T0 + 40 * S), ("switch_latency", "B->S2")),
    (sim.LossyLink(a="C", b="S1", rate=0.05), ("switch", "C->S1")),
]


@pytest.mark.parametrize(("fault", "want"), PANEL1_FAULTS, ids=[f[1][0] for f in PANEL1_FAULTS])
def test_panel1_sim_fault_is_named_in_every_window(fault, want):
    start = fault.start_ns or T0
    r = run(panel1(), [fault], seconds=40 + (start - T0) // S, inter_tor="even")
    assert len(r.results) == 2 + (start - T0) // (20 * S)
    for ws, res in r.results:
        got = sorted({(v["kind"], v["location"]) for v in res.verdicts.to_pylist()})
        assert got == ([want] if ws >= start else [])


def test_panel1_sim_restart_is_stale_qpn_only():
    r = run(panel1(), [sim.HostRestart(host="H3", start_ns=T0 + 3 * S)], seconds=40, inter_tor="even")
    kinds = {(v["kind"], v["location"]) for v in r.verdicts()}
    assert kinds == {("stale_qpn", "B1"), ("stale_qpn", "B2")}


def _fabric_links(inv) -> list[tuple[str, str]]:
    return sorted((a, b) for a, b in inv.cables() if a not in inv.rnics and b not in inv.rnics)


@pytest.mark.parametrize("seed", range(4))
def test_random_clos_dead_links_are_named_exactly(seed):
    rng = random.Random(seed)
    inv = random_clos(seed, rng.randint(3, 5), rng.randint(2, 4), rng.randint(1, 2), rng.randint(1, 2))
    links = rng.sample(_fabric_links(inv), 1 + seed % 2)
    faults = [sim.LinkDown(a=a, b=b) for a, b in links]
    r = run(inv, faults, seconds=20, seed=seed)
    truth = {(t["kind"], t["location"]) for t in r.sim.truth()}
    got = {(v["kind"], v["location"]) for v in r.verdicts()}
    assert got == truth


def _scenario(seed: int):
    """A random fabric (two- or three-tier) with one or two random faults."""
    rng = random.Random(100 + seed)
    if seed % 4 == 3:
        inv = random_clos(seed, 6, 2, 1, 2, n_pods=2, n_cores=4)
    else:
        inv = random_clos(seed, rng.randint(3, 6), rng.randint(2, 4), rng.randint(1, 2), 2)
    (a, b), (c, d) = rng.sample(_fabric_links(inv), 2)
    rn = rng.choice(sorted(inv.rnics))
    host = rng.choice(sorted(inv.hosts))
    first = [
        sim.LinkDown(a=a, b=b),
        sim.LossyLink(a=a, b=b, rate=rng.choice([0.01, 0.05, 0.3])),
        sim.RnicDown(rnic=rn),
        sim.LatencyLink(a=a, b=b),
        sim.PartialTupleLoss(a=a, b=b),
        sim.BusyHost(host=host),
    ][seed % 6]
    second = [sim.LinkDown(a=c, b=d), sim.LossyLink(a=c, b=d, rate=0.2), None][seed % 3]
    return inv, [f for f in (first, second) if f is not None]


def test_confidence_is_calibrated_on_the_simulator():
    hits, total, named, faults_n = 0, 0, 0, 0
    for seed in range(18):
        inv, faults = _scenario(seed)
        r = run(inv, faults, seconds=20, seed=seed, background_loss=1e-4 if seed % 2 else 0.0)
        truth = r.sim.truth()
        faults_n += len(truth)
        hosts = {x: inv.host_of(x) for x in inv.rnics}
        for v in r.verdicts():
            ok = right(v, truth, hosts)
            named += ok
            if v["confidence"] >= 0.9:
                total += 1
                hits += ok
            if v["kind"] == "undetermined":
                assert v["confidence"] == 0.0
    assert total >= 8
    assert hits / total >= 0.9
    assert named >= faults_n // 2


def test_a_switch_claim_lists_the_failing_paths_it_stands_on():
    """A-S3 dead on Panel 1: the claim's evidence lists failing probe groups, each crossing A-S3 one way or
    the other (forward or ACK path), most failures first, six at most."""
    import json

    r = run(panel1(), [sim.LinkDown(a="A", b="S3")], seconds=40, inter_tor="even")
    claims = [v for _, res in r.results for v in res.verdicts.to_pylist() if v["kind"] == "switch"]
    assert [v["location"] for v in claims] == ["A->S3", "A->S3"]
    for v in claims:
        paths = json.loads(v["evidence"])["failing_paths"]
        assert 0 < len(paths) <= 6
        assert all(",A,S3," in f"{p['fwd']},{p['rev']}" or ",S3,A," in f"{p['fwd']},{p['rev']}" for p in paths)
        assert [p["failed"] for p in paths] == sorted((p["failed"] for p in paths), reverse=True)
