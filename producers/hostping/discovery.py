"""Host discovery for the Hostping agent: what this host has, read once at start.

Combines one-source readers, each over the same sysfs root (``--path.sysfs``) and procfs root
(``--path.procfs``):

- every PCI function (:mod:`.pci_inventory`), NUMA nodes (:mod:`.numa`), RDMA devices with their
  netdevs and PCI addresses (:mod:`.rnics`);
- the intra-host topology Hostping's analyzer needs (:mod:`.intrahost_topology`): only when the host has a
  GPU or an RNIC (otherwise ``topology`` is ``None`` and ``topology_error`` says why);
- GPUs through NVML where present (:mod:`.nvml`); NVML absent is a reason, not an error;
- uncore PMUs and the bus counters planned on them (:mod:`.uncore`).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from producers.hostping import intrahost_topology, numa, pci_inventory, rnics, uncore
from producers.hostping.sysfs import SysfsSnapshot


@dataclass
class HostDiscovery:
    """Everything found on one host; ``*_error`` fields say why a part is missing."""

    host: str
    sysfs_root: Path
    procfs_root: Path
    functions: list[pci_inventory.PciFunction]
    nodes: list[numa.NumaNode]
    rnics: list[rnics.Rnic]
    topology: intrahost_topology.DiscoveredHost | None
    topology_error: str
    pmus: list[uncore.Pmu]
    bus_counters: list[uncore.BusCounter]
    bus_skipped: list[str]
    perf_event_paranoid: str
    nvml_gpus: list[dict[str, object]] = field(default_factory=list)
    nvml_error: str = ""

    @property
    def line_rate_gbps(self) -> float | None:
        """The fastest RNIC's line rate (Thp_low is 5 % of it); ``None`` without an RNIC."""
        rates = [r.line_rate_gbps for r in self.rnics if r.line_rate_gbps]
        return max(rates) if rates else None

    def to_json(self) -> dict[str, object]:
        """What ``fabricscope hostping agent --once --json`` prints under ``discovery``."""
        from schemas.host_topology import topology_to_dict

        return {
            "host": self.host,
            "sysfs_root": str(self.sysfs_root),
            "pci_functions": [f.to_json() for f in self.functions],
            "numa_nodes": [{"node": n.node, "cpus": len(n.cpus), "mem_bytes": n.mem_bytes} for n in self.nodes],
            "rnics": [{"name": r.name, "bdf": r.bdf, "netdevs": list(r.netdevs), "numa_node": r.numa_node,
                       "line_rate_gbps": r.line_rate_gbps,
                       "ports": [{"port": p.port, "rate_gbps": p.rate_gbps, "state": p.state,
                                  "link_layer": p.link_layer} for p in r.ports]} for r in self.rnics],
            "gpus_nvml": self.nvml_gpus,
            "nvml_error": self.nvml_error,
            "topology": topology_to_dict(self.topology.topology) if self.topology else None,
            "topology_bdf": self.topology.bdf if self.topology else {},
            "topology_error": self.topology_error,
            "uncore_pmus": [p.name for p in self.pmus],
            "bus_counters": [c.source for c in self.bus_counters],
            "bus_counters_skipped": self.bus_skipped,
            "perf_event_paranoid": self.perf_event_paranoid,
        }


def hostname(procfs: Path) -> str:
    """``/proc/sys/kernel/hostname`` under the procfs root, else the socket's host name."""
    try:
        return (procfs / "sys" / "kernel" / "hostname").read_text().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


def discover(sysfs_root: str | Path = "/sys", procfs_root: str | Path = "/proc", host: str | None = None,
             nvml_gpus: list[dict[str, object]] | None = None, nvml_error: str = "") -> HostDiscovery:
    """Read the host once.

    Args:
        sysfs_root, procfs_root: roots of sysfs and procfs (a captured tree in tests).
        host: host name (default: the procfs host name).
        nvml_gpus, nvml_error: what the caller's NVML session found (``[]`` and the reason without one).

    Raises:
        FileNotFoundError: ``sysfs_root`` is not a directory (names it and the option).
    """
    snap = SysfsSnapshot.from_root(sysfs_root)
    procfs = Path(procfs_root)
    name = host or hostname(procfs)
    nodes = numa.read_nodes(snap)
    topo: intrahost_topology.DiscoveredHost | None = None
    topo_err = ""
    try:
        topo = intrahost_topology.from_sysfs(snap, name)
    except ValueError as err:
        topo_err = str(err)
    pmus = uncore.read_pmus(snap)
    counters, skipped = uncore.plan(pmus, nodes)
    try:
        paranoid = (procfs / "sys" / "kernel" / "perf_event_paranoid").read_text().strip()
    except OSError:
        paranoid = "unreadable"
    return HostDiscovery(
        host=name, sysfs_root=Path(sysfs_root), procfs_root=procfs,
        functions=pci_inventory.read_functions(snap), nodes=nodes, rnics=rnics.read_rnics(snap),
        topology=topo, topology_error=topo_err, pmus=pmus, bus_counters=counters, bus_skipped=skipped,
        perf_event_paranoid=paranoid, nvml_gpus=list(nvml_gpus or []), nvml_error=nvml_error,
    )
