"""Every PCI function under ``/sys/bus/pci/devices``: identity, driver, NUMA node, place in the tree, link.

One hardware source (sysfs ``bus/pci``), read from a root (node_exporter's ``--path.sysfs``) so a
tree captured on a GPU/RNIC host reads the same as the live one. Unlike :mod:`.sysfs_pcie`, which
keeps only functions with link files, this lists *every* function: a virtio function has no
``current_link_speed`` and still belongs to the host's inventory (its link fields are ``None``).

Files per function (Linux ``Documentation/ABI/testing/sysfs-bus-pci``): ``class``, ``vendor``,
``device``, ``numa_node``, ``current_link_{speed,width}``, ``max_link_{speed,width}``, the
``driver`` symlink, ``net/<ifname>``, ``infiniband/<rdma dev>`` and ``aer_dev_*``. The parent
chain is the function's real path (``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from producers.hostping.aer_sysfs import FILES as AER_FILES
from producers.hostping.sysfs import SysfsSnapshot
from producers.hostping.sysfs_pcie import BDF, PCI_DEVICES, _speed, _width, class_of


@dataclass(frozen=True)
class PciFunction:
    """One PCI function (a ``pci_function.v1`` row without the upload columns).

    Link speeds are GT/s and widths lanes; ``None`` where the function has no link files.
    ``path_to_root`` lists the bridges from the root port down to ``parent_bdf``.
    """

    bdf: str
    class_code: str
    kind: str
    vendor_id: str
    device_id: str
    driver: str
    numa_node: int
    parent_bdf: str
    path_to_root: tuple[str, ...]
    current_link_speed_gtps: float | None
    current_link_width: int | None
    max_link_speed_gtps: float | None
    max_link_width: int | None
    netdevs: tuple[str, ...]
    rdma_devices: tuple[str, ...]
    aer: bool

    def to_json(self) -> dict[str, object]:
        """JSON-ready dict (tuples as lists)."""
        d = asdict(self)
        for k in ("path_to_root", "netdevs", "rdma_devices"):
            d[k] = list(d[k])
        return d


def _kind(class_code: str, rdma: tuple[str, ...]) -> str:
    """``rnic`` for a network function with an RDMA device, ``nic`` without; else :func:`class_of`."""
    k = class_of(class_code)
    if k == "rnic":
        return "rnic" if rdma else "nic"
    return "other" if k == "unknown" else k


def _driver(snap: SysfsSnapshot, path: str) -> str:
    if snap.root is None:
        return ""
    link = snap.realpath(f"{path}/driver")
    return os.path.basename(link) if link != f"{path}/driver" else ""


def _numa(v: str | None) -> int:
    try:
        return int((v or "-1").strip())
    except ValueError:
        return -1


def _owners(snap: SysfsSnapshot, class_root: str) -> dict[str, list[str]]:
    """``{bdf: [names]}`` for ``/sys/class/net`` or ``/sys/class/infiniband``: each entry belongs to the
    last PCI function on its real path (a virtio netdev sits below ``<bdf>/virtio1/net/eth0``)."""
    out: dict[str, list[str]] = {}
    for name in snap.listdir(class_root):
        bdfs = [p.lower() for p in snap.realpath(f"{class_root}/{name}").split("/") if BDF.match(p)]
        if bdfs:
            out.setdefault(bdfs[-1], []).append(name)
    return out


def read_functions(snap: SysfsSnapshot) -> list[PciFunction]:
    """Every function listed under ``/sys/bus/pci/devices`` of ``snap``, in BDF order.

    A function whose files are unreadable still appears (empty strings, ``None`` links): the
    inventory must match what ``/sys/bus/pci/devices`` lists, whatever the platform exposes.
    """
    out = []
    net_of, rdma_of = _owners(snap, "/sys/class/net"), _owners(snap, "/sys/class/infiniband")
    for name in sorted(snap.listdir(PCI_DEVICES)):
        if not BDF.match(name):
            continue
        bdf = name.lower()
        path = snap.realpath(f"{PCI_DEVICES}/{name}")

        def get(f: str, path: str = path, alias: str = f"{PCI_DEVICES}/{name}") -> str | None:
            v = snap.read(f"{path}/{f}")
            return v if v is not None else snap.read(f"{alias}/{f}")

        chain = tuple(p.lower() for p in path.split("/") if BDF.match(p) and p.lower() != bdf)
        rdma = tuple(sorted(set(snap.listdir(f"{path}/infiniband")) | set(rdma_of.get(bdf, []))))
        net = tuple(sorted(set(snap.listdir(f"{path}/net")) | set(net_of.get(bdf, []))))
        cls = get("class") or ""
        out.append(
            PciFunction(
                bdf=bdf,
                class_code=cls,
                kind=_kind(cls, rdma),
                vendor_id=get("vendor") or "",
                device_id=get("device") or "",
                driver=_driver(snap, path),
                numa_node=_numa(get("numa_node")),
                parent_bdf=chain[-1] if chain else "",
                path_to_root=chain,
                current_link_speed_gtps=_speed(get("current_link_speed")),
                current_link_width=_width(get("current_link_width")),
                max_link_speed_gtps=_speed(get("max_link_speed")),
                max_link_width=_width(get("max_link_width")),
                netdevs=net,
                rdma_devices=rdma,
                aer=any(get(f) is not None for f in AER_FILES),
            )
        )
    return out


def record_columns(agent_id: str, upload_ns: int, host: str, functions: list[PciFunction]) -> dict[str, list]:
    """Columns of ``pci_function.v1`` (one row per function) for :func:`schemas.arrow_nano.encode_columns`."""
    rows = [f.to_json() for f in functions]
    cols: dict[str, list] = {"agent_id": [agent_id] * len(rows), "upload_ns": [upload_ns] * len(rows),
                             "host": [host] * len(rows)}
    for key in ("bdf", "class_code", "kind", "vendor_id", "device_id", "driver", "numa_node", "parent_bdf",
                "current_link_speed_gtps", "current_link_width", "max_link_speed_gtps", "max_link_width", "aer"):
        cols[key] = [r[key] for r in rows]
    for key in ("path_to_root", "netdevs", "rdma_devices"):
        cols[key] = [",".join(r[key]) for r in rows]  # type: ignore[arg-type]
    return cols
