"""The Hostping host agent over real trees: this machine's /sys, and captured GPU/RNIC host trees.

- this VM: ``fabricscope hostping agent --once --json`` against ``/sys/bus/pci/devices`` read here
  independently (and ``lspci`` when installed);
- ``sysfs_dgx_a100`` (a DGX A100 quarter, tests/fixtures/hostping/build_trees.py says where each
  value comes from): discovery, the monitor's rows between two reads with counters moved by hand,
  the agent's idle round and baseline with an injected loopback device;
- ``sysfs_xeon_uncore``: uncore PMU discovery and event encoding; perf_event_open for real
  (a software counter; the uncore PMU types do not exist on this VM, so opening them must fail clearly).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rdma_double import Device

from producers.hostping import uncore
from producers.hostping.agent import AgentConfig, HostAgent
from producers.hostping.discovery import discover
from producers.hostping.hwmon import HardwareMonitor
from producers.hostping.loopback_verbs import VerbsBackend
from producers.hostping.numa import parse_cpulist
from producers.hostping.pcie_link import link_gbps
from producers.hostping.perf_event import PERF_COUNT_SW_TASK_CLOCK, PERF_TYPE_SOFTWARE, PerfCounter, PerfEventError
from schemas.arrow_nano import encode_columns
from schemas.codec import decode

from conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "hostping"
DGX = FIXTURES / "sysfs_dgx_a100"
XEON = FIXTURES / "sysfs_xeon_uncore"
PCI = Path("/sys/bus/pci/devices")


def _read(p: Path) -> str:
    return p.read_text().strip() if p.exists() else ""


def test_once_json_reports_every_pci_function_of_this_host_as_sysfs_and_lspci_list_them(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fabricscope", "hostping", "agent", "--once", "--json",
                          "--interval", "0.2"], capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path)
    got = json.loads(out.stdout)
    inv = {r["bdf"]: r for r in got["publish"]["hosts.inventory"]}
    listed = sorted(os.listdir(PCI))
    assert sorted(inv) == listed and listed  # every function, nothing more
    for bdf in listed:
        d = PCI / bdf
        r = inv[bdf]
        assert (r["class_code"], r["vendor_id"], r["device_id"]) == (
            _read(d / "class"), _read(d / "vendor"), _read(d / "device"))
        assert r["driver"] == (os.path.basename(os.readlink(d / "driver")) if (d / "driver").exists() else "")
        assert r["numa_node"] == int(_read(d / "numa_node") or -1)
        has_link = (d / "current_link_speed").exists()
        assert (r["current_link_speed_gtps"] is not None) == has_link
        assert r["agent_id"] == f"hostping-{got['host']}" and r["host"] == got["host"]
    netdevs = {n: os.path.realpath(f"/sys/class/net/{n}") for n in os.listdir("/sys/class/net")}
    for n, real in netdevs.items():
        owners = [b for b in listed if f"/{b}/" in real]
        if owners:
            assert n in inv[owners[-1]]["netdevs"].split(",")
    if shutil.which("lspci"):
        ls = subprocess.run(["lspci", "-D", "-n"], capture_output=True, text=True, check=True).stdout.split()
        lspci = sorted(w for w in ls if w.count(":") == 2 and "." in w)
        assert lspci == listed
    # one set of monitor readings: every netdev's counters as deltas, and the bus-counter count
    rows = got["publish"]["hostmetrics.raw"]
    assert {r["source"].split(":")[0] for r in rows} >= {"derived"}
    assert any(r["metric"] == "bus_counters" and r["device"] == got["host"] for r in rows)
    for n in (n for n, real in netdevs.items() if "/devices/pci" in real):
        assert {r["metric"] for r in rows if r["device"] == n} >= {"rx_bytes", "tx_bytes"}
    if not any(Path("/sys/class/infiniband").glob("*")):
        assert got["loopback"] == {"available": False,
                                   "reason": "loopback needs an RNIC: none found under class/infiniband; "
                                             "monitoring only"}
    assert "hostping agent on" in out.stderr  # says why loopback does not run


def test_discovery_of_a_dgx_a100_tree():
    d = discover(DGX, DGX / "no-proc", host="dgx-a100")
    assert len(d.functions) == 16
    by = {f.bdf: f for f in d.functions}
    assert [b for b, f in by.items() if f.kind == "gpu"] == ["0000:07:00.0", "0000:0f:00.0", "0000:87:00.0"]
    mlx = by["0000:0c:00.0"]
    assert (mlx.kind, mlx.driver, mlx.netdevs, mlx.rdma_devices, mlx.aer) == (
        "rnic", "mlx5_core", ("ibp12s0",), ("mlx5_0",), True)
    assert mlx.path_to_root == ("0000:00:01.1", "0000:01:00.0", "0000:02:04.0") and mlx.parent_bdf == "0000:02:04.0"
    assert (by["0000:81:00.0"].current_link_speed_gtps, by["0000:81:00.0"].max_link_speed_gtps) == (8.0, 16.0)
    assert [(r.name, r.bdf, r.netdevs, r.numa_node, r.line_rate_gbps) for r in d.rnics] == [
        ("mlx5_0", "0000:0c:00.0", ("ibp12s0",), 0, 200.0), ("mlx5_1", "0000:12:00.0", ("ibp18s0",), 0, 200.0),
        ("mlx5_6", "0000:8d:00.0", ("ibp141s0",), 1, 200.0)]
    assert [(n.node, len(n.cpus), n.mem_bytes) for n in d.nodes] == [(0, 64, 263808728 * 1024),
                                                                     (1, 64, 264215152 * 1024)]
    topo = d.topology.topology
    assert topo.rnics == ["mlx5_0", "mlx5_1", "mlx5_6"] and topo.endpoints == ["gpu0", "gpu1", "gpu2", "mem0", "mem1"]
    assert topo.affinitive("mlx5_0") == ["gpu0", "gpu1", "mem0"]  # same root port, same socket
    assert set(topo.path("mlx5_6", "mem0")) == {"sw:0000:81:00.0->mlx5_6", "cpu1->sw:0000:81:00.0", "cpu0->cpu1",
                                                "cpu0->mem0"}
    assert d.pmus == [] and d.bus_counters == []  # AMD Rome: no uncore_* PMU, so no bus counter
    assert d.perf_event_paranoid == "unreadable"


def _moved_copy(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(DGX, root, symlinks=True)
    return root


def test_monitor_rows_between_two_reads_of_a_dgx_a100_tree(tmp_path):
    root = _moved_copy(tmp_path)
    d = discover(root, root / "no-proc", host="dgx-a100")
    mon = HardwareMonitor(d, use_ethtool=False)
    prev = mon.read()
    ep = root / "devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:04.0/0000:0c:00.0"
    (ep / "net/ibp12s0/statistics/tx_bytes").write_text(str(827364510 + 2_500_000_000))
    aer = (ep / "aer_dev_correctable").read_text().replace("RxErr 3", "RxErr 5").replace("TOTAL_ERR_COR 4",
                                                                                         "TOTAL_ERR_COR 6")
    (ep / "aer_dev_correctable").write_text(aer)
    (ep / "infiniband/mlx5_0/ports/1/hw_counters/local_ack_timeout_err").write_text("7")
    cur = mon.read()
    cur.t_ns = prev.t_ns + 1_000_000_000  # exactly 1 s apart
    rows = mon.rows(prev, cur, "agent-dgx")
    got = {(r["device"], r["metric"]): (r["value"], r["source"]) for r in rows}
    assert all(r["host"] == "dgx-a100" and r["sample_ns"] == cur.t_ns for r in rows)
    # every hop's link, and the narrowest hop on each endpoint's path to the root port
    assert got[("0000:81:00.0", "pcie_link_speed_gtps")] == (8.0, "sysfs:current_link_speed")
    assert got[("0000:81:00.0", "pcie_link_max_speed_gtps")] == (16.0, "sysfs:max_link_speed")
    assert got[("0000:87:00.0", "pcie_path_min_gbps")] == (round(link_gbps(8.0, 16), 3),
                                                          "derived: narrowest hop 0000:81:00.0 (sysfs)")
    assert got[("0000:07:00.0", "pcie_path_min_gbps")][0] == round(link_gbps(16.0, 16), 3)
    # deltas, not totals
    assert got[("0000:0c:00.0", "aer_RxErr")] == (2, "sysfs:aer_dev_correctable")
    assert got[("0000:0c:00.0", "aer_TOTAL_ERR_COR")][0] == 2
    assert ("0000:0c:00.0", "aer_BadTLP") not in got  # unchanged individual counters are not repeated
    assert got[("0000:12:00.0", "aer_TOTAL_ERR_NONFATAL")][0] == 0
    assert got[("ibp12s0", "tx_bytes")] == (2_500_000_000, "sysfs:class/net/ibp12s0/statistics/tx_bytes")
    assert got[("mlx5_0/1", "local_ack_timeout_err")][0] == 7
    assert got[("mlx5_1/1", "local_ack_timeout_err")][0] == 0
    # RNIC throughput and its PCIe link's utilisation: 2.5 GB in 1 s = 20 Gb/s over Gen4 x16
    assert got[("mlx5_0", "throughput_gbps")][0] == pytest.approx(20.0)
    assert got[("sw:0000:01:00.0->mlx5_0", "bus_util")] == (
        pytest.approx(20.0 / link_gbps(16.0, 16), abs=1e-6), "derived: mlx5_0 throughput / PCIe link Gb/s")
    assert got[("sw:0000:81:00.0->mlx5_6", "bus_util")][0] == 0.0
    assert got[("dgx-a100", "bus_counters")][0] == 3  # the three RNIC links; no uncore, no NVML here
    # the rows are a valid hostmetric.v2 batch
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    key, table = decode(encode_columns("hostmetric.v2", cols), "hostmetric.v2")
    assert key == "hostmetric.v2" and table.num_rows == len(rows)


def test_agent_runs_an_idle_round_publishes_the_baseline_then_the_topology(tmp_path):
    d = discover(DGX, DGX / "no-proc", host="dgx-a100")
    topo = d.topology.topology
    paths = {(r, e): (1.0 if topo.is_p2p(r, e) else 2.2, 190.0 if topo.is_p2p(r, e) else 120.0)
             for r in topo.rnics for e in topo.endpoints}
    dev = Device(paths)
    cfg = AgentConfig(sysfs=DGX, procfs=DGX / "no-proc", host="dgx-a100", interval_s=0.01, status_interval_s=0.01,
                      use_nvml=False, use_ethtool=False)
    agent = HostAgent(cfg, backend_factory=lambda root: VerbsBackend(root, device=dev, iterations=1, warmup=0,
                                                                     clock=dev.clock))
    sent: list[tuple[str, str, str, bytes]] = []
    cycles = agent.run(lambda *m: sent.append(m), lambda: False, max_cycles=3)
    agent.close()
    assert cycles == 3
    topics = [m[0] for m in sent]
    assert topics[0] == "hosts.inventory" and topics.count("hostmetrics.raw") == 3
    assert topics.count("hosts.topology") == 1
    assert topics.index("hosts.topology") < topics.index("loopback.raw")  # the worker needs the topology first
    _, inv = decode(sent[0][3], "pci_function.v1")
    assert inv.num_rows == 16
    _, lb = decode(next(m[3] for m in sent if m[0] == "loopback.raw"), "loopback.v1")
    assert lb.num_rows == 3 * 5 and set(lb["mode"].to_pylist()) == {"idle"}  # full mesh: 3 RNICs x 5 endpoints
    _, tp = decode(next(m[3] for m in sent if m[0] == "hosts.topology"), "host_topology.v1")
    base = json.loads(tp["baseline"][0].as_py())
    assert base["rnics"] == topo.rnics and base["endpoints"] == topo.endpoints
    assert base["gbps"][0][0] == pytest.approx(190.0, rel=1e-4)  # mlx5_0 -> gpu0: same switch
    assert base["gbps"][2][3] == pytest.approx(120.0, rel=1e-4)  # mlx5_6 -> mem0: across UPI
    metrics = [decode(m[3], "hostmetric.v2")[1] for m in sent if m[0] == "hostmetrics.raw"]
    status = [r for t in metrics for r in t.to_pylist() if r["metric"] == "host_status"]
    assert status and status[0]["value"] == 0.0 and "Thp_low 5% of 200 Gb/s" in status[0]["source"]


def test_uncore_pmus_of_a_xeon_are_encoded_from_their_format_files():
    pmus = uncore.read_pmus(SysfsSnapshotRoot(XEON))
    assert [p.name for p in pmus] == ["uncore_iio_1", "uncore_iio_free_running_1", "uncore_imc_0", "uncore_imc_1",
                                      "uncore_upi_0"]
    d = discover(XEON, XEON / "no-proc", host="xeon")
    got = {(c.pmu, c.event, c.cpu): (c.config[0], c.bytes_per_count, c.link) for c in d.bus_counters}
    # event | umask << 8 (format/event config:0-7, format/umask config:8-15)
    assert got[("uncore_imc_0", "cas_count_read", 0)] == (0x0304, 64.0, "cpu0->mem0")
    assert got[("uncore_imc_1", "cas_count_write", 28)] == (0x0c04, 64.0, "cpu1->mem1")
    # UPI: no named data event in sysfs, so the raw TxL_FLITS.ALL_DATA at 64/9 bytes per flit
    assert got[("uncore_upi_0", "txl_flits_all_data", 0)] == (0x0f02, 64 / 9, "cpu0->cpu1")
    # IIO stack 1's free-running PCIe counters (4 bytes a count), one set per socket's root bus
    assert got[("uncore_iio_free_running_1", "bw_in_port2", 28)] == (0x22ff, pytest.approx(4.0),
                                                                   "pcie_root_bus:0000:85")
    assert len(d.bus_counters) == 2 * (2 * 2 + 1 + 4)  # per socket: 2 IMC x (read, write), UPI, 4 IIO ports
    assert d.bus_skipped == ["uncore_iio_1: programmable IIO counters are not used (its free-running bandwidth "
                             "counters are)"]
    imc = next(p for p in pmus if p.name == "uncore_imc_0")
    assert uncore.encode(imc, "event=0xff,umask=0x1,thresh8=2") == (0xff | 1 << 8 | 2 << 24, 0, 0)
    with pytest.raises(ValueError, match="does not fit 8 bits"):
        uncore.encode(imc, "event=0x100")
    with pytest.raises(ValueError, match="no format/cmask"):
        uncore.encode(imc, "cmask=1")
    upi = next(p for p in pmus if p.name == "uncore_upi_0")
    assert uncore.encode(upi, "umask_ext=0x1ff") == (0xff << 8 | 1 << 32, 0, 0)  # split ranges


def test_bus_bandwidth_sums_a_socket_and_takes_the_busier_upi_direction():
    d = discover(XEON, XEON / "no-proc", host="xeon")
    c = {(x.pmu, x.event, x.cpu): x for x in d.bus_counters}
    prev = {x: 0.0 for x in d.bus_counters}
    cur = dict(prev)
    cur[c[("uncore_imc_0", "cas_count_read", 0)]] = 4e9  # bytes
    cur[c[("uncore_imc_1", "cas_count_write", 0)]] = 1e9
    cur[c[("uncore_upi_0", "txl_flits_all_data", 0)]] = 3e9
    cur[c[("uncore_upi_0", "txl_flits_all_data", 28)]] = 5e9
    bw = uncore.link_bandwidth(prev, cur, 2.0)
    assert bw[("cpu0->mem0", "mem_bw_gbps")][0] == pytest.approx((4e9 + 1e9) * 8 / 2 / 1e9)  # 20 Gb/s
    assert bw[("cpu1->mem1", "mem_bw_gbps")][0] == 0.0
    assert bw[("cpu0->cpu1", "upi_bw_gbps")][0] == pytest.approx(5e9 * 8 / 2 / 1e9)  # busier direction
    assert "perf:uncore_imc_1/cas_count_write" in bw[("cpu0->mem0", "mem_bw_gbps")][1]
    with pytest.raises(ValueError, match="> 0 s"):
        uncore.link_bandwidth(prev, cur, 0)


def test_iio_counters_give_the_root_port_links_bandwidth_and_utilisation():
    d = discover(XEON, XEON / "no-proc", host="xeon")
    mon = HardwareMonitor(d, use_ethtool=False, bus_capacity_gbps={"cpu0->mem0": 1000.0})
    prev, cur = mon.read(), mon.read()
    prev.t_ns, cur.t_ns = 0, 1_000_000_000
    c = {(x.pmu, x.event, x.cpu): x for x in d.bus_counters}
    prev.bus = {x: 0.0 for x in d.bus_counters}
    cur.bus = dict(prev.bus)
    cur.bus[c[("uncore_iio_free_running_1", "bw_in_port0", 0)]] = 4e9  # bytes into socket 0's stack 1
    cur.bus[c[("uncore_iio_free_running_1", "bw_in_port1", 0)]] = 1e9
    cur.bus[c[("uncore_imc_0", "cas_count_read", 0)]] = 25e9
    got = {(r["device"], r["metric"]): (r["value"], r["source"]) for r in mon.rows(prev, cur, "a")}
    # root bus 0000:17 holds one root port, 17:00.0, above mlx5_0: its link carries the stack's 40 Gb/s
    assert got[("cpu0->mlx5_0", "pcie_bw_in_gbps")][0] == pytest.approx(40.0)
    assert got[("cpu0->mlx5_0", "bus_util")] == (
        pytest.approx(40.0 / link_gbps(8.0, 16), abs=1e-6),
        "perf:uncore_iio_free_running_1/bw_in_port0+uncore_iio_free_running_1/bw_in_port1+"
        "uncore_iio_free_running_1/bw_in_port2+uncore_iio_free_running_1/bw_in_port3 / root port 0000:17:00.0 "
        "link Gb/s")
    assert got[("cpu1->gpu0", "bus_util")][0] == 0.0
    assert got[("cpu0->mem0", "mem_bw_gbps")][0] == pytest.approx(200.0)
    assert got[("cpu0->mem0", "bus_util")][0] == pytest.approx(0.2)  # 200 of the 1000 Gb/s given
    assert ("cpu1->mem1", "bus_util") not in got  # no capacity given: bandwidth only
    assert got[("cpu0->cpu1", "upi_bw_gbps")][0] == 0.0
    assert got[("xeon", "bus_counters")][0] == 3  # cpu0->mlx5_0, cpu1->gpu0, cpu0->mem0


def test_perf_event_open_counts_for_real_and_uncore_types_absent_here_fail_clearly():
    with PerfCounter(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, pid=0, cpu=-1, label="task-clock") as pc:
        a = pc.read()
        sum(range(200_000))
        b = pc.read()
    assert b > a  # task clock in ns, advanced by the work above
    d = discover(XEON, XEON / "no-proc", host="xeon")
    reader = uncore.BusCounterReader(d.bus_counters)
    if not reader.readable:  # PMU types 17/18/23/41 are not this VM's
        assert len(reader.errors) == 18
        assert all("perf_event_open uncore_" in e for e in reader.errors)
    reader.close()
    with pytest.raises(PerfEventError, match="bogus.*does not exist on this machine"):
        PerfCounter(4242, 1, cpu=0, label="bogus")


def test_parse_cpulist():
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("") == ()
    with pytest.raises(ValueError, match="'x-2' is not N or N-M"):
        parse_cpulist("x-2")


def SysfsSnapshotRoot(root: Path):  # noqa: ANN201, N802 - a SysfsSnapshot over a captured root
    from producers.hostping.sysfs import SysfsSnapshot

    return SysfsSnapshot.from_root(root)


GOLDEN = FIXTURES / "sysfs_dgx_a100.golden.json"


def test_golden_agent_output_over_the_dgx_a100_tree():
    """Everything the agent finds and publishes over the tree (one monitor cycle, counters unchanged).

    A change must update the golden file on purpose:
    ``FABRICSCOPE_UPDATE_GOLDEN=1 python -m pytest tests/producers/test_hostping_host_agent.py``.
    """
    agent = HostAgent(AgentConfig(sysfs=DGX, procfs=DGX / "no-proc", host="dgx-a100", use_nvml=False,
                                  use_ethtool=False, use_loopback=False))
    prev = agent.monitor.read()
    cur = agent.monitor.read()
    prev.t_ns, cur.t_ns = 1_000_000_000, 2_000_000_000
    disc = agent.disc.to_json()
    disc["sysfs_root"] = "<fixture>"
    got = {"discovery": disc, "inventory_columns": agent.inventory_columns(1_000_000_000),
           "hostmetrics": agent.monitor.rows(prev, cur, agent.agent_id), "loopback": agent.loopback_reason}
    agent.close()
    if os.environ.get("FABRICSCOPE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(GOLDEN.read_text())


MLX5_ETHTOOL = """NIC statistics:
     rx_bytes_phy: {rx}
     tx_bytes_phy: {tx}
     tx_prio3_pause_duration: {pause}
     rx_discards_phy: 0
