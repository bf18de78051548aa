"""GPU PCIe link state through NVML (``nvidia-ml-py``, imported as ``pynvml``).

Hostping §5 reads GPU state from NVML. Per GPU: current and maximum PCIe generation and
width, PCIe replay counter, PCIe TX/RX throughput (KB/s) and GPU utilisation (%). The idle
exception of :mod:`.pcie_link` (field case 12) needs this: a GPU at Gen1 while *busy*
(utilisation >= ``BUSY_UTIL_PCT``) is a real downgrade.

Without a GPU or driver every reader raises :class:`NvmlUnavailable`; nothing is faked.
"""

from __future__ import annotations

from dataclasses import dataclass

from producers.hostping.findings import Finding
from producers.hostping.pcie_link import LinkReading, assess_link

GEN_SPEED_GTPS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
BUSY_UTIL_PCT = 10


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine (no library, no driver, or no GPU)."""


@dataclass(frozen=True)
class GpuLink:
    """One GPU's PCIe link as NVML reports it (generation 1..6, width in lanes)."""

    index: int
    bdf: str
    curr_gen: int
    max_gen: int
    curr_width: int
    max_width: int
    replay_counter: int
    tx_kbps: int
    rx_kbps: int
    util_pct: int


def _fail(err: Exception) -> NvmlUnavailable:
    return NvmlUnavailable(
        f"NVML is not usable here ({type(err).__name__}: {err}). Run on a host with an NVIDIA GPU and "
        "driver, or read GPU links from sysfs instead (fabricscope diagnose <sysfs root>)."
    )


def read_gpu_links() -> list[GpuLink]:
    """Every GPU's link, read live through NVML.

    Raises:
        NvmlUnavailable: pynvml is missing, the NVML library or driver is absent, or there is no GPU.
    """
    try:
        import pynvml
    except ImportError as e:
        raise _fail(e) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise _fail(e) from None
    try:
        n = pynvml.nvmlDeviceGetCount()
        if n == 0:
            raise NvmlUnavailable("NVML found no GPU on this host")
        out = []
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            bus = pynvml.nvmlDeviceGetPciInfo(h).busId
            out.append(
                GpuLink(
                    index=i,
                    bdf=(bus.decode() if isinstance(bus, bytes) else bus).lower()[-12:],
                    curr_gen=pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
                    max_gen=pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h),
                    curr_width=pynvml.nvmlDeviceGetCurrPcieLinkWidth(h),
                    max_width=pynvml.nvmlDeviceGetMaxPcieLinkWidth(h),
                    replay_counter=pynvml.nvmlDeviceGetPcieReplayCounter(h),
                    tx_kbps=pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
                    rx_kbps=pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES),
                    util_pct=pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                )
            )
        return out
    except pynvml.NVMLError as e:
        raise _fail(e) from None
    finally:
        pynvml.nvmlShutdown()


def assess(g: GpuLink) -> Finding | None:
    """The :mod:`.pcie_link` rule over an NVML reading; a busy GPU gets no idle exception."""
    return assess_link(
        LinkReading(
            location=g.bdf,
            speed_gtps=GEN_SPEED_GTPS.get(g.curr_gen),
            width=g.curr_width,
            max_speed_gtps=GEN_SPEED_GTPS.get(g.max_gen),
            max_width=g.max_width,
            device_class="gpu",
            under_load=g.util_pct >= BUSY_UTIL_PCT,
        )
    )
