"""The netns fabric lab and the udp backend on real kernel networking.

Needs root and network namespaces (skipped otherwise) and ``nft`` for the
counter and loss tests. Everything runs on a Panel 1 lab with its own namespace
prefix and state directory, so it never touches a lab someone else has up.
"""

from __future__ import annotations

import os
import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or not Path("/proc/self/ns/net").exists():
    pytest.skip("the lab needs root and network namespaces", allow_module_level=True)

from infra import lab  # noqa: E402
from infra.lab import agents, faults, nft  # noqa: E402
from infra.lab.busy import throttle  # noqa: E402
from infra.lab.netns import lab_namespaces, ns_exec  # noqa: E402
from producers.udp_prober import LocalRnic, UdpEngine  # noqa: E402

from conftest import wait_for  # noqa: E402

needs_nft = pytest.mark.skipif(shutil.which("nft") is None, reason="nft missing: apt-get install -y nftables")
PREFIX = "fst-"
PORTS = list(range(50000, 50064))
# The bound of a drain (``pump(..., until=...)``): it ends as soon as the replies are in; the bound only
# stops a hung test, so it leaves a loaded machine plenty of room.
DRAIN_S = 30.0


@pytest.fixture(scope="module")
def fab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lab.Fabric]:
    d = tmp_path_factory.mktemp("lab")
    fabric = lab.up(lab.LabSpec(prefix=PREFIX), d)
    fabric.dir = d  # type: ignore[attr-defined]
    yield fabric
    lab.down(d)
    assert lab_namespaces(PREFIX) == []


def engine(fab: lab.Fabric, host: str, **kw: object) -> UdpEngine:
    rnics = [LocalRnic(r.name, r.ip, r.name, r.tor) for r in fab.host_rnics(host)]
    return UdpEngine(
        host,
        host,
        rnics,
        netns=fab.netns(host),
        allowed_sources=[r.ip for r in fab.rnics],
        address_names=fab.address_names(),
        **kw,  # type: ignore[arg-type]
    )


def pump(engines: list[UdpEngine], seconds: float, until: object = None) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for e in engines:
            e.poll(0.0005)
        if until is not None and until():  # type: ignore[operator]
            return


def entry(fab: lab.Fabric, src: str, dst: str, qpn: int, port: int = 0) -> dict[str, object]:
    d = fab.rnic(dst)
    return {
        "prober_rnic": src,
        "responder_rnic": dst,
        "responder_host": d.host,
        "dst_ip": d.ip,
        "qpn": qpn,
        "src_port": port,
        "pinglist": "inter_tor",
    }


def probe_sequentially(
    fab: lab.Fabric,
    prober: UdpEngine,
    others: list[UdpEngine],
    e: dict[str, object],
    n: int,
    rows: list[dict[str, object]],
) -> list[dict[str, object]]:
    start = len(rows)
    for _ in range(n):
        prober.send_probe(e)
        pump([prober, *others], DRAIN_S, until=lambda: not prober.pending)
    return rows[start:]


def probe_paced(
    prober: UdpEngine, e: dict[str, object], n: int, interval_s: float, rows: list[dict[str, object]]
) -> list[dict[str, object]]:
    """Send ``n`` probes every ``interval_s`` whatever the replies (as agents do), then wait for all."""
    start = len(rows)
    for _ in range(n):
        prober.send_probe(e)
        pump([prober], interval_s)
    pump([prober], DRAIN_S, until=lambda: not prober.pending)
    return rows[start:]


def test_lab_builds_and_tears_down_leaving_nothing(tmp_path: Path) -> None:
    spec = lab.LabSpec(spines=2, tors=2, hosts_per_tor=1, nics_per_host=2, prefix="fst1-")
    fabric = lab.up(spec, tmp_path)
    assert lab_namespaces("fst1-") == sorted(fabric.netns(n) for n in fabric.nodes)
    assert len(fabric.nodes) == 2 + 2 + 2
    # ECMP on the 5-tuple with a seed per ToR, dead next hops leave the set.
    assert ns_exec(fabric.netns("A"), ["sysctl", "-n", "net.ipv4.fib_multipath_hash_policy"]).strip() == "3"
    assert ns_exec(fabric.netns("A"), ["sysctl", "-n", "net.ipv4.fib_multipath_hash_fields"]).strip() == str(0x37)
    seeds = {ns_exec(fabric.netns(t), ["sysctl", "-n", "net.ipv4.fib_multipath_hash_seed"]) for t in "AB"}
    assert len(seeds) == 2
    routes = ns_exec(fabric.netns("A"), ["ip", "route", "show", "10.2.0.0/16"])
    assert routes.count("nexthop via") == 2
    # A crash: the state file is lost, yet down() sweeps the prefix.
    (tmp_path / "state.json").unlink()
    removed = lab.down(tmp_path, prefix="fst1-")
    assert len(removed) == 6
    assert lab_namespaces("fst1-") == []


