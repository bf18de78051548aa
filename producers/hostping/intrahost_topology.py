"""Intra-host topology discovery: from a sysfs root or an hwloc XML (``lstopo --of xml``).

Both readers reduce the PCIe tree to what Hostping's analyzer needs
(:class:`schemas.intrahost.IntraHostTopology`): sockets ``cpuN`` (one per NUMA node that
holds PCIe devices or memory), memory nodes ``memN``, PCIe switches ``sw:<upstream port>``,
RNICs (named by their RDMA device, e.g. ``mlx5_0``) and GPUs (``gpuN`` in PCI address
order, as ``CUDA_DEVICE_ORDER=PCI_BUS_ID``). A PCIe switch appears in a device's bridge
chain as an upstream port followed by a downstream port; the first bridge is the CPU root
port, whose link is the ``root_port`` link of the topology. Affinitive endpoints (same
root port, Hostping §4.3) follow from the result.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from producers.hostping.sysfs import SysfsSnapshot
from producers.hostping.sysfs_pcie import BDF, class_of, device_dirs
from schemas.intrahost import IntraHostTopology

NODE_ROOT = "/sys/devices/system/node"


@dataclass(frozen=True)
class PciEndpoint:
    """One GPU or RNIC: its kind, address, RDMA name (RNICs), bridges from root port down, socket."""

    kind: str
    bdf: str
    bridges: tuple[str, ...]
    socket: int
    rdma_name: str = ""


@dataclass(frozen=True)
class DiscoveredHost:
    """The topology plus the PCI address of every RNIC and GPU node."""

    topology: IntraHostTopology
    bdf: dict[str, str]


def build(host: str, endpoints: list[PciEndpoint], memory_nodes: list[int]) -> DiscoveredHost:
    """Assemble the topology; sockets with memory or devices become ``cpuN``, joined pairwise by UPI.

    Raises:
        ValueError: no GPU or RNIC was found (the message says which source to check).
    """
    if not endpoints:
        raise ValueError(f"{host}: no GPU or RNIC found in the PCIe tree; is this the right sysfs root / hwloc XML?")
    sockets = sorted({e.socket for e in endpoints} | set(memory_nodes))
    kinds: dict[str, str] = {f"cpu{s}": "cpu" for s in sockets}
    parent: dict[str, str] = {}
    for m in memory_nodes:
        kinds[f"mem{m}"] = "mem"
        parent[f"mem{m}"] = f"cpu{m}"
    bdf: dict[str, str] = {}
    gpu_i = 0
    for e in sorted(endpoints, key=lambda x: x.bdf):
        up = f"cpu{e.socket}"
        for upstream in e.bridges[1::2]:  # root port, then (upstream, downstream) per switch
            sw = f"sw:{upstream}"
            kinds[sw] = "switch"
            parent.setdefault(sw, up)
            up = sw
        if e.kind == "gpu":
            name = f"gpu{gpu_i}"
            gpu_i += 1
        else:
            name = e.rdma_name or f"rnic:{e.bdf}"
        kinds[name] = "rnic" if e.kind == "rnic" else "gpu"
        parent[name] = up
        bdf[name] = e.bdf
    upi = tuple((f"cpu{a}", f"cpu{b}") for i, a in enumerate(sockets) for b in sockets[i + 1 :])
    return DiscoveredHost(IntraHostTopology(host, kinds, parent, upi), bdf)


def from_sysfs(snap: SysfsSnapshot, host: str = "localhost") -> DiscoveredHost:
    """Topology of a live or copied sysfs tree (``SysfsSnapshot.from_root``)."""
    endpoints = []
    for bdf, path in sorted(device_dirs(snap).items()):
        kind = class_of(snap.read(f"{path}/class"))
        rdma = snap.listdir(f"{path}/infiniband")
        if kind == "rnic" and not rdma:
            continue  # an Ethernet NIC without RDMA
        if kind not in ("gpu", "rnic"):
            continue
        bridges = tuple(p.lower() for p in path.split("/") if BDF.match(p) and p.lower() != bdf)
        numa = snap.read(f"{path}/numa_node") or "0"
        endpoints.append(PciEndpoint(kind, bdf, bridges, max(int(numa), 0), rdma[0] if rdma else ""))
    mems = sorted(int(n[4:]) for n in snap.listdir(NODE_ROOT) if n.startswith("node") and n[4:].isdigit())
    return build(host, endpoints, mems or sorted({e.socket for e in endpoints}))


def from_hwloc_xml(path: str | Path, host: str | None = None) -> DiscoveredHost:
    """Topology of an hwloc 2.x XML export (``lstopo --of xml`` / ``hwloc-gather-topology``).

    Raises:
        ValueError: the file is not hwloc XML (names the file and the command to produce it).
    """
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        raise ValueError(
            f"{path}: not readable hwloc XML ({e}); produce it with `lstopo --of xml > topo.xml`"
        ) from None
    if root.tag != "topology":
        raise ValueError(f"{path}: root element is <{root.tag}>, expected <topology> from `lstopo --of xml`")
    endpoints: list[PciEndpoint] = []
    mems: list[int] = []
    name = host or next((i.get("value", "") for i in root.iter("info") if i.get("name") == "HostName"), Path(path).stem)

    def walk(obj: ET.Element, socket: int, bridges: tuple[str, ...]) -> None:
        for child in obj.findall("object"):
            t = child.get("type")
            s, b = socket, bridges
            if t in ("Package", "NUMANode") and child.get("os_index") is not None:
                s = int(child.get("os_index", "0")) if t == "Package" else socket
                if t == "NUMANode":
                    mems.append(int(child.get("os_index", "0")))
            elif t == "Bridge" and child.get("bridge_type", "").startswith("1-"):
                b = bridges + (child.get("pci_busid", "").lower(),)
            elif t == "PCIDev":
                cls = class_of("0x" + child.get("pci_type", "").split(" ")[0])
                rdma = [o.get("name", "") for o in child.iter("object") if o.get("osdev_type") == "3"]
                if cls == "gpu" or (cls == "rnic" and rdma):
                    endpoints.append(
                        PciEndpoint(cls, child.get("pci_busid", "").lower(), b, s, rdma[0] if rdma else "")
                    )
            walk(child, s, b)

    walk(root, 0, ())
    return build(name, endpoints, sorted(set(mems)))
