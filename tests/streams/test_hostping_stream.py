"""Hostping stream core without Kafka: topology records, bus readings and loopback batches
through the codec into host_link.v1 states and verdict.v1 rows (the Faust agent's logic)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from producers.hostping.sim_source import PATTERNS, loopback_upload, sim_host, sim_uploads, topology_upload
from schemas.codec import decode
from schemas.host_topology import (
    HostTopologyError,
    parse_record,
    record_columns,
    topology_from_dict,
    topology_to_dict,
)
from schemas.intrahost import figure2_topology
from schemas.verdicts import verdict_id
from streams.hostping.hostping_stream import HostpingStream

START = 1_800_000_000_000_000_000  # a multiple of 20 s
ROUND = 30_000_000_000

# pattern -> (verdict kind, location) named after 3 rounds; the host is sim-<pattern>
EXPECTED = {
    "rnic_pcie_link_failure": ("rnic_pcie_link_failure", "sw2->rnic2"),
    "gpu_pcie_link_failure": ("gpu_pcie_link_failure", "sw2->gpu4"),
    "memory_channel_failure": ("memory_channel_failure", "cpu0->mem0"),
    "upi_failure": ("upi_failure", "cpu0->cpu1"),
    "cpu_root_port_failure": ("cpu_root_port_failure", "cpu0->sw0"),
    "memory_channel_flapping": ("memory_channel_flapping", "cpu0->mem0"),
    "ats_disabled": ("ats_disabled", None),
    "rnic_config": ("rnic_config", "rnic1"),
    "rnic_slow_start": ("rnic_slow_start", "rnic1"),
    "rnic_small_tx_window": ("rnic_small_tx_window", "rnic1"),
    "upi_overload": ("upi_overload", "cpu0->cpu1"),
    "memory_channel_overload": ("memory_channel_overload", "cpu0->mem0"),
}


def run(patterns: list[str], rounds: int = 3, bus: bool = True) -> tuple[HostpingStream, list]:
    s = HostpingStream()
    results = []
    for _, up in sim_uploads(patterns, rounds, START, ROUND):
        _, table = decode(up.payload, up.schema)  # what the mirrors and the agent decode
        if up.topic == "hosts.topology":
            s.on_topology(table)
        elif up.topic == "hostmetrics.raw":
            if bus:
                s.on_hostmetrics(table)
        else:
            results.append(s.process(table))
    return s, results


def test_topology_json_round_trip_and_baseline_reordered_to_topology_order():
    topo = figure2_topology("h1")
    assert topology_from_dict(json.loads(json.dumps(topology_to_dict(topo)))) == topo
    base = np.arange(40, dtype=float).reshape(4, 10) + 1
    cols = record_columns("a", 1, topo, base.tolist(), {"rnic0": {"slow_start": True, "tx_window": False}})
    rec = parse_record("h1", cols["topology"][0], cols["baseline"][0], cols["rnic_config"][0])
    assert rec.topology == topo and rec.baseline == base.tolist()
    assert rec.rnic_config == {"rnic0": {"slow_start": True, "tx_window": False}}
    # labels in another order still land in topology order
    b = json.loads(cols["baseline"][0])
    shuffled = {"rnics": b["rnics"][::-1], "endpoints": b["endpoints"], "gbps": b["gbps"][::-1]}
    assert parse_record("h1", cols["topology"][0], json.dumps(shuffled), None).baseline == base.tolist()


def test_bad_topology_records_name_the_problem():
    topo = figure2_topology("h1")
    cols = record_columns("a", 1, topo, np.ones((4, 10)).tolist())
    with pytest.raises(HostTopologyError, match="keyed 'h2' carries the topology of 'h1'"):
        parse_record("h2", cols["topology"][0], cols["baseline"][0], None)
    short = json.dumps({"rnics": ["rnic0"], "endpoints": topo.endpoints, "gbps": [[1.0] * 10]})
    with pytest.raises(HostTopologyError, match="every RNIC x endpoint"):
        parse_record("h1", cols["topology"][0], short, None)
    with pytest.raises(HostTopologyError, match="4 rows"):
        record_columns("a", 1, topo, [[1.0] * 10])
    s = HostpingStream()
    s.on_topology(pa.table({"host": ["h2"], "topology": [cols["topology"][0]], "baseline": [cols["baseline"][0]],
                            "rnic_config": pa.array([None], pa.string())}))
    assert s.hosts == [] and s.bad_topologies == 1


@pytest.mark.parametrize("pattern", sorted(EXPECTED))
def test_each_pattern_is_named_with_host_qualified_location(pattern: str):
    _, results = run([pattern])
    last = results[-1]
    host = f"sim-{pattern}"
    kind, where = EXPECTED[pattern]
    got = sorted(zip(last.verdicts["kind"].to_pylist(), last.verdicts["location"].to_pylist(), strict=True))
    assert got == [(kind, host if where is None else f"{host}:{where}")]
    v = last.verdicts.to_pylist()[0]
    ws = (START + 2 * ROUND) // 20_000_000_000 * 20_000_000_000
    assert v["window_start_ns"] == ws and v["window_end_ns"] == ws + 20_000_000_000
    assert v["verdict_id"] == verdict_id(ws, kind, v["location"], None, None)
    assert v["impact"] == "P2" and v["emitted_ns"] == START + 2 * ROUND
    assert v["confidence"] == (0.5 if pattern == "rnic_config" else 1.0)
    ev = json.loads(v["evidence"])
    assert ev["host"] == host and ev["pattern"] == kind and ev["round_ns"] == START + 2 * ROUND
    tested = 40 if PATTERNS[pattern].mode == "idle" else 4 * 4  # busy: 2 GPUs + local and remote memory
    assert (v["total_probes"], v["failed_probes"]) == (tested, 0)


def test_healthy_host_has_only_normal_links_and_no_verdict():
    _, results = run(["healthy"])
    assert all(r.verdicts is None for r in results)
    assert set(results[-1].host_links["state"].to_pylist()) == {"normal"}
    assert results[-1].host_links.num_rows == 19


def test_bus_readings_tell_upi_overload_and_without_them_the_cause_is_unknown():
    _, with_bus = run(["upi_overload"])
    _, without = run(["upi_overload"], bus=False)
    assert with_bus[-1].verdicts["kind"].to_pylist() == ["upi_overload"]
    assert json.loads(with_bus[-1].verdicts["evidence"][0].as_py())["utilisation"] == 0.95
    links = {r["link"]: r for r in with_bus[-1].host_links.to_pylist()}
    assert (links["cpu0->cpu1"]["state"], links["cpu0->cpu1"]["cause"]) == ("abnormal", "congestion")
    # no bus counter readable on the host: the degraded UPI link is not called a failure
    assert without[-1].verdicts["kind"].to_pylist() == ["upi_degraded"]
    assert json.loads(without[-1].verdicts["evidence"][0].as_py())["cause"] == "unknown (no bus counters on this host)"
    links = {r["link"]: r for r in without[-1].host_links.to_pylist()}
    assert (links["cpu0->cpu1"]["state"], links["cpu0->cpu1"]["cause"]) == (
        "abnormal", "unknown (no bus counters on this host)")


def test_flapping_after_three_rounds_and_replay_gives_equal_rows():
    _, a = run(["memory_channel_flapping"])
    _, b = run(["memory_channel_flapping"])
    states = [{r["link"]: r["state"] for r in res.host_links.to_pylist()}["cpu0->mem0"] for res in a]
    assert states == ["gray", "gray", "flapping"]
    assert [r.verdicts is None for r in a] == [True, True, False]
    assert a[-1].verdicts.equals(b[-1].verdicts) and a[-1].host_links.equals(b[-1].host_links)


def test_host_without_topology_is_skipped_and_others_still_analysed():
    s, _ = run(["rnic_pcie_link_failure"], rounds=1)
    ghost = decode(loopback_upload(sim_host("healthy", "ghost"), "healthy", "g", 0, START).payload)[1]
    known = decode(loopback_upload(sim_host("rnic_pcie_link_failure", "sim-rnic_pcie_link_failure"),
                                   "rnic_pcie_link_failure", "g", 1, START + ROUND).payload)[1]
    res = s.process(pa.concat_tables([ghost, known]))
    assert list(res.skipped) == ["ghost"] and "no host_topology.v1 record" in res.skipped["ghost"]
    assert set(res.host_links["host"].to_pylist()) == {"sim-rnic_pcie_link_failure"}
    assert res.verdicts["kind"].to_pylist() == ["rnic_pcie_link_failure"]


def test_changed_topology_drops_the_link_history():
    s, _ = run(["memory_channel_flapping"], rounds=2)
    host = "sim-memory_channel_flapping"
    assert s.processor.histories[host].gray_streak["cpu0->mem0"] == 2
    sim = sim_host("memory_channel_flapping", host)
    same = decode(topology_upload(sim, "memory_channel_flapping", "a", START).payload)[1]
    s.on_topology(same)
    assert s.processor.histories[host].gray_streak["cpu0->mem0"] == 2  # same topology: history kept
    topo = figure2_topology(host)
    bigger = type(topo)(host, {**topo.kinds, "gpu8": "gpu"}, {**topo.parent, "gpu8": "sw3"}, topo.upi)
    cols = record_columns("a", START, bigger, np.full((4, 11), 100.0).tolist())
    s.on_topology(pa.table({k: pa.array(v, pa.string() if k not in ("upload_ns",) else pa.int64())
                            for k, v in cols.items()}))
    assert host not in s.processor.histories and s.processor.baselines[host].shape == (4, 11)


def test_acs_enabled_is_named_on_its_switches_in_one_round():
    # Only one round: from the third on, Algorithm 1 also turns the P2P links flapping (see docs/hostping.md).
    _, results = run(["acs_enabled"], rounds=1)
    assert results[0].verdicts["kind"].to_pylist() == ["acs_enabled"]
    assert results[0].verdicts["location"].to_pylist() == ["sim-acs_enabled:sw0,sw1,sw2,sw3"]


def test_source_command_takes_hostping_sim_and_rejects_bad_use():
    from typer.testing import CliRunner

    from fabricscope.cli import app, register_all

    register_all()
    register_all()  # twice, as some tests do: still one working `source`
    runner = CliRunner()
    out = runner.invoke(app, ["source", "hostping-sim", "--pattern", "nope"]).output
    assert "unknown ['nope'] pattern" in out and "rnic_pcie_link_failure" in out
    out = runner.invoke(app, ["source", "synthetic", "--pattern", "upi_overload"]).output
    assert "only the hostping-sim source takes it" in out
    assert "--round-interval" in runner.invoke(app, ["source", "--help"]).output