@needs_nft
def test_64_ports_cover_every_spine_and_stay_on_one(fab: lab.Fabric) -> None:
    for s in fab.spines:
        nft.add_table(fab.netns(s), "fs_ecmp", nft.port_counter_rules(PORTS), hook="forward")
    rows: list[dict[str, object]] = []
    paths: list[dict[str, object]] = []
    resp = engine(fab, "H3", rate_limit=1e6)
    prober = engine(fab, "H1", responder=False, on_probe=rows.append, on_path=paths.append)
    try:
        e = entry(fab, "A1", "B1", resp.qpns["B1"])
        for _ in range(100):
            for p in PORTS:
                prober.send_probe(dict(e, src_port=p))
            pump([prober, resp], 0.02)
        pump([prober, resp], DRAIN_S, until=lambda: not prober.pending)
        counts = {s: nft.counters(fab.netns(s), "fs_ecmp") for s in fab.spines}
        for p in PORTS:
            prober.trace(prober.endpoint("A1", p), (fab.rnic("B1").ip, 4791), "B1")
            pump([prober, resp], 0.005)
        pump([prober, resp], DRAIN_S, until=lambda: len(paths) == len(PORTS))
    finally:
        prober.close()
        resp.close()
        for s in fab.spines:
            nft.delete_table(fab.netns(s), "fs_ecmp")
    assert len(rows) == 6400 and all(r["status"] == "ok" for r in rows)
    spine_of = {}
    for p in PORTS:
        hits = {s: counts[s][p] for s in fab.spines if counts[s][p]}
        assert list(hits.values()) == [100], f"port {p} spread over {hits}"
        spine_of[p] = next(iter(hits))
    assert set(spine_of.values()) == set(fab.spines)
    assert len(paths) == len(PORTS)
    for path in paths:
        hops = str(path["hops"]).split(",")
        assert path["complete"], (path["hops"], path["src_port"])
        assert hops[0] == "A1" and hops[1] == "A" and hops[3] == "B" and hops[4] == "B1"
        assert hops[2] == spine_of[int(path["src_port"])]  # type: ignore[call-overload]


def test_probe_round_trip_has_t1_to_t6_and_tens_of_us_network_rtt(fab: lab.Fabric) -> None:
    rows: list[dict[str, object]] = []
    resp = engine(fab, "H3")
    prober = engine(fab, "H1", responder=False, on_probe=rows.append)
    try:
        got = probe_sequentially(fab, prober, [resp], entry(fab, "A2", "B2", resp.qpns["B2"], 40123), 200, rows)
    finally:
        prober.close()
        resp.close()
    assert len(got) == 200 and all(r["status"] == "ok" and r["ts_source"] == "software" for r in got)
    for r in got:  # one machine, one CLOCK_REALTIME: the six instants are ordered
        assert r["t1"] <= r["t2"] < r["t3"] < r["t4"] < r["t5"] <= r["t6"]  # type: ignore[operator]
    net = [(r["t5"] - r["t2"]) - (r["t4"] - r["t3"]) for r in got]  # type: ignore[operator]
    assert 1_000 < statistics.median(net) < 200_000  # veth, 4 hops each way: tens of µs


