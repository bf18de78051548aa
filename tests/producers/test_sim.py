"""The Clos-fabric simulator (producers/sim): ECMP, the Panel 1 numbers, faults, output schemas."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from producers.sim import (
    BusyHost,
    FlappingLink,
    HostDown,
    HostRestart,
    LatencyLink,
    LinkDown,
    LossyLink,
    PartialTupleLoss,
    RnicDown,
    Simulator,
    to_pylists,
)
from producers.sim.fabrics import panel1, random_clos

T0 = 1_800_000_000_000_000_000  # an epoch-aligned start, ns
S = 1_000_000_000


def _concat(batches, which=1):
    keys = batches[0][which].keys()
    out = {}
    for k in keys:
        parts = [b[which][k] for b in batches]
        out[k] = np.ma.concatenate(parts) if isinstance(parts[0], np.ma.MaskedArray) else np.concatenate(parts)
    return out


def _run(sim, seconds=20, t0=T0):
    batches = []
    for i in range(seconds // 5):
        batches += sim.upload_batches(t0 + i * 5 * S)
    return _concat(batches, 1), _concat(batches, 2), batches


def _links(hops: str) -> set[frozenset]:
    h = hops.split(",")
    return {frozenset(p) for p in zip(h, h[1:], strict=False)}


def _rtt(p):
    ok = p["status"] == "ok"
    t = {k: p[k][ok].data.astype(np.int64) for k in ("t1", "t2", "t3", "t4", "t5", "t6")}
    net = (t["t5"] - t["t2"]) - (t["t4"] - t["t3"])
    resp = t["t4"] - t["t3"]
    prober = (t["t6"] - t["t1"]) - (t["t5"] - t["t2"])
    return ok, net, resp, prober


def test_panel1_dead_a_s3_fails_8_paths_4_on_s3_b_and_4_on_s3_c():
    sim = Simulator(panel1(), seed=3, faults=[LinkDown("A", "S3")], inter_tor="even")
    probes, paths, _ = _run(sim)
    inter = probes["pinglist"] == "inter_tor"
    # two tuples per switch for each of the 6 ordered ToR pairs
    assert (
        len(
            {
                (a, b, s)
                for a, b, s in zip(
                    probes["src_ip"][inter], probes["dst_ip"][inter], probes["src_port"][inter], strict=True
                )
            }
        )
        == 48
    )
    bad = inter & (probes["status"] == "timeout")
    failing = set(zip(probes["prober_rnic"][bad], probes["responder_rnic"][bad], probes["src_port"][bad], strict=True))
    assert len(failing) == 8
    # every probe of a failing tuple fails; no other probe fails (ToR-mesh is untouched)
    assert (probes["status"] == "timeout").sum() == bad.sum()
    on = Counter()
    for src, dst, port in failing:
        for ln in _links(",".join(sim.path(src, dst, port))):
            on[ln] += 1
    assert on[frozenset(("A", "S3"))] == 8
    assert on[frozenset(("S3", "B"))] == 4
    assert on[frozenset(("S3", "C"))] == 4
    assert on[frozenset(("A", "S1"))] == 0
    # traces stop at the dead hop: the forward trace of a failing tuple from A ends at A, one towards A
    # ends at S3 (the hop before the dead link), each marked incomplete; and so do the ACK paths
    for direction, (s_col, d_col) in (("forward", ("src_rnic", "dst_rnic")), ("reverse", ("dst_rnic", "src_rnic"))):
        sel = paths["direction"] == direction
        traced = {(s, d, p): (h, c) for s, d, p, h, c in zip(paths[s_col][sel], paths[d_col][sel],
                                                             paths["src_port"][sel], paths["hops"][sel],
                                                             paths["complete"][sel], strict=True)}
        for src, dst, port in failing:
            full = sim.path(src, dst, port) if direction == "forward" else \
                sim.topo.path(dst, src, port, 4791)
            cut = full.index("S3") if full[full.index("S3") - 1] == "A" else full.index("A")
            hops, complete = traced[(src, dst, port)]
            assert (hops.split(","), complete) == (full[:cut], False)
        ok_keys = set(traced) - failing
        assert all(traced[k][1] for k in ok_keys)
    assert sim.truth() == [
        {"kind": "switch", "location": "A->S3", "start_ns": None, "end_ns": None, "fault": "link_down"}
    ]


def test_ecmp_stickiness_and_independent_reverse_hash():
    inv = random_clos(5, n_tors=4, n_spines=8, hosts_per_tor=2, rnics_per_host=2)
    sim = Simulator(inv, seed=5)
    a = sim.path("A1", "B3", 50000)
    assert all(sim.path("A1", "B3", 50000) == a for _ in range(5))
    assert a[0] == "A1" and a[1] == "A" and a[-2] == "B" and a[-1] == "B3" and a[2].startswith("S")
    _, paths, batches = _run(sim, seconds=10)
    # the same tuple was traced in both batches with the same path
    fwd = paths["direction"] == "forward"
    seen: dict = {}
    for s, d, p, h in zip(
        paths["src_rnic"][fwd], paths["dst_rnic"][fwd], paths["src_port"][fwd], paths["hops"][fwd], strict=True
    ):
        assert seen.setdefault((s, d, p), h) == h
    # inter-ToR: forward and reverse spine differ for roughly 7 tuples in 8 (N = 8)
    inter = [(s, d, p) for (s, d, p), h in seen.items() if h.count(",") == 4]
    rev = {
        (d, s, p): h
        for s, d, p, h, dr in zip(
            paths["src_rnic"], paths["dst_rnic"], paths["src_port"], paths["hops"], paths["direction"], strict=True
        )
        if dr == "reverse"
    }
    differ = sum(seen[k].split(",")[2] != rev[k].split(",")[2] for k in inter)
    assert len(inter) > 40
    assert 0.6 < differ / len(inter) < 0.98
    # the spines are all used
    assert {seen[k].split(",")[2] for k in inter} == {f"S{i}" for i in range(1, 9)}


def test_healthy_panel1_timestamps_and_rates():
    sim = Simulator(panel1(), seed=1)
    probes, _, batches = _run(sim)
    assert (probes["status"] == "ok").all()
    assert [b[0] for b in batches[:6]] == [f"H{i}" for i in range(1, 7)]
    ok, net, resp, prober = _rtt(probes)
    tm = probes["pinglist"][ok] == "tor_mesh"
    assert 5_500 < np.median(net[tm]) < 9_000  # ToR-mesh network RTT ~7 µs
    assert 10_000 < np.median(net[~tm]) < 15_000  # inter-ToR ~12 µs
    assert 3_000 < np.median(resp) < 5_000
    assert 3_000 < np.median(prober) < 7_000
    assert (net > 0).all() and (resp > 0).all() and (prober > 0).all()
    t1 = probes["t1"].data
    assert (t1 >= T0 - 2_000_000).all() and (t1 < T0 + 20 * S + 2_000_000).all()
    # RNIC clocks are not the host clock: t2 - t1 is meaningless (minutes to days)
    assert np.abs(probes["t2"].data - t1).min() > 60 * S
    # ToR-mesh: 10 probes/s sent and received per RNIC -> 200 per 20 s window (Panel 1)
    to = Counter(probes["responder_rnic"][probes["pinglist"] == "tor_mesh"])
    assert all(abs(c - 200) <= 3 for c in to.values()) and len(to) == 12
    # seq is per agent and continues across batches
    h1 = probes["agent_id"] == "H1"
    assert (np.diff(probes["seq"][h1].astype(np.int64)) == 1).all()


def test_output_matches_schemas_for_pyarrow_and_nanoarrow():
    pa = pytest.importorskip("pyarrow")
    from schemas.arrow_nano import encode_columns
    from schemas.arrow_pa import table_from_columns
    from schemas.codec import decode

    sim = Simulator(panel1(), seed=2, faults=[RnicDown("A3")])
    agent, pc, qc = sim.upload_batches(T0)[1]
    t = table_from_columns("probe.v1", pc)
    assert t.num_rows == len(pc["seq"]) > 0
    assert t.column("t3").null_count == int((pc["status"] == "timeout").sum()) > 0
    key, back = decode(encode_columns("probe.v1", to_pylists(pc)))
    assert key == "probe.v1" and back.num_rows == t.num_rows
    assert back.column("t5").null_count == t.column("t5").null_count
    key, paths = decode(encode_columns("path.v1", to_pylists(qc)))
    assert key == "path.v1" and paths.num_rows == len(qc["hops"]) > 0
    assert isinstance(t.schema.field("src_port").type, pa.DataType)


def test_rnic_down_fails_every_probe_to_and_from_it():
    sim = Simulator(panel1(), seed=4, faults=[RnicDown("A3", start_ns=T0 + 5 * S)])
    probes, paths, _ = _run(sim)
    late = probes["t1"].data >= T0 + 5 * S + 2_000_000
    touches = (probes["prober_rnic"] == "A3") | (probes["responder_rnic"] == "A3")
    assert (probes["status"][late & touches] == "timeout").all()
    assert (probes["status"][late & ~touches] == "ok").all()
    assert (probes["status"][~late & (probes["t1"].data < T0 + 5 * S - 2_000_000)] == "ok").all()
    # A3 as prober cannot post: no t2; as responder t2 is present
    assert probes["t2"].mask[late & (probes["prober_rnic"] == "A3")].all()
    assert not probes["t2"].mask[late & (probes["responder_rnic"] == "A3")].any()
    assert sim.truth()[0]["kind"] == "rnic" and sim.truth()[0]["location"] == "A3"


def test_host_down_uploads_nothing_and_its_rnics_time_out():
    sim = Simulator(panel1(), seed=4, faults=[HostDown("H4")])
    probes, _, batches = _run(sim)
    assert "H4" not in {b[0] for b in batches}
    to_h4 = probes["responder_host"] == "H4"
    assert to_h4.sum() > 100 and (probes["status"][to_h4] == "timeout").all()
    assert (probes["status"][~to_h4] == "ok").all()


def test_host_restart_gives_stale_qpn_then_recovers():
    f = HostRestart("H3", start_ns=T0 + 2 * S, downtime_s=6.0, refresh_s=10.0)
    sim = Simulator(panel1(), seed=6, faults=[f])
    probes, _, batches = _run(sim, seconds=20)
    old, new = sim.qpn_at("B1", T0), sim.qpn_at("B1", T0 + 8 * S)
    assert old != new
    to_b1 = probes["responder_rnic"] == "B1"
    t1 = probes["t1"].data
    # back at 8 s with a new QPN; probers learn it at 18 s
    stale = to_b1 & (t1 > T0 + 8 * S + 2_000_000) & (t1 < T0 + 18 * S - 2_000_000)
    assert stale.sum() > 50
    assert (probes["qpn"][stale] == old).all() and (probes["status"][stale] == "timeout").all()
    after = to_b1 & (t1 > T0 + 18 * S + 2_000_000)
    assert (probes["qpn"][after] == new).all() and (probes["status"][after] == "ok").all()
    reg = sim.registry_columns(T0 + 9 * S)
    assert reg["qpn"][reg["rnic"].index("B1")] == new
    # silent at the 5 s upload (restarting), back for the 10 s one
    assert [b[0] for b in batches[:6]].count("H3") == 0
    assert "H3" in [b[0] for b in batches[5:11]]
    assert sim.truth()[0] == {
        "kind": "stale_qpn",
        "location": "H3",
        "start_ns": T0 + 2 * S,
        "end_ns": T0 + 18 * S,
        "fault": "host_restart",
    }


def test_busy_host_times_out_briefly_and_raises_host_delay_not_network_rtt():
    healthy, _, _ = _run(Simulator(panel1(), seed=8), seconds=20)
    busy, _, _ = _run(Simulator(panel1(), seed=8, faults=[BusyHost("H1")]), seconds=20)
    tm = busy["pinglist"] == "tor_mesh"
    to_a1 = tm & (busy["responder_rnic"] == "A1")
    frac = (busy["status"][to_a1] == "timeout").mean()
    assert 0.10 < frac < 0.4  # above the 10 % RNIC rule: the false reports the veto must catch
    # timeouts come together: both RNICs of H1 fail in the same stalls
    tt = busy["t1"].data[tm & (busy["status"] == "timeout")] // S
    lost = busy["status"] == "timeout"
    assert ((busy["responder_host"][lost] == "H1") | (busy["prober_host"][lost] == "H1")).all()
    assert len(set(tt)) < 20
    ok_h, net_h, resp_h, _ = _rtt(healthy)
    ok_b, net_b, resp_b, _ = _rtt(busy)
    on_h1_h = healthy["responder_host"][ok_h] == "H1"
    on_h1_b = busy["responder_host"][ok_b] == "H1"
    assert np.median(resp_b[on_h1_b]) > 10 * np.median(resp_h[on_h1_h])
    assert abs(np.median(net_b[on_h1_b]) / np.median(net_h[on_h1_h]) - 1) < 0.2


def test_latency_link_raises_tail_without_loss():
    sim = Simulator(panel1(), seed=9, faults=[LatencyLink("B", "S2", extra_us=300, prob=0.3)])
    probes, paths, _ = _run(sim)
    assert (probes["status"] == "ok").all()
    ok, net, _, _ = _run_rtt_by_link(sim, probes, paths, ("B", "S2"))
    assert np.percentile(net[ok], 99) > 200_000  # crossing: P99 in the hundreds of µs
    assert np.percentile(net[~ok], 99) < 30_000  # elsewhere: unchanged
    assert sim.truth()[0]["kind"] == "switch_latency" and sim.truth()[0]["location"] == "B->S2"


def _run_rtt_by_link(sim, probes, paths, link):
    """Split successful probes by whether their forward or reverse path crosses ``link``."""
    crossing = set()
    for s, d, p, h, dr in zip(
        paths["src_rnic"], paths["dst_rnic"], paths["src_port"], paths["hops"], paths["direction"], strict=True
    ):
        if frozenset(link) in _links(h):
            crossing.add((s, d, p) if dr == "forward" else (d, s, p))
    ok, net, resp, prober = _rtt(probes)
    keys = zip(probes["prober_rnic"][ok], probes["responder_rnic"][ok], probes["src_port"][ok], strict=True)
    on = np.array([k in crossing for k in keys])
    return on, net, resp, prober


def test_lossy_link_drops_about_its_rate_per_crossing():
    sim = Simulator(panel1(), seed=10, faults=[LossyLink("C", "S4", rate=0.2)], inter_tor="even")
    probes, paths, _ = _run(sim, seconds=20)
    lost = (probes["status"] == "timeout").mean()
    assert lost > 0
    inter = probes["pinglist"] == "inter_tor"
    # tuples through S4 involving C: 8 of 48, both directions cross C–S4 (1 - 0.8^2 = 0.36)
    frac = (probes["status"][inter] == "timeout").sum() / (inter.sum() * 8 / 48)
    assert 0.28 < frac < 0.44


def test_partial_5tuple_loss_fails_some_tuples_completely():
    sim = Simulator(panel1(), seed=11, faults=[PartialTupleLoss("A", "S1", fraction=0.5)], inter_tor="even")
    probes, _, _ = _run(sim)
    key = list(zip(probes["prober_rnic"], probes["responder_rnic"], probes["src_port"], strict=True))
    by: dict = {}
    for k, st in zip(key, probes["status"], strict=True):
        by.setdefault(k, set()).add(st)
    failing = [k for k, v in by.items() if "timeout" in v]
    assert failing and all(by[k] == {"timeout"} for k in failing)  # all-or-nothing per tuple
    assert 1 <= len(failing) < 8  # some of the 8 tuples across A–S1, not all
    # the simulator's count of the probes it dropped (the benchmark's expected failures) is exact
    drops = sim.tuple_drops[0]
    assert sum(drops.values()) == int((probes["status"] == "timeout").sum())
    secs = probes["t1"].data[probes["status"] == "timeout"] // S
    assert drops == dict(Counter(secs.tolist()))


def test_a_partial_loss_counts_no_drop_a_down_host_or_rnic_would_have_lost_anyway():
    """The same partial loss with host H1 (A1, A2) down and RNIC B1 down: its count of dropped probes (the
    benchmark's expected failures) leaves out probes to H1's RNICs and from or to B1, which fail whatever
    the link does; the other tuples it selects count as before."""
    fault = PartialTupleLoss("A", "S1", fraction=0.5)
    alone = Simulator(panel1(), seed=11, faults=[fault], inter_tor="even")
    probes, _, _ = _run(alone)
    beside = Simulator(panel1(), seed=11, faults=[fault, HostDown(host="H1"), RnicDown(rnic="B1")],
                       inter_tor="even")
    _run(beside)
    lost = (probes["status"] == "timeout") & ~np.isin(probes["responder_rnic"], ["A1", "A2", "B1"]) & (
        probes["prober_rnic"] != "B1")
    assert 0 < lost.sum() < (probes["status"] == "timeout").sum()  # the fault selected tuples of both kinds
    assert sum(beside.tuple_drops[0].values()) == int(lost.sum()) - int(
        (lost & np.isin(probes["prober_rnic"], ["A1", "A2"])).sum())  # a down host probes nothing


def test_flapping_link_loses_only_while_down():
    f = FlappingLink("A", "S3", period_s=10.0, down_s=3.0, start_ns=T0)
    sim = Simulator(panel1(), seed=12, faults=[f], inter_tor="even")
    probes, _, _ = _run(sim)
    t = (probes["t1"].data - T0) % (10 * S)
    lost = probes["status"] == "timeout"
    assert lost.sum() > 0
    assert (t[lost] < 3 * S + 2_000_000).all()
    assert lost.sum() == pytest.approx(8 * 10 * 3 * 2, rel=0.05)  # 8 tuples x 10/s x 3 s x 2 flaps


def test_same_seed_same_output_and_faults_are_checked():
    a = Simulator(panel1(), seed=13, faults=[LossyLink("A", "S2", rate=0.1)]).upload_batches(T0)
    b = Simulator(panel1(), seed=13, faults=[LossyLink("A", "S2", rate=0.1)]).upload_batches(T0)
    assert all(
        (x[1]["status"] == y[1]["status"]).all() and (x[1]["t3"].data == y[1]["t3"].data).all()
        for x, y in zip(a, b, strict=True)
    )
    with pytest.raises(ValueError, match="not linked"):
        Simulator(panel1(), faults=[LinkDown("A", "B")])
    with pytest.raises(ValueError, match="unknown host"):
        Simulator(panel1(), faults=[HostDown("H9")])


def test_three_tier_paths_and_on_change_tracing():
    inv = random_clos(2, n_tors=8, n_spines=2, hosts_per_tor=1, rnics_per_host=2, n_pods=2, n_cores=4)
    sim = Simulator(inv, seed=2, trace="on_change")
    first = sim.upload_batches(T0)
    second = sim.upload_batches(T0 + 5 * S)
    n1 = sum(len(b[2]["hops"]) for b in first)
    n2 = sum(len(b[2]["hops"]) for b in second)
    assert n1 > 0 and n2 == 0  # healthy: nothing re-traced
    hops = [h.split(",") for b in first for h in b[2]["hops"]]
    cross_pod = [h for h in hops if len(h) == 7]
    assert cross_pod and all(h[3].startswith("X") for h in cross_pod)  # ToR, agg, core, agg, ToR


def test_find_flow_label_places_a_job_flow_on_a_switch():
    sim = Simulator(panel1(), seed=1)
    fl = sim.find_flow_label("A2", "B2", via="S3")
    from producers.controller import udp_sport_from_flow_label

    assert sim.path("A2", "B2", udp_sport_from_flow_label(fl))[2] == "S3"


def test_eq1_inter_tor_tuples_miss_an_uplink_about_as_often_as_eq1_says():
    from producers.controller import HOUR_NS
    from schemas.eq1 import p_miss

    inv = random_clos(21, n_tors=4, n_spines=8, hosts_per_tor=2, rnics_per_host=4)
    missed = total = 0
    for seed in range(10):
        sim = Simulator(inv, seed=seed)
        for hour in range(0, 400_000, 20_000):  # 20 hourly lists, each a fresh draw of tuples
            batches = sim.upload_batches(T0 // HOUR_NS * HOUR_NS + hour * HOUR_NS, seconds=1.0)
            hops = [
                h.split(",")
                for b in batches
                for h, d in zip(b[2]["hops"], b[2]["direction"], strict=True)
                if d == "forward"
            ]
            inter = [h for h in hops if len(h) == 5]
            assert len(inter) == 4 * 51  # k = 51 tuples per ToR for N = 8 at P = 0.99
            for tor in inv.tors:
                total += 1
                missed += {h[2] for h in inter if h[1] == tor} != set(inv.uplinks(tor))
    # Eq. 1: P(miss) = 0.88 % per ToR; the real hash agrees within sampling error (800 ToR-lists)
    assert p_miss(8, 51) == pytest.approx(0.0088, abs=1e-4)
    assert total == 800 and missed / total < 0.025
