"""Controller: RNIC registry and the three pinglists (producers/controller.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from producers import controller as ctl
from producers.sim.fabrics import panel1, random_clos
from schemas.records import PROBE_V1

H = ctl.HOUR_NS


def test_sport_from_flow_label_matches_rdma_core():
    assert ctl.udp_sport_from_flow_label(0) == 0xC000
    assert ctl.udp_sport_from_flow_label(1) == 0xC001
    assert ctl.udp_sport_from_flow_label(0x4000) == 0xC001  # high bits fold onto the low ones
    assert ctl.udp_sport_from_flow_label(0xFFFFF) == 0xC000 | (0x3FFF ^ 0x3F)
    assert all(0xC000 <= ctl.udp_sport_from_flow_label(f) <= 0xFFFF for f in range(0, 1 << 20, 4099))


def test_registry_restart_replaces_qpn():
    inv = panel1()
    reg = ctl.Registry.from_inventory(inv, qpns={"A1": 0x111}, seed=1)
    assert reg.qpn("A1") == 0x111
    assert reg.register("A1", 0x222, at_ns=5) == 0x111
    assert reg.qpn("A1") == 0x222 and reg.entries["A1"].updated_ns == 5
    assert reg.register("A1", 0x222, at_ns=6) is None  # unchanged
    cols = reg.to_columns("controller", 7)
    assert len(cols["rnic"]) == 12 and cols["qpn"][cols["rnic"].index("A1")] == 0x222
    assert cols["tor"][cols["rnic"].index("C3")] == "C"


def test_tor_mesh_every_pair_under_a_tor_at_10_pps():
    inv = panel1()
    reg = ctl.Registry.from_inventory(inv)
    tm = ctl.tor_mesh(inv, reg)
    assert len(tm) == 3 * 4 * 3
    assert all(inv.tor_of(e["prober_rnic"]) == inv.tor_of(e["responder_rnic"]) for e in tm)
    sent, recv = Counter(), Counter()
    for e in tm:
        sent[e["prober_rnic"]] += e["rate_pps"]
        recv[e["responder_rnic"]] += e["rate_pps"]
    assert all(v == pytest.approx(10.0) for v in sent.values())
    assert all(v == pytest.approx(10.0) for v in recv.values())  # 200 probes per 20 s window
    e = tm[0]
    assert e["qpn"] == reg.qpn(e["responder_rnic"]) and e["dst_port"] == 4791
    assert (e["traffic_class"], e["priority"]) == (26, 3)
    # entries carry probe.v1 field names for what the prober copies
    assert {k for k in e if k not in ("gid", "rate_pps")} <= set(PROBE_V1.names)


def test_inter_tor_size_from_eq1_and_20_percent_hourly_replacement():
    inv = random_clos(1, n_tors=4, n_spines=8, hosts_per_tor=2, rnics_per_host=4)
    reg = ctl.Registry.from_inventory(inv)
    assert ctl.tor_path_count(inv, "A") == 8
    lists = [ctl.inter_tor(inv, reg, seed=9, now_ns=h * H + 17) for h in range(6)]
    assert all(len(x) == 4 * 51 for x in lists)  # k = 51 for N = 8 at P = 0.99
    for e in lists[0]:
        assert inv.tor_of(e["prober_rnic"]) != inv.tor_of(e["responder_rnic"])
        assert e["rate_pps"] == pytest.approx(2 * 10 * 8 / 51)
    # the list is a pure function of (seed, hour)
    assert ctl.inter_tor(inv, reg, seed=9, now_ns=3 * H) == lists[3]
    for a, b in zip(lists, lists[1:], strict=False):
        changed = sum(x != y for x, y in zip(a, b, strict=True))
        assert changed == pytest.approx(0.2 * len(a), abs=4)
    # after five hours every tuple has been replaced once
    assert sum(x == y for x, y in zip(lists[0], lists[5], strict=True)) <= 6
    # sources rotate over every RNIC of the ToR
    assert {e["prober_rnic"] for e in lists[0] if inv.tor_of(e["prober_rnic"]) == "A"} == set(inv.rnics_under_tor("A"))


def test_three_tier_path_count():
    inv = random_clos(1, n_tors=8, n_spines=4, hosts_per_tor=1, rnics_per_host=1, n_pods=2, n_cores=8)
    assert ctl.ecmp_path_count(inv, "T1", "T2") == 4  # same pod: via the 4 aggs
    assert ctl.ecmp_path_count(inv, "T1", "T8") == 8  # other pod: 4 aggs x 2 cores each
    assert ctl.tor_path_count(inv, "T1") == 8


def test_service_pinglist_copies_the_job_5_tuple(tmp_path):
    inv = panel1()
    reg = ctl.Registry.from_inventory(inv)
    conns = [
        {"job_id": "j1", "src_rnic": "A2", "dst_rnic": "B2", "flow_label": 0x12345, "traffic_class": 34, "priority": 4},
        {"job_id": "j1", "src_rnic": "A1", "dst_rnic": "B1", "src_port": 50001},
    ]
    p = tmp_path / "conns.jsonl"
    p.write_text("\n".join(json.dumps(c) for c in conns))
    sv = ctl.service(inv, reg, ctl.load_connections(p))
    assert [e["src_port"] for e in sv] == [ctl.udp_sport_from_flow_label(0x12345), 50001]
    assert (sv[0]["traffic_class"], sv[0]["priority"]) == (34, 4)
    assert all(e["job_id"] == "j1" and e["pinglist"] == "service" and e["rate_pps"] == 100.0 for e in sv)
    with pytest.raises(ValueError, match=r"connections\[0\]\.dst_rnic: unknown RNIC 'Z9'"):
        ctl.service(inv, reg, [{"src_rnic": "A1", "dst_rnic": "Z9", "flow_label": 1}])
    with pytest.raises(ValueError, match="flow_label or src_port"):
        ctl.service(inv, reg, [{"src_rnic": "A1", "dst_rnic": "B1"}])


def test_build_pinglists_and_per_host_view_without_pyarrow():
    inv = panel1()
    reg = ctl.Registry.from_inventory(inv)
    lists = ctl.build_pinglists(inv, reg, seed=1, now_ns=0)
    assert set(lists) == {"tor_mesh", "inter_tor", "service"}
    assert len(lists["inter_tor"]) == 3 * 21  # N = 4 spines -> k = 21
    mine = ctl.pinglist_for_host(lists, "H1")
    assert mine and all(e["prober_host"] == "H1" for e in mine)


def test_controller_and_sim_never_import_pyarrow():
    code = "import sys, producers.controller, producers.sim; print('pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