def test_sigstopped_responder_moves_only_responder_delay(fab: lab.Fabric) -> None:
    d: Path = fab.dir  # type: ignore[attr-defined]
    qpns = agents.start_agents(d, {"kind": "none"}, hosts=["H4"])
    pid = agents.agent_entry(d, "H4", "responder")["pid"]
    rows: list[dict[str, object]] = []
    prober = engine(fab, "H1", responder=False, on_probe=rows.append)
    e = entry(fab, "A1", "B3", qpns["B3"], 40200)
    try:
        base = probe_paced(prober, e, 100, 0.003, rows)
        t = threading.Thread(target=throttle, args=(pid, 20.0, 10.0, 1.0))
        t.start()
        busy = probe_paced(prober, e, 100, 0.003, rows)
        t.join()
    finally:
        prober.close()
        agents.stop_agents(d, ["H4"])
    ok_base = [r for r in base if r["status"] == "ok" and r["t3"] is not None]
    ok_busy = [r for r in busy if r["status"] == "ok" and r["t3"] is not None]
    assert len(ok_base) == 100 and len(ok_busy) >= 90

    def p50(rs: list[dict[str, object]], f: object) -> float:
        return statistics.median(f(r) for r in rs)  # type: ignore[operator]

    def net(r: dict[str, object]) -> int:
        return (r["t5"] - r["t2"]) - (r["t4"] - r["t3"])  # type: ignore[operator]

    def resp(r: dict[str, object]) -> int:
        return r["t4"] - r["t3"]  # type: ignore[operator]

    assert p50(ok_busy, resp) >= 10 * p50(ok_base, resp)
    assert p50(ok_busy, resp) > 1_000_000  # ms, the SIGSTOP bursts
    assert p50(ok_busy, net) < 3 * p50(ok_base, net) + 20_000  # network time barely moves


def test_stale_qpn_probes_time_out(fab: lab.Fabric) -> None:
    rows: list[dict[str, object]] = []
    resp = engine(fab, "H5")
    prober = engine(fab, "H1", responder=False, on_probe=rows.append)
    try:
        good = probe_sequentially(fab, prober, [resp], entry(fab, "A1", "C1", resp.qpns["C1"]), 3, rows)
        stale = probe_sequentially(fab, prober, [resp], entry(fab, "A1", "C1", resp.qpns["C1"] ^ 1), 2, rows)
    finally:
        prober.close()
        resp.close()
    assert [r["status"] for r in good] == ["ok"] * 3
    assert [r["status"] for r in stale] == ["timeout"] * 2 and resp.counters["dropped_stale_qpn"] == 2
    assert all(r["t2"] is not None and r["t5"] is None for r in stale)


def _port_status(fab: lab.Fabric, src: str, dst: str, ports: list[int]) -> dict[int, list[str]]:
    rows: list[dict[str, object]] = []
    resp = engine(fab, fab.rnic(dst).host, rate_limit=1e6)
    prober = engine(fab, fab.rnic(src).host, responder=False, on_probe=rows.append)
    try:
        e = entry(fab, src, dst, resp.qpns[dst])
        for _ in range(5):
            for p in ports:
                prober.send_probe(dict(e, src_port=p))
            pump([prober, resp], 0.01)
        pump([prober, resp], DRAIN_S, until=lambda: not prober.pending)
    finally:
        prober.close()
        resp.close()
    out: dict[int, list[str]] = {}
    for r in rows:
        out.setdefault(int(r["src_port"]), []).append(str(r["status"]))  # type: ignore[call-overload]
    return out


@needs_nft
def test_partial_5tuple_loss_drops_some_tuples_entirely(fab: lab.Fabric) -> None:
    d: Path = fab.dir  # type: ignore[attr-defined]
    rec = faults.inject("partial-5tuple", d, a="A", b="S1", fraction=0.5, seed=3)
    try:
        status = _port_status(fab, "A1", "B1", PORTS)
    finally:
        faults.clear(rec["id"], d)
    dead = [p for p, s in status.items() if set(s) == {"timeout"}]
    alive = [p for p, s in status.items() if set(s) == {"ok"}]
    assert len(dead) + len(alive) == len(PORTS)  # a tuple is dropped always or never
    assert 0 < len(dead) < len(PORTS) // 2  # only tuples crossing A-S1, half of those
    assert set(_port_status(fab, "A1", "B1", dead)) == set(dead)
    assert all(set(s) == {"ok"} for s in _port_status(fab, "A1", "B1", dead).values())


