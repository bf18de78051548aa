"""Service tracing (producers/service_trace): event parsing, the connection table, the service pinglist.

No RDMA or bcc here: the eBPF program (qp_trace.bpf.c) is never loaded in these tests; they cover
what runs on its output, and that run_tracer refuses clearly instead of faking events.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from producers import controller as ctl
from producers.service_trace.events import (
    ConnectionTable,
    QpEvent,
    calc_flow_label,
    format_event,
    ib_netdev_map,
    parse_event,
    parse_lines,
)
from producers.service_trace.tracer import BPF_SOURCE, TracerUnavailable, run_tracer
from producers.sim.fabrics import panel1

# Host H1 (RNICs A1 = eth0, A2 = eth1) runs a job whose ranks talk to B2 (10.0.2.2) and C1 (10.0.3.1).
LOG = "\n".join(
    [
        "# service trace of H1",
        "MODIFY ts=100 pid=4242 comm=python cgroup=77 dev=mlx5_1 qpn=0x1a2 dqpn=0x3b4 dgid=::ffff:10.0.2.2"
        " fl=0x12345 sgid_index=3 tc=104",
        "MODIFY ts=101 pid=4242 comm=python cgroup=77 dev=mlx5_0 qpn=0x1a3 dqpn=0x3b5 dgid=::ffff:10.0.3.1"
        " fl=0xabcde sgid_index=3 tc=0",
        "MODIFY ts=102 pid=5000 comm=nccl\\x20worker cgroup=88 dev=mlx5_1 qpn=0x1a4 dqpn=0x777"
        " dgid=::ffff:192.168.9.9 fl=0x1 sgid_index=3 tc=0",
        "",
        "DESTROY ts=200 pid=4242 comm=python cgroup=77 dev=mlx5_0 qpn=0x1a3",
    ]
)
DEVICES = {"mlx5_0": "eth0", "mlx5_1": "eth1"}


def test_parse_modify_and_destroy_lines():
    evs = list(parse_lines(LOG.splitlines()))
    assert [e.kind for e in evs] == ["modify", "modify", "modify", "destroy"]
    m = evs[0]
    assert (m.pid, m.comm, m.device, m.qpn, m.dest_qpn) == (4242, "python", "mlx5_1", 0x1A2, 0x3B4)
    assert m.flow_label == 0x12345 and m.sgid_index == 3 and m.traffic_class == 104 and m.cgroup == 77
    assert m.dgid in ("::ffff:10.0.2.2", "::ffff:a00:202")  # Python's IPv6 text of an IPv4-mapped GID
    assert evs[2].comm == "nccl worker"
    d = evs[3]
    assert (d.kind, d.device, d.qpn, d.dgid) == ("destroy", "mlx5_0", 0x1A3, "")


def test_format_parse_round_trip_and_errors():
    ev = QpEvent("modify", 7, "a b\\c", "mlx5_2", 0xFFFFFF, "fe80::1", 0xFFFFF, 1, 9, 106, 3, 55)
    assert parse_event(format_event(ev)) == ev
    gone = QpEvent("destroy", 7, "x", "mlx5_2", 12)
    assert parse_event(format_event(gone)) == gone
    with pytest.raises(ValueError, match="MODIFY or DESTROY"):
        parse_event("CREATE pid=1")
    with pytest.raises(ValueError, match="missing field 'dgid'"):
        parse_event("MODIFY pid=1 comm=x dev=mlx5_0 qpn=0x1 fl=0x2")
    with pytest.raises(ValueError, match="bad field value"):
        parse_event("MODIFY pid=1 comm=x dev=mlx5_0 qpn=0x1 dgid=not-a-gid fl=0x2")
    with pytest.raises(ValueError, match="key=value"):
        parse_event("DESTROY pid=1 dev=mlx5_0 qpn")
    with pytest.raises(ValueError, match="kind"):
        QpEvent("create", 1, "x", "d", 1)


def test_connection_table_create_modify_destroy():
    inv = panel1()
    t = ConnectionTable(inv, "H1", DEVICES)
    evs = list(parse_lines(LOG.splitlines()))
    t.apply_all(evs[:3])
    assert set(t.qps) == {("mlx5_1", 0x1A2), ("mlx5_0", 0x1A3), ("mlx5_1", 0x1A4)}
    conns = t.connections()
    assert t.unmapped == 1  # 192.168.9.9 is not an RNIC of the fabric
    assert [(c["src_rnic"], c["dst_rnic"]) for c in conns] == [("A1", "C1"), ("A2", "B2")]
    # the QP reconnects (RTR again) with a new flow label: the entry is replaced, not added
    t.apply(QpEvent("modify", 4242, "python", "mlx5_1", 0x1A2, "::ffff:10.0.2.2", 0x54321, 3, 0x3B4))
    assert len(t.qps) == 3
    assert {c["flow_label"] for c in t.connections() if c["dst_rnic"] == "B2"} == {0x54321}
    t.apply(evs[3])  # destroy mlx5_0 qpn 0x1a3
    t.apply(QpEvent("destroy", 1, "x", "mlx5_0", 0x999))  # unknown QP: ignored
    assert [(c["src_rnic"], c["dst_rnic"]) for c in t.connections()] == [("A2", "B2")]


def test_connections_carry_src_port_from_flow_label_and_job():
    inv = panel1()
    t = ConnectionTable(inv, "H1", DEVICES, job_of={4242: "job-7"}).apply_all(parse_lines(LOG.splitlines()))
    (c,) = t.connections()
    assert c["job_id"] == "job-7"
    assert c["flow_label"] == 0x12345
    assert c["src_port"] == ctl.udp_sport_from_flow_label(0x12345)
    assert c["traffic_class"] == 104 >> 2  # DSCP 26 from the IPv6 traffic class byte
    # job id by cgroup id or comm, else the comm itself
    assert (
        ConnectionTable(inv, "H1", DEVICES, job_of={77: "cg-job"})
        .apply_all(parse_lines(LOG.splitlines()))
        .connections()[0]["job_id"]
        == "cg-job"
    )
    assert (
        ConnectionTable(inv, "H1", DEVICES, job_of=lambda ev: None)
        .apply_all(parse_lines(LOG.splitlines()))
        .connections()[0]["job_id"]
        == "python"
    )
    # device names that are the netdev itself also resolve; an unknown device is unmapped
    t2 = ConnectionTable(inv, "H1")
    t2.apply(QpEvent("modify", 1, "p", "eth1", 5, "::ffff:10.0.2.2", 0x10, 3, 6))
    t2.apply(QpEvent("modify", 1, "p", "mlx5_9", 5, "::ffff:10.0.2.2", 0x10, 3, 6))
    assert [c["src_rnic"] for c in t2.connections()] == ["A2"] and t2.unmapped == 1


def test_zero_flow_label_uses_driver_derivation_and_duplicates_collapse():
    inv = panel1()
    t = ConnectionTable(inv, "H1", DEVICES)
    t.apply(QpEvent("modify", 1, "p", "mlx5_0", 0x100, "::ffff:10.0.2.1", 0, 3, 0x200))
    (c,) = t.connections()
    fl = calc_flow_label(0x100, 0x200)
    v = 0x100 * 0x200
    v ^= v >> 20
    assert fl == (v ^ (v >> 40)) & 0xFFFFF and fl != 0
    assert c["flow_label"] == fl and c["src_port"] == ctl.udp_sport_from_flow_label(fl)
    # two QPs of one job on the same 5-tuple: one pinglist entry
    t.apply(QpEvent("modify", 1, "p", "mlx5_1", 0x300, "::ffff:10.0.2.2", 0x77, 3, 0x1))
    t.apply(QpEvent("modify", 1, "p", "mlx5_1", 0x301, "::ffff:10.0.2.2", 0x77, 3, 0x2))
    assert len(t.qps) == 3 and len(t.connections()) == 2


def test_service_pinglist_from_traced_connections():
    inv = panel1()
    reg = ctl.Registry.from_inventory(inv, seed=3)
    t = ConnectionTable(inv, "H1", DEVICES, job_of={"python": "job-7"})
    t.apply_all(parse_lines(LOG.splitlines()[:3]))  # before the destroy: A1->C1 and A2->B2
    entries = ctl.service(inv, reg, t.connections())
    assert len(entries) == 2
    by_dst = {e["responder_rnic"]: e for e in entries}
    b2 = by_dst["B2"]
    assert b2["pinglist"] == "service" and b2["prober_rnic"] == "A2" and b2["prober_host"] == "H1"
    assert (b2["src_ip"], b2["dst_ip"], b2["dst_port"]) == ("10.0.1.2", "10.0.2.2", 4791)
    assert b2["flow_label"] == 0x12345 and b2["src_port"] == ctl.udp_sport_from_flow_label(0x12345)
    assert b2["traffic_class"] == 26 and b2["job_id"] == "job-7" and b2["qpn"] == reg.qpn("B2")
    c1 = by_dst["C1"]
    assert c1["prober_rnic"] == "A1" and c1["src_port"] == ctl.udp_sport_from_flow_label(0xABCDE)
    assert c1["traffic_class"] == ctl.DEFAULT_TC.traffic_class  # tc=0 in the trace: the default queue
    # the traced list is interchangeable with a job-published one (the fallback)
    published = [{k: c[k] for k in ("job_id", "src_rnic", "dst_rnic", "flow_label")} for c in t.connections()]
    assert [e["src_port"] for e in ctl.service(inv, reg, published)] == [e["src_port"] for e in entries]


def test_ib_netdev_map_reads_sysfs(tmp_path):
    for dev, nd in DEVICES.items():
        p = tmp_path / dev / "ports" / "1" / "gid_attrs" / "ndevs"
        p.mkdir(parents=True)
        (p / "0").write_text(nd + "\n")
    (tmp_path / "mlx5_bond").mkdir()  # no RoCE netdev: left out
    assert ib_netdev_map(tmp_path) == DEVICES
    assert ib_netdev_map(tmp_path / "absent") == {}


def test_run_tracer_fails_clearly_without_rdma(tmp_path):
    with pytest.raises(TracerUnavailable) as ei:
        run_tracer(sysfs=tmp_path / "no-infiniband")
    msg = str(ei.value)
    assert "no RDMA device" in msg and "connection list" in msg
    if importlib.util.find_spec("bcc") is None:
        assert "bcc is not installed" in msg and "python3-bpfcc" in msg
    if os.geteuid() != 0:
        assert "not root" in msg


def test_bpf_program_hooks_the_right_kernel_functions():
    src = BPF_SOURCE.read_text()
    for needle in (
        "IB_QPS_RTR",
        "ah_attr.grh.dgid",
        "ah_attr.grh.flow_label",
        "grh.sgid_index",
        "qp_num",
        "BPF_PERF_OUTPUT",
        "trace_modify_qp",
        "trace_destroy_qp",
    ):
        assert needle in src, needle