"""


def test_pause_above_pfc_high_starts_an_affinitive_round_once_a_baseline_exists(tmp_path):
    from producers.hostping.ethtool import parse

    d = discover(DGX, DGX / "no-proc", host="dgx-a100")
    topo = d.topology.topology
    base = tmp_path / "baseline.json"
    base.write_text(json.dumps({"rnics": topo.rnics, "endpoints": topo.endpoints,
                                "gbps": [[190.0] * len(topo.endpoints)] * len(topo.rnics)}))
    dev = Device({(r, e): (1.0, 190.0) for r in topo.rnics for e in topo.endpoints})
    cfg = AgentConfig(sysfs=DGX, procfs=DGX / "no-proc", host="dgx-a100", interval_s=0.01, status_interval_s=1e6,
                      busy_round_min_s=1e6, use_nvml=False, baseline_file=base)
    agent = HostAgent(cfg, backend_factory=lambda root: VerbsBackend(root, device=dev, iterations=1, warmup=0,
                                                                     clock=dev.clock))
    reads = {"n": 0}

    def ethtool_s(netdev: str) -> tuple[dict[str, int] | None, str]:
        if netdev != "ibp12s0":
            return None, "no stats available"
        reads["n"] += 1  # mlx5_0 pauses: 1 s of pause duration (µs) per read, far above 3 %
        return parse(MLX5_ETHTOOL.format(rx=10**6, tx=10**6, pause=reads["n"] * 1_000_000)).counters, ""

    agent.monitor.ethtool_reader = ethtool_s
    sent: list[tuple[str, str, str, bytes]] = []
    agent.run(lambda *m: sent.append(m), lambda: False, max_cycles=3)
    agent.close()
    topics = [m[0] for m in sent]
    assert topics[:2] == ["hosts.inventory", "hosts.topology"]  # the given baseline: published at once
    rounds = [decode(m[3], "loopback.v1")[1] for m in sent if m[0] == "loopback.raw"]
    assert len(rounds) == 1  # busy_round_min_s holds the next ones back
    lb = rounds[0]
    assert set(lb["mode"].to_pylist()) == {"busy"}
    got = sorted(zip(lb["rnic"].to_pylist(), lb["dst_endpoint"].to_pylist(), strict=True))
    # affinitive endpoints (same root port, own socket's memory) plus the remote memory node (§4.3)
    assert got == sorted([("mlx5_0", e) for e in ("gpu0", "gpu1", "mem0", "mem1")]
                         + [("mlx5_1", e) for e in ("gpu0", "gpu1", "mem0", "mem1")]
                         + [("mlx5_6", e) for e in ("gpu2", "mem1", "mem0")])
    rows = [r for m in sent if m[0] == "hostmetrics.raw" for r in decode(m[3], "hostmetric.v2")[1].to_pylist()]
    pause = [r for r in rows if (r["device"], r["metric"]) == ("mlx5_0", "tx_pause_ratio")]
    assert pause and all(r["value"] > 0.03 for r in pause)
    assert [r["value"] for r in rows if (r["device"], r["metric"]) == ("ibp12s0", "tx_prio3_pause_duration")] == [
        1_000_000] * 3  # ethtool -S deltas


def test_agent_output_through_the_analyzer_names_a_degraded_gpu_link_with_an_unknown_cause():
    """Agent (DGX A100 tree, device double) -> its own uploads -> the worker's Hostping analytics."""
    from streams.hostping.hostping_stream import HostpingStream

    d = discover(DGX, DGX / "no-proc", host="dgx-a100")
    topo = d.topology.topology
    dev = Device({(r, e): (1.0, 190.0) if topo.is_p2p(r, e) else (2.2, 120.0)
                  for r in topo.rnics for e in topo.endpoints})
    cfg = AgentConfig(sysfs=DGX, procfs=DGX / "no-proc", host="dgx-a100", interval_s=0.01, status_interval_s=0.01,
                      use_nvml=False, use_ethtool=False)
    agent = HostAgent(cfg, backend_factory=lambda root: VerbsBackend(root, device=dev, iterations=1, warmup=0,
                                                                     clock=dev.clock))
    stream, results = HostpingStream(), []

    def publish(topic: str, schema: str, key: str, payload: bytes) -> None:
        _, table = decode(payload, schema)
        if topic == "hosts.topology":
            stream.on_topology(table)
        elif topic == "hostmetrics.raw":
            stream.on_hostmetrics(table)
        elif topic == "loopback.raw":
            results.append(stream.process(table))
            for r in topo.rnics:  # after the healthy first round, GPU0's PCIe link drops to 40 Gb/s
                dev.paths[(r, "gpu0")] = (dev.paths[(r, "gpu0")][0], 40.0)

    agent.run(publish, lambda: False, max_cycles=2)
    agent.close()
    assert len(results) == 2
    assert results[0].verdicts is None and set(results[0].host_links["state"].to_pylist()) == {"normal"}
    links = {r["link"]: r for r in results[1].host_links.to_pylist()}
    # the host publishes bus_util for its RNIC links only (no NVML): this link's cause is unknown, not failure
    assert (links["sw:0000:01:00.0->gpu0"]["state"], links["sw:0000:01:00.0->gpu0"]["cause"]) == (
        "abnormal", "unknown (no bus counter for this link)")
    v = results[1].verdicts.to_pylist()
    assert [(x["kind"], x["location"]) for x in v] == [("gpu_pcie_link_degraded", "dgx-a100:sw:0000:01:00.0->gpu0")]