def test_link_down_and_nic_down_and_clear(fab: lab.Fabric) -> None:
    d: Path = fab.dir  # type: ignore[attr-defined]
    rec = faults.inject("link-down", d, a="S3", b="A")
    try:
        down = _port_status(fab, "A1", "B1", PORTS)
        assert "down" in ns_exec(fab.netns("A"), ["ip", "link", "show", "S3"]).lower()
    finally:
        faults.clear(rec["id"], d)
    failed = [p for p, s in down.items() if "timeout" in s]
    # A stops using S3 upward, but B still hashes return paths onto S3, which cannot reach A.
    assert 0 < len(failed) < len(PORTS)
    assert all(set(s) == {"ok"} for s in _port_status(fab, "A1", "B1", failed).values())
    rec = faults.inject("nic-down", d, rnic="A3")
    try:
        gone = _port_status(fab, "A1", "A3", PORTS[:4])
    finally:
        faults.clear(rec["id"], d)
    assert all(set(s) == {"timeout"} for s in gone.values())
    assert all(set(s) == {"ok"} for s in _port_status(fab, "A1", "A3", PORTS[:4]).values())
    assert faults.active(d) == []


def test_a_trace_ends_at_the_spine_that_lost_its_route_to_the_destination(fab: lab.Fabric) -> None:
    """Link A-S3 down: B still hashes some tuples to A onto S3, which has no route to A any more and answers
    them with ICMP unreachable, not time exceeded; their traces end at S3, the others reach A1 by the other
    spines. The kernel rate-limits unreachables (a burst of 5 per peer, then one a second): a trace whose
    answer it held back still stops after B, so rounds of traces go on until one ends at S3."""
    d: Path = fab.dir  # type: ignore[attr-defined]
    paths: list[dict[str, object]] = []
    resp = engine(fab, "H1", rate_limit=1e6)
    prober = engine(fab, "H3", responder=False, on_path=paths.append)
    rec = faults.inject("link-down", d, a="S3", b="A")
    try:
        for _ in range(10):
            before = len(paths)
            for p in PORTS:
                prober.trace(prober.endpoint("B1", p), (fab.rnic("A1").ip, 4791), "A1")
                pump([prober, resp], 0.005)
            pump([prober, resp], DRAIN_S, until=lambda n=before + len(PORTS): len(paths) == n)
            if any(p["hops"] == "B1,B,S3" for p in paths):
                break
    finally:
        faults.clear(rec["id"], d)
        prober.close()
        resp.close()
    cut = [str(p["hops"]) for p in paths if not p["complete"]]
    whole = [str(p["hops"]).split(",") for p in paths if p["complete"]]
    assert "B1,B,S3" in cut and whole, (cut, whole)
    assert set(cut) <= {"B1,B,S3", "B1,B"}
    assert all(h[:2] == ["B1", "B"] and h[2] in set(fab.spines) - {"S3"} and h[3:] == ["A", "A1"] for h in whole), whole


