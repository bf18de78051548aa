"""Collector for ``nvidia-smi topo -m``: GPU<->NIC locality and what it costs GPUDirect RDMA.

The matrix gives, per GPU and NIC, the PCIe relation (nvidia-smi's legend):
``PIX`` at most one PCIe bridge, ``PXB`` several bridges without the host bridge,
``PHB`` through a PCIe host bridge (the CPU), ``NODE`` between host bridges of one NUMA
node, ``SYS`` across the SMP interconnect (QPI/UPI/Infinity Fabric). NICs are columns
named ``NIC<i>`` (with a ``NIC Legend`` mapping them to ``mlx5_<i>``) or ``mlx5_<i>``.

Rule: a GPU whose nearest NIC is ``PHB``, ``NODE`` or ``SYS`` cannot do GPUDirect RDMA
without crossing the CPU: NCCL stages through host memory unless ``NCCL_NET_GDR_LEVEL``
is raised, and where GDR is forced, peer-to-peer traffic crosses the root complex
(perftest ``--use_cuda`` then runs well below host memory). ``gpu_nic_locality``,
warning, configuration (slot placement or NIC choice). All GPUs at ``PIX``/``PXB``: nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

NAME = "nvidia_topo"
READS = "nvidia-smi topo -m (GPU<->NIC PCIe locality SYS/NODE/PHB/PXB/PIX)"

RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
GDR_OK = ("PIX", "PXB")
_LEGEND = re.compile(r"^\s*(?P<nic>NIC\d+):\s*(?P<dev>\S+)\s*$")
# GPUs, NICs (``NIC0`` or the RDMA device name: mlx5_0, bnxt_re0, rocep105s0); not X, NV12, PXB, CPU...
_NAME = re.compile(r"^(GPU\d+|NIC\d+|[a-z][a-z0-9_]*\d)$")


@dataclass
class TopoMatrix:
    """``cells[row][column]`` relation strings; ``legend`` maps ``NIC<i>`` to RDMA device names."""

    columns: list[str] = field(default_factory=list)
    cells: dict[str, dict[str, str]] = field(default_factory=dict)
    legend: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def nics(self) -> list[str]:
        return [c for c in self.columns if not c.startswith("GPU")]


def parse(text: str) -> TopoMatrix:
    """Header row (``GPU0 GPU1 ... NIC0 ... CPU Affinity``), one row per device, and the NIC legend."""
    t = TopoMatrix()
    for n, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if not t.columns and tokens and tokens[0] == "GPU0" and line[:1].isspace():
            t.columns = [x for x in tokens if _NAME.match(x)]
            continue
        if m := _LEGEND.match(line):
            t.legend[m["nic"]] = m["dev"]
            continue
        if t.columns and tokens and _NAME.match(tokens[0]) and len(tokens) > len(t.columns):
            vals = tokens[1 : 1 + len(t.columns)]
            t.cells[tokens[0]] = dict(zip(t.columns, vals, strict=True))
            t.lines[tokens[0]] = n
    return t


def findings(t: TopoMatrix) -> list[Finding]:
    """GPUs whose nearest NIC is beyond PXB."""
    out = []
    nics = t.nics()
    if not nics:
        return out
    for gpu, row in t.cells.items():
        if not gpu.startswith("GPU"):
            continue
        rel = {n: row.get(n, "") for n in nics if row.get(n, "") in RANK}
        if not rel:
            continue
        best = min(rel, key=lambda n: RANK[rel[n]])
        if rel[best] in GDR_OK:
            continue
        name = t.legend.get(best, best)
        out.append(
            Finding(
                "gpu_nic_locality",
                gpu,
                "warning",
                f"{gpu}'s nearest NIC ({name}) is {rel[best]}: GPUDirect RDMA would cross "
                + {
                    "PHB": "the CPU's PCIe host bridge",
                    "NODE": "host bridges of the NUMA node",
                    "SYS": "the inter-socket interconnect",
                }[rel[best]]
                + ". NCCL then stages network traffic through host memory (unless NCCL_NET_GDR_LEVEL is raised) "
                "and perftest --use_cuda runs below host-memory bandwidth. Place the GPU and NIC under one PCIe "
                "switch (PIX/PXB) or pick the NIC nearest to each GPU.",
                {"nearest_nic": name, "relation": rel[best], "all": {t.legend.get(n, n): v for n, v in rel.items()}},
                "config",
                str(t.lines.get(gpu, "")),
            )
        )
    return out


def detect(text: str) -> bool:
    """True when the text holds a topo matrix header with a NIC column and at least one GPU row."""
    t = parse(text)
    return bool(t.nics()) and any(k.startswith("GPU") for k in t.cells)
