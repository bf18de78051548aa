"""Collector for perftest bandwidth outputs (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``).

A run starts at its ``... BW Test`` banner; it used GPU memory when CUDA/ROCm lines precede
the banner (``initializing CUDA``, ``cuMemAlloc() of a N bytes GPU buffer``, ``--use_cuda``).
The result table ``#bytes #iterations BW peak[unit] BW average[unit] MsgRate[Mpps]`` gives the
bandwidth in the unit of its header (``Gb/sec`` with ``--report_gbits``, else ``MB/sec``); the
largest message size of a run is its figure.

Rule (Hostping §2: GPU<->RNIC paths are intra-host links like any other): when one input
holds a GPU-memory run and a host-memory run of the same test and device, GPU below
``GDR_RATIO`` (80 %) of host is ``gdr_bandwidth`` (warning): the GPU<->NIC PCIe path is the
bottleneck (locality SYS/NODE in ``nvidia-smi topo -m``, ACS redirect, a downgraded GPU link,
or GPUDirect RDMA not active). Every run is also reported as ``rdma_bandwidth`` (info).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from producers.hostping.findings import Finding

NAME = "perftest"
READS = "ib_write_bw / ib_read_bw / ib_send_bw outputs (host memory and --use_cuda GPU memory runs)"

GDR_RATIO = 0.8
_BANNER = re.compile(r"^\s*(?P<test>(?:RDMA_Write|RDMA_Read|Send|Atomic)[\w ]*?) BW Test\s*$")
_GPU = re.compile(r"initializing CUDA|cuMemAlloc\(\)|GPU buffer|--use_cuda|use_rocm|hipMalloc|Picking device No", re.I)
_DEVICE = re.compile(r"^\s*Dual-port\s*:.*?Device\s*:\s*(?P<dev>\S+)|^\s*Device\s*:\s*(?P<dev2>\S+)")
_UNIT = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[(?P<unit2>[^\]]+)\]")
_ROW = re.compile(r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>[\d.]+)\s+(?P<avg>[\d.]+)\s+(?P<rate>[\d.]+)\s*$")
_LINK = re.compile(r"^\s*Link type\s*:\s*(?P<ll>\w+)")


@dataclass
class BwRun:
    """One perftest run: its test, RDMA device, memory (``gpu``/``host``), unit, and the largest-size row."""

    test: str
    device: str
    memory: str
    unit: str = ""
    msg_bytes: int = 0
    bw_average: float = 0.0
    bw_peak: float = 0.0
    link_type: str = ""
    line: int = 0


def parse(text: str) -> list[BwRun]:
    """Runs with at least one result row."""
    runs: list[BwRun] = []
    gpu_pending = False
    cur: BwRun | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if b := _BANNER.match(line):
            cur = BwRun(b["test"].strip(), "", "gpu" if gpu_pending else "host", line=n)
            runs.append(cur)
            gpu_pending = False
            continue
        if _GPU.search(line):
            gpu_pending = True
            continue
        if cur is None:
            continue
        if (d := _DEVICE.search(line)) and not cur.device:
            cur.device = d["dev"] or d["dev2"]
        elif lk := _LINK.match(line):
            cur.link_type = lk["ll"]
        elif u := _UNIT.search(line):
            cur.unit = u["unit2"]
        elif (r := _ROW.match(line)) and cur.unit and int(r["bytes"]) >= cur.msg_bytes:
            cur.msg_bytes, cur.bw_peak, cur.bw_average = int(r["bytes"]), float(r["peak"]), float(r["avg"])
    return [r for r in runs if r.msg_bytes]


def findings(runs: list[BwRun]) -> list[Finding]:
    """``rdma_bandwidth`` per run; ``gdr_bandwidth`` when GPU memory is well below host memory."""
    out = [
        Finding(
            "rdma_bandwidth",
            f"{r.device or 'RNIC'} ({r.memory} memory)",
            "info",
            f"{r.test} on {r.device or 'the RNIC'} from {r.memory} memory: {r.bw_average:g} {r.unit} average at "
            f"{r.msg_bytes} B messages.",
            {
                "test": r.test,
                "memory": r.memory,
                "bw_average": r.bw_average,
                "bw_peak": r.bw_peak,
                "unit": r.unit,
                "msg_bytes": r.msg_bytes,
                "link_type": r.link_type,
            },
            "",
            str(r.line),
        )
        for r in runs
    ]
    for g in (r for r in runs if r.memory == "gpu"):
        hosts = [
            h
            for h in runs
            if h.memory == "host"
            and h.unit == g.unit
            and h.test == g.test
            and (not g.device or not h.device or h.device == g.device)
        ]
        if not hosts:
            continue
        h = max(hosts, key=lambda x: x.bw_average)
        ratio = g.bw_average / h.bw_average if h.bw_average else 1.0
        if ratio >= GDR_RATIO:
            continue
        out.append(
            Finding(
                "gdr_bandwidth",
                g.device or "RNIC",
                "warning",
                f"{g.test} from GPU memory reaches {g.bw_average:g} {g.unit}, {ratio:.0%} of host memory "
                f"({h.bw_average:g} {h.unit}) on {g.device or 'the same RNIC'}: the GPU<->NIC PCIe path limits "
                "GPUDirect RDMA. Check their locality (nvidia-smi topo -m: SYS/NODE crosses the CPU), ACS on the "
                "PCIe switch, the GPU's link width/speed, and that nvidia-peermem is loaded.",
                {"gpu_bw": g.bw_average, "host_bw": h.bw_average, "unit": g.unit, "ratio": round(ratio, 3)},
                "",
                str(g.line),
            )
        )
    return out


def detect(text: str) -> bool:
    """True when the text holds a perftest ``BW Test`` banner and a result header."""
    return any(_BANNER.match(x) for x in text.splitlines()) and bool(_UNIT.search(text))
