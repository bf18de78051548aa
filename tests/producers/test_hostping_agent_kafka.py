"""The Hostping host agent on this machine, end to end: `fabricscope hostping agent` -> real Kafka -> sink -> chdb.

What ``fabricscope up`` starts for the local host. This VM has no RNIC, no GPU and no uncore PMU,
so the agent monitors only: its inventory (every PCI function) and its live monitor rows must land
in ClickHouse, and they are compared with /sys read here independently (and ``lspci -D -n`` when
pciutils is installed: class and vendor:device per function).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sinks.query_endpoint import find_endpoint, query_remote

from conftest import wait_for

pytestmark = pytest.mark.kafka
PCI = Path("/sys/bus/pci/devices")


def _q(store: Path, sql: str) -> list[dict] | None:
    url = find_endpoint(store)
    return query_remote(url, sql).to_pylist() if url else None


def _netdev_counter(name: str, counter: str) -> int:
    return int(Path(f"/sys/class/net/{name}/statistics/{counter}").read_text())


def test_agent_lands_this_hosts_inventory_and_live_monitor_rows_in_the_store(pipeline_env, tmp_path):
    env, procs = pipeline_env
    host = Path("/proc/sys/kernel/hostname").read_text().strip()
    netdevs = [n for n in os.listdir("/sys/class/net") if "/devices/pci" in os.path.realpath(f"/sys/class/net/{n}")]
    before = {n: _netdev_counter(n, "rx_bytes") for n in netdevs}
    procs.start("sink")
    agent = procs.start("hostping", "agent", "--interval", "0.5")
    store = tmp_path / "var" / "clickhouse"

    inv = wait_for(lambda: (r := _q(store, f"SELECT * FROM pci_functions FINAL WHERE host = '{host}' ORDER BY bdf"))
                   and r, timeout=90, what="this host's inventory in pci_functions")
    listed = sorted(os.listdir(PCI))
    assert [r["bdf"] for r in inv] == listed
    for r in inv:
        d = PCI / r["bdf"]
        assert r["class_code"] == (d / "class").read_text().strip()
        assert (r["vendor_id"], r["device_id"]) == ((d / "vendor").read_text().strip(),
                                                    (d / "device").read_text().strip())
        assert (r["current_link_speed_gtps"] is None) == (not (d / "current_link_speed").exists())
        assert r["agent_id"] == f"hostping-{host}"
    if shutil.which("lspci"):
        out = subprocess.run(["lspci", "-D", "-n"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            bdf, cls, ids = line.split()[:3]  # 0000:00:03.0 0200: 1af4:1041
            r = next(x for x in inv if x["bdf"] == bdf)
            assert r["class_code"].removeprefix("0x")[:4] == cls.rstrip(":")
            assert f"{r['vendor_id'][2:]}:{r['device_id'][2:]}" == ids

    # live monitor rows: at least three 0.5 s samples, each naming its source
    rows = wait_for(lambda: (r := _q(store, f"SELECT device, metric, value, unit, sample_ns, source FROM host_metrics "
                                            f"WHERE host = '{host}' ORDER BY sample_ns"))
                    and len({x["sample_ns"] for x in r}) >= 3 and r, timeout=90, what="3 monitor samples")
    agent.terminate()
    agent.wait(timeout=30)
    after = {n: _netdev_counter(n, "rx_bytes") for n in netdevs}
    assert all(r["source"] for r in rows)
    counters = [r for r in rows if r["metric"] == "bus_counters"]
    assert counters and {r["device"] for r in counters} == {host}
    if not any(Path("/sys/bus/event_source/devices").glob("uncore_*")) and not any(
            Path("/sys/class/infiniband").glob("*")):
        assert {r["value"] for r in counters} == {0.0}  # no bus counter here: the analyzer will say "unknown"
    for n in netdevs:
        rx = [r for r in rows if r["device"] == n and r["metric"] == "rx_bytes"]
        assert rx and rx[0]["source"] == f"sysfs:class/net/{n}/statistics/rx_bytes"
        # deltas, not totals: together they cannot exceed what the counter moved while the agent ran
        assert 0 <= sum(r["value"] for r in rx) <= after[n] - before[n]
