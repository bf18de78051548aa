"""RNICs from sysfs: ``/sys/class/infiniband/<dev>`` -> PCI address, netdevs, port rate and state.

One hardware source, read from a root (``--path.sysfs``). Per RDMA device: the PCI function
(the ``device`` symlink), its network interfaces (``device/net/*``: the netdev whose ``ethtool -S``
counters give the Tx pause duration) and per port ``rate`` (``"200 Gb/sec (4X HDR)"``),
``state`` (``"4: ACTIVE"``) and ``link_layer`` (``Ethernet`` for RoCE). The line rate is the
fastest active port: Hostping's Thp_low is 5 % of it (§5).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from producers.hostping.sysfs import SysfsSnapshot
from producers.hostping.sysfs_pcie import BDF

IB_ROOT = "/sys/class/infiniband"
_RATE = re.compile(r"([\d.]+)\s*Gb/sec")


@dataclass(frozen=True)
class RnicPort:
    """One port: number, rate (Gb/s, ``None`` when unreadable), state text and link layer."""

    port: int
    rate_gbps: float | None
    state: str
    link_layer: str


@dataclass(frozen=True)
class Rnic:
    """One RDMA device: its name (``mlx5_0``), PCI address, netdevs, NUMA node and ports."""

    name: str
    bdf: str
    netdevs: tuple[str, ...]
    numa_node: int
    ports: tuple[RnicPort, ...]

    @property
    def line_rate_gbps(self) -> float | None:
        """Fastest ACTIVE port's rate (any port's when none is active); ``None`` when no rate was read."""
        active = [p.rate_gbps for p in self.ports if p.rate_gbps and "ACTIVE" in p.state.upper()]
        rates = active or [p.rate_gbps for p in self.ports if p.rate_gbps]
        return max(rates) if rates else None


def parse_rate(text: str | None) -> float | None:
    """``"200 Gb/sec (4X HDR)"`` -> ``200.0``; anything else -> ``None``."""
    m = _RATE.search(text or "")
    return float(m.group(1)) if m else None


def read_rnics(snap: SysfsSnapshot) -> list[Rnic]:
    """Every RDMA device under ``class/infiniband`` (``[]`` on a host without one)."""
    out = []
    for dev in snap.listdir(IB_ROOT):
        base = f"{IB_ROOT}/{dev}"
        pci = snap.realpath(f"{base}/device")
        bdf = os.path.basename(pci).lower()
        if not BDF.match(bdf):  # a captured tree without the symlink: find the function holding it
            bdf = next((p.lower() for p in reversed(snap.realpath(base).split("/")) if BDF.match(p)), "")
        ports = []
        for p in snap.listdir(f"{base}/ports"):
            if not p.isdigit():
                continue
            pb = f"{base}/ports/{p}"
            ports.append(RnicPort(int(p), parse_rate(snap.read(f"{pb}/rate")), snap.read(f"{pb}/state") or "",
                                  snap.read(f"{pb}/link_layer") or ""))
        numa = snap.read(f"{base}/device/numa_node") or snap.read(f"/sys/bus/pci/devices/{bdf}/numa_node") or "-1"
        netdevs = snap.listdir(f"{base}/device/net") or (snap.listdir(f"/sys/bus/pci/devices/{bdf}/net") if bdf else [])
        out.append(Rnic(dev, bdf, tuple(netdevs), int(numa) if numa.lstrip("-").isdigit() else -1,
                        tuple(sorted(ports, key=lambda x: x.port))))
    return out