def _state(pid: int) -> str:
    """The process state letter of ``pid`` (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_busy_host_and_host_restart_faults_drive_the_agents(fab: lab.Fabric) -> None:
    d: Path = fab.dir  # type: ignore[attr-defined]
    before = agents.start_agents(d, {"kind": "none"}, hosts=["H2"])
    try:
        pid = agents.agent_entry(d, "H2", "responder")["pid"]
        rec = faults.inject("busy-host", d, host="H2", stop_ms=300, run_ms=50)
        wait_for(lambda: _state(pid) == "T", timeout=30, every=0.01, what="the responder stopped in a burst")
        faults.clear(rec["id"], d)
        assert _state(pid) != "T"  # clearing the fault leaves it running
        rec = faults.inject("host-restart", d, host="H2")
        after = agents.registry(d)
        assert agents.agent_entry(d, "H2", "responder")["pid"] != pid
        assert {r: after[r] for r in ("A3", "A4")} != {r: before[r] for r in ("A3", "A4")}
        rec = faults.inject("host-down", d, host="H2")
        with pytest.raises(lab.LabError):
            agents.agent_entry(d, "H2", "responder")
        faults.clear(rec["id"], d)  # brings the host back
        assert agents.agent_entry(d, "H2", "responder")["pid"] > 0
    finally:
        faults.clear(None, d)
        agents.stop_agents(d, ["H2"])


@needs_nft
def test_cli_lab_up_fault_status_down(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from fabricscope.cli import app, register_all

    register_all()
    run = CliRunner()
    d = ["--dir", str(tmp_path)]
    r = run.invoke(app, ["lab", "up", "--no-agents", "--prefix", "fst2-", "--spines", "2", "--tors", "2", *d])
    assert r.exit_code == 0, r.output
    assert "2 spines, 2 ToRs, 4 hosts, 8 RNICs" in r.output
    try:
        r = run.invoke(app, ["lab", "fault", "link-loss", "A", "S2", "--loss", "0.5", *d])
        assert r.exit_code == 0 and "fault f1: link-loss A-S2" in r.output, r.output
        assert "numgen random mod 1000 < 500" in ns_exec("fst2-S2", ["nft", "list", "ruleset"])
        r = run.invoke(app, ["lab", "fault", "link-down", "A", "B", *d])
        assert r.exit_code == 2 and "not a ToR-spine link" in r.output
        for bad, says in ((["nic-down", "ZZ9"], "no RNIC 'ZZ9' in the lab; RNICs are A1, A2, A3, A4, B1"),
                          (["host-down", "H9"], "no host 'H9' in the lab; hosts are H1, H2, H3, H4"),
                          (["clear", "f7"], "no active fault 'f7'; active faults: f1")):
            r = run.invoke(app, ["lab", "fault", *bad, *d])
            flat = " ".join(r.output.replace("│", " ").split())  # rich boxes and wraps a usage error
            assert r.exit_code == 2 and says in flat, r.output
        st = json.loads(run.invoke(app, ["lab", "status", "--json", *d]).output)
        assert st["up"] and len(st["namespaces"]) == 8 and [f["id"] for f in st["faults"]] == ["f1"]
        assert st["spines"] == ["S1", "S2"] and [t["tor"] for t in st["tors"]] == ["A", "B"]
        assert st["hosts"][0] == {"host": "H1", "tor": "A", "rnics": ["A1", "A2"]}
        assert [r["rnic"] for r in st["rnics"]] == ["A1", "A2", "A3", "A4", "B1", "B2", "B3", "B4"]
        text = run.invoke(app, ["lab", "status", *d], env={"COLUMNS": "120"}).output
        assert "spines: S1, S2" in text and "│ A   │ H1, H2 │ A-S1, A-S2 │" in text
        assert "│ f1 │ link-loss │ A-S2   │ loss 0.5 │ 20" in text
        listed = run.invoke(app, ["lab", "fault", "list", *d], env={"COLUMNS": "120"}).output
        assert "│ f1 │ link-loss │ A-S2   │ loss 0.5 │ 20" in listed and "fabricscope lab fault clear ID" in listed
        assert run.invoke(app, ["lab", "fault", "clear", *d]).output.strip() == "cleared f1"
        assert run.invoke(app, ["lab", "fault", "list", *d]).output.startswith("active faults: none")
        assert "fs_f1" not in ns_exec("fst2-S2", ["nft", "list", "ruleset"])
    finally:
        r = run.invoke(app, ["lab", "down", *d])
    assert r.output.strip() == "removed 8 namespaces"
    assert lab_namespaces("fst2-") == []


@pytest.mark.slow
def test_agents_traces_put_a_dead_link_on_every_failing_tuple(fab: lab.Fabric) -> None:
    """Agents on every host, link A-S3 dies: each failing tuple's traced probe or ACK path crosses it."""
    import collections

    import pyarrow.ipc as ipc

    from fabricscope.cmd_lab import build_lab_pinglists
    from schemas.inventory_yaml import from_dict

    d: Path = fab.dir  # type: ignore[attr-defined]
    spool = d / "spool"

    def table(schema: str) -> list[dict[str, object]]:  # the agents write each batch file atomically
        return [
            r
            for f in sorted((spool / schema).glob("*.arrow"))
            for r in ipc.open_stream(f.read_bytes()).read_all().to_pylist()
        ]

    def tuples(rows: list[dict[str, object]]) -> set[tuple[object, ...]]:
        return {(r["src_ip"], r["src_port"], r["dst_ip"]) for r in rows}

    def traced_both_ways() -> set[tuple[object, ...]]:
        """Probe tuples with a complete forward path (traced by the prober) and a complete reverse one
        (the ACK path, traced by the responder)."""
        ways: dict[str, set[tuple[object, ...]]] = {"forward": set(), "reverse": set()}
        for p in table("path.v1"):
            if p["complete"]:
                ways["forward" if p["direction"] == "forward" else "reverse"].add(
                    (p["src_ip"], p["src_port"], p["dst_ip"]) if p["direction"] == "forward"
                    else (p["dst_ip"], p["dst_port"], p["src_ip"]))
        return ways["forward"] & ways["reverse"]

    inventory = from_dict(fab.inventory_dict())
    qpns = agents.start_agents(d, {"kind": "dir", "path": str(spool)}, upload_interval_s=1)
    try:
        lists = build_lab_pinglists(inventory, qpns, 1, [])
        agents.write_pinglists(lists, d)
        n_tuples = len({(e["prober_rnic"], e["src_port"], e["dst_ip"]) for es in lists.values() for e in es})
        # every tuple probed and traced both ways before the fault
        wait_for(lambda: len(probed := tuples(table("probe.v1"))) >= n_tuples and probed <= traced_both_ways(),
                 timeout=180, what=f"{n_tuples} tuples probed and traced both ways")  # reverse: every 60 s
        fault_ns = time.time_ns()
        rec = faults.inject("link-down", d, a="A", b="S3")
        # every tuple probed again once the link is down, and its outcome (answer or timeout) uploaded
        wait_for(lambda: len(tuples(r for r in table("probe.v1") if int(r["t1"]) > fault_ns + 100_000_000))
                 >= n_tuples, timeout=120, what="every tuple probed across the dead link")
        clear_ns = time.time_ns()
        faults.clear(rec["id"], d)
    finally:
        agents.stop_agents(d)

    rows, paths = table("probe.v1"), table("path.v1")
    before = [r for r in rows if int(r["t1"]) < fault_ns]  # type: ignore[call-overload]
    failed = [
        r
        for r in rows
        if fault_ns + 100_000_000 < int(r["t1"]) < clear_ns and r["status"] == "timeout"  # type: ignore[call-overload]
    ]
    assert before and all(r["status"] == "ok" for r in before)
    assert failed and all(r["pinglist"] == "inter_tor" for r in failed)  # ToR-mesh never crosses a spine
    traced: dict[tuple[object, ...], list[str]] = collections.defaultdict(list)
    for p in paths:
        if int(p["trace_ns"]) < fault_ns and p["complete"]:  # type: ignore[call-overload]
            key = (
                (p["src_ip"], p["src_port"], p["dst_ip"])
                if p["direction"] == "forward"
                else (p["dst_ip"], p["dst_port"], p["src_ip"])
            )
            traced[key].append(str(p["hops"]))
    votes: collections.Counter[str] = collections.Counter()
    for r in failed:
        hops = traced[(r["src_ip"], r["src_port"], r["dst_ip"])]
        links = {f"{a}->{b}" for h in hops for a, b in zip(h.split(","), h.split(",")[1:], strict=False)}
        assert links & {"A->S3", "S3->A"}, (r["prober_rnic"], r["responder_rnic"], hops)
        votes.update(links)
    assert votes.most_common(1)[0][0] in ("A->S3", "S3->A")


def test_the_lab_lives_under_fabricscope_var_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """`up` builds its lab in $FABRICSCOPE_VAR/lab, so `lab fault` in the same environment finds it there."""
    monkeypatch.delenv("FABRICSCOPE_LAB_DIR", raising=False)
    monkeypatch.delenv("FABRICSCOPE_VAR", raising=False)
    assert lab.lab_dir() == Path("var/lab")
    monkeypatch.setenv("FABRICSCOPE_VAR", str(tmp_path))
    assert lab.lab_dir() == tmp_path / "lab"
    monkeypatch.setenv("FABRICSCOPE_LAB_DIR", str(tmp_path / "elsewhere"))
    assert lab.lab_dir() == tmp_path / "elsewhere"
    assert lab.lab_dir(tmp_path / "given") == tmp_path / "given"
