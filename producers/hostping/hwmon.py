"""The 1 s hardware monitor of the Hostping agent (§3.2, §5): one read of every source, rows from two reads.

:meth:`HardwareMonitor.read` takes a cumulative snapshot of every hardware source the host has
(each one module, each over the same sysfs root); :meth:`HardwareMonitor.rows` turns two
snapshots into ``hostmetric.v2`` rows, each naming its ``source``:

- PCIe link speed and width, current and maximum, of every function with link files: every hop
  from an endpoint up to its root port (``sysfs:current_link_speed`` ...); per GPU/RNIC the
  narrowest hop's Gb/s (``pcie_path_min_gbps``) and which hop it is;
- AER counters as deltas (``TOTAL_ERR_*`` always, individual counters when they moved);
- netdev statistics, ``ethtool -S`` and RDMA ``hw_counters`` as deltas; per RNIC the derived
  throughput and Tx pause ratio (:func:`producers.hostping.monitor.rates`);
- NVML link generation/width, PCIe throughput, replay counter, utilisation, Xid events;
- bus bandwidth and utilisation (``metric = bus_util``, ``device`` = the topology link the
  analyzer names): perf uncore memory-controller/UPI counters, NVML PCIe throughput over the GPU's
  link, RNIC throughput over its PCIe link. ``bus_counters`` (device = host) counts the links with
  a utilisation: 0 tells the analyzer that no abnormal link on this host can be judged congested.

Nothing is estimated where a source is missing: no row is written for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from producers.hostping import aer_sysfs, ethtool, hw_counters, monitor, netdev
from producers.hostping.discovery import HostDiscovery
from producers.hostping.nvml import NVML_METRICS, GpuSample, NvmlSession, link_utilisation
from producers.hostping.pci_inventory import read_functions
from producers.hostping.pcie_link import link_gbps
from producers.hostping.rnics import Rnic
from producers.hostping.sysfs import SysfsSnapshot
from producers.hostping.uncore import PCIE_ROOT_BUS, BusCounter, BusCounterReader, link_bandwidth

BUS_UTIL = "bus_util"


@dataclass
class MonitorSnapshot:
    """Cumulative readings at one instant (``t_ns``: this host's clock)."""

    t_ns: int
    links: dict[str, tuple[float | None, int | None, float | None, int | None]] = field(default_factory=dict)
    aer: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    netdev: dict[str, dict[str, int]] = field(default_factory=dict)
    ethtool: dict[str, dict[str, int]] = field(default_factory=dict)
    hw: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    gpus: list[GpuSample] = field(default_factory=list)
    xids: list[tuple[int, int]] = field(default_factory=list)
    bus: dict[BusCounter, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def _delta(prev: int | None, cur: int) -> int:
    """Counter increase; a counter that went down (driver reload, reset) counts from zero."""
    return cur - prev if prev is not None and cur >= prev else cur


class HardwareMonitor:
    """Reads every source found by discovery.

    Args:
        disc: the host's :class:`~producers.hostping.discovery.HostDiscovery`.
        nvml: an open :class:`~producers.hostping.nvml.NvmlSession`, or ``None`` (no GPU/NVML).
        bus: the opened uncore counters, or ``None`` (none planned or none readable).
        use_ethtool: run ``ethtool -S`` on the netdevs (skipped when the tool is missing).
        bus_capacity_gbps: link -> capacity (Gb/s) for memory channels and UPI, from the operator.
    """

    def __init__(self, disc: HostDiscovery, nvml: NvmlSession | None = None, bus: BusCounterReader | None = None,
                 use_ethtool: bool = True, bus_capacity_gbps: dict[str, float] | None = None) -> None:
        self.disc = disc
        self.snap = SysfsSnapshot.from_root(disc.sysfs_root)
        self.nvml = nvml
        self.bus = bus
        self.use_ethtool = use_ethtool
        self.ethtool_reader = ethtool.read_live  # netdev -> (counters, why not); replaceable for captured outputs
        self.capacity = dict(bus_capacity_gbps or {})
        self.netdevs = sorted({n for f in disc.functions for n in f.netdevs})
        topo = disc.topology
        self.node_of_bdf = {b: n for n, b in topo.bdf.items()} if topo else {}
        self.parent = topo.topology.parent if topo else {}
        self.root_ports = self._root_ports()

    def _root_ports(self) -> dict[str, list[tuple[str, str]]]:
        """PCIe root bus (``0000:17``) -> ``[(root-port link of the topology, root port BDF)]``.

        A topology node hanging off a CPU (a switch ``sw:<upstream bdf>`` or a device) reaches it
        through the root port first on its path; that port sits on the root bus an IIO stack counts.
        """
        topo = self.disc.topology
        if topo is None:
            return {}
        fn = {f.bdf: f for f in self.disc.functions}
        out: dict[str, list[tuple[str, str]]] = {}
        for child, par in sorted(topo.topology.parent.items()):
            if topo.topology.kinds.get(par) != "cpu" or topo.topology.kinds.get(child) == "mem":
                continue
            f = fn.get(child[3:] if child.startswith("sw:") else topo.bdf.get(child, ""))
            if f is None:
                continue
            port = f.path_to_root[0] if f.path_to_root else f.bdf
            out.setdefault(port[:7], []).append((f"{par}->{child}", port))
        return out

    def read(self) -> MonitorSnapshot:
        """One cumulative reading of every source (sysfs re-read live, not from the discovery)."""
        s = MonitorSnapshot(time.time_ns())
        self.snap = SysfsSnapshot.from_root(self.disc.sysfs_root)  # no cache: link files change
        for f in read_functions(self.snap):
            if f.current_link_speed_gtps is not None or f.current_link_width is not None:
                s.links[f.bdf] = (f.current_link_speed_gtps, f.current_link_width, f.max_link_speed_gtps,
                                  f.max_link_width)
        s.aer = aer_sysfs.read(self.snap)
        s.netdev = netdev.read(self.snap, self.netdevs)
        if self.use_ethtool:
            for dev in self.netdevs:
                counters, err = self.ethtool_reader(dev)
                if counters is not None:
                    s.ethtool[dev] = counters
                else:
                    s.errors[f"ethtool:{dev}"] = err
        s.hw = hw_counters.read(self.snap)
        if self.nvml is not None:
            s.gpus = self.nvml.sample()
            s.xids = self.nvml.xid_events()
        if self.bus is not None and self.bus.readable:
            try:
                s.bus = self.bus.read()
            except OSError as err:  # a counter detached (CPU offlined): this reading has no bus rows
                s.errors["bus"] = str(err)
        return s

    def rows(self, prev: MonitorSnapshot, cur: MonitorSnapshot, agent_id: str) -> list[dict[str, object]]:
        """``hostmetric.v2`` rows for the interval ``prev`` -> ``cur`` (link values are ``cur``'s).

        Raises:
            ValueError: ``cur`` is not later than ``prev``.
        """
        dt_s = (cur.t_ns - prev.t_ns) / 1e9
        if dt_s <= 0:
            raise ValueError(f"monitor readings must be taken in order (dt = {dt_s} s)")
        host, t = self.disc.host, cur.t_ns
        out: list[dict[str, object]] = []

        def row(device: str, metric: str, value: float, unit: str, source: str) -> None:
            out.append({"agent_id": agent_id, "upload_ns": t, "host": host, "device": device, "metric": metric,
                        "value": float(value), "unit": unit, "sample_ns": t, "source": source})

        self._link_rows(cur, row)
        for bdf, files in sorted(cur.aer.items()):
            for fname, counts in sorted(files.items()):
                before = prev.aer.get(bdf, {}).get(fname, {})
                for name, v in sorted(counts.items()):
                    d = _delta(before.get(name), v)
                    if name.startswith("TOTAL_ERR") or d:
                        row(bdf, f"aer_{name}", d, "count", f"sysfs:{fname}")
        for dev, counters in sorted(cur.netdev.items()):
            for name, v in sorted(counters.items()):
                row(dev, name, _delta(prev.netdev.get(dev, {}).get(name), v), "count",
                    f"sysfs:class/net/{dev}/statistics/{name}")
        for dev, counters in sorted(cur.ethtool.items()):
            before = prev.ethtool.get(dev, {})
            for name, v in sorted(counters.items()):
                d = _delta(before.get(name), v)
                if d:  # ethtool -S lists hundreds of counters; an unchanged one says nothing new
                    row(dev, name, d, "count", "ethtool -S")
        for (dev, port), counters in sorted(cur.hw.items()):
            for name, v in sorted(counters.items()):
                row(f"{dev}/{port}", name, _delta(prev.hw.get((dev, port), {}).get(name), v), "count",
                    f"sysfs:class/infiniband/{dev}/ports/{port}/hw_counters")
        util_links = self._rnic_rows(prev, cur, row)
        util_links += self._gpu_rows(cur, row)
        util_links += self._uncore_rows(prev, cur, dt_s, row)
        row(host, "bus_counters", len(set(util_links)), "links",
            "derived: links with a bus utilisation (perf uncore, NVML, RNIC throughput)")
        return out

    def _link_rows(self, cur: MonitorSnapshot, row) -> None:  # noqa: ANN001
        for bdf, (speed, width, mspeed, mwidth) in sorted(cur.links.items()):
            for metric, v, unit, f in (("pcie_link_speed_gtps", speed, "GT/s", "current_link_speed"),
                                       ("pcie_link_width", width, "lanes", "current_link_width"),
                                       ("pcie_link_max_speed_gtps", mspeed, "GT/s", "max_link_speed"),
                                       ("pcie_link_max_width", mwidth, "lanes", "max_link_width")):
                if v is not None:
                    row(bdf, metric, v, unit, f"sysfs:{f}")
        for f in self.disc.functions:
            if f.kind not in ("gpu", "rnic"):
                continue
            hops = [(b, cur.links.get(b)) for b in (f.bdf, *reversed(f.path_to_root))]
            gbps = [(link_gbps(v[0], v[1]), b) for b, v in hops if v and v[0] and v[1]]
            if gbps:
                g, at = min(gbps)
                row(f.bdf, "pcie_path_min_gbps", round(g, 3), "Gb/s", f"derived: narrowest hop {at} (sysfs)")

    def _link_of(self, bdf: str) -> str | None:
        node = self.node_of_bdf.get(bdf)
        return f"{self.parent[node]}->{node}" if node in self.parent else None

    def rnic_rates(self, prev: MonitorSnapshot, cur: MonitorSnapshot) -> list[tuple[Rnic, monitor.RnicRates]]:
        """Each RNIC's rates between two readings, from its netdevs' statistics and ``ethtool -S`` and its
        ports' ``hw_counters`` merged (:func:`producers.hostping.monitor.rates`); RNICs without counters
        are left out."""
        dt_s = (cur.t_ns - prev.t_ns) / 1e9
        out = []
        for r in self.disc.rnics:
            a: dict[str, int] = {}
            b: dict[str, int] = {}
            for dev in r.netdevs:
                a |= prev.netdev.get(dev, {}) | prev.ethtool.get(dev, {})
                b |= cur.netdev.get(dev, {}) | cur.ethtool.get(dev, {})
            for port in {p for (d, p) in cur.hw if d == r.name}:
                a |= prev.hw.get((r.name, port), {})
                b |= cur.hw.get((r.name, port), {})
            if b and dt_s > 0:
                out.append((r, monitor.rates(r.name, a, b, dt_s)))
        return out

    def _rnic_rows(self, prev: MonitorSnapshot, cur: MonitorSnapshot, row) -> list[str]:  # noqa: ANN001
        links = []
        for r, rt in self.rnic_rates(prev, cur):
            ethtool = any(d in cur.ethtool for d in r.netdevs)
            src = "derived: netdev/ethtool bytes" if ethtool else "derived: sysfs netdev bytes"
            row(r.name, "throughput_gbps", round(rt.throughput_gbps, 6), "Gb/s", src)
            if ethtool:
                row(r.name, "tx_pause_ratio", round(rt.tx_pause_ratio, 6), "ratio",
                    "derived: ethtool -S tx_prio*_pause_duration")
            link = self._link_of(r.bdf)
            f = next((x for x in self.disc.functions if x.bdf == r.bdf), None)
            hops = [cur.links.get(b) for b in ((f.bdf, *f.path_to_root) if f else ())]
            caps = [link_gbps(v[0], v[1]) for v in hops if v and v[0] and v[1]]
            if link and caps:
                row(link, BUS_UTIL, round(rt.throughput_gbps / min(caps), 6), "ratio",
                    f"derived: {r.name} throughput / PCIe link Gb/s")
                links.append(link)
        return links

    def _gpu_rows(self, cur: MonitorSnapshot, row) -> list[str]:  # noqa: ANN001
        links = []
        for g in cur.gpus:
            for metric, v in sorted(g.values.items()):
                if v is not None:
                    fn, unit = NVML_METRICS[metric]
                    row(g.bdf, metric, v, unit, f"nvml:{fn}")
            u = link_utilisation(g)
            link = self._link_of(g.bdf)
            if u is not None and link:
                row(link, BUS_UTIL, round(u, 6), "ratio", "nvml:nvmlDeviceGetPcieThroughput / link Gb/s")
                links.append(link)
        for idx, xid in cur.xids:
            bdf = next((g.bdf for g in cur.gpus if g.index == idx), str(idx))
            row(bdf, "xid", xid, "code", "nvml:nvmlEventSetWait_v2")
        return links

    def _uncore_rows(self, prev: MonitorSnapshot, cur: MonitorSnapshot, dt_s: float, row) -> list[str]:  # noqa: ANN001
        links = []
        if not (prev.bus and cur.bus):
            return links
        bw = link_bandwidth(prev.bus, cur.bus, dt_s)
        pcie: dict[str, tuple[float, str, float]] = {}  # topology link -> (busier direction Gb/s, source, cap)
        for (link, metric), (gbps, sources) in sorted(bw.items()):
            src = "perf:" + "+".join(s.removeprefix("perf:") for s in sources)
            if link.startswith(PCIE_ROOT_BUS):
                ports = self.root_ports.get(link.removeprefix(PCIE_ROOT_BUS), [])
                if len(ports) != 1:  # a stack shared by several root ports: bandwidth only, no one link to blame
                    row(link, metric, round(gbps, 6), "Gb/s", src)
                    continue
                (tlink, port), = ports
                row(tlink, metric, round(gbps, 6), "Gb/s", src)
                v = cur.links.get(port)
                if v and v[0] and v[1] and gbps >= pcie.get(tlink, (-1.0, ""))[0]:
                    pcie[tlink] = (gbps, f"{src} / root port {port} link Gb/s", link_gbps(v[0], v[1]))
                continue
            row(link, metric, round(gbps, 6), "Gb/s", src)
            cap = self.capacity.get(link)
            if cap:
                row(link, BUS_UTIL, round(gbps / cap, 6), "ratio", f"{src} / {cap:g} Gb/s (--bus-capacity)")
                links.append(link)
        for tlink, (gbps, src, cap) in sorted(pcie.items()):
            row(tlink, BUS_UTIL, round(gbps / cap, 6), "ratio", src)
            links.append(tlink)
        return links
