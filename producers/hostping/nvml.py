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


# --- Tolerant sampling for the host agent's 1 s monitor and scripts/gpu-check --------------------
#
# read_gpu_links() is all-or-nothing (one unsupported call fails the whole read), which suits a
# diagnosis. A monitor must keep going on GPUs or drivers that lack a call (PCIe throughput on
# some vGPU profiles, Xid events in containers), so each call below is tried alone and an
# unsupported one is reported by name instead of failing the sample.

#: metric -> (NVML call, unit); the ``source`` of the ``hostmetric.v2`` row is ``nvml:<call>``.
NVML_METRICS = {
    "pcie_link_gen": ("nvmlDeviceGetCurrPcieLinkGeneration", "gen"),
    "pcie_link_max_gen": ("nvmlDeviceGetMaxPcieLinkGeneration", "gen"),
    "pcie_link_width": ("nvmlDeviceGetCurrPcieLinkWidth", "lanes"),
    "pcie_link_max_width": ("nvmlDeviceGetMaxPcieLinkWidth", "lanes"),
    "pcie_replay_counter": ("nvmlDeviceGetPcieReplayCounter", "count"),
    "pcie_tx_kbps": ("nvmlDeviceGetPcieThroughput", "KB/s"),
    "pcie_rx_kbps": ("nvmlDeviceGetPcieThroughput", "KB/s"),
    "gpu_util_pct": ("nvmlDeviceGetUtilizationRates", "%"),
}


@dataclass(frozen=True)
class GpuSample:
    """One GPU's NVML readings at one instant; ``None`` values were not supported (see ``unsupported``)."""

    index: int
    bdf: str
    name: str
    values: dict[str, float | None]
    unsupported: dict[str, str]


def _load() -> object:
    try:
        import pynvml
    except ImportError as e:
        raise _fail(e) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise _fail(e) from None
    return pynvml


class NvmlSession:
    """NVML initialised once for a monitor's lifetime; :meth:`sample` reads every GPU, call by call.

    Raises:
        NvmlUnavailable: at construction, without nvidia-ml-py, the NVML library, a driver or a GPU.
    """

    def __init__(self) -> None:
        self.nv = _load()
        nv = self.nv
        try:
            n = nv.nvmlDeviceGetCount()  # type: ignore[attr-defined]
        except nv.NVMLError as e:  # type: ignore[attr-defined]
            nv.nvmlShutdown()  # type: ignore[attr-defined]
            raise _fail(e) from None
        if n == 0:
            nv.nvmlShutdown()  # type: ignore[attr-defined]
            raise NvmlUnavailable("NVML found no GPU on this host")
        self.handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]  # type: ignore[attr-defined]
        self._events: object | None = None
        self.xid_error = ""

    def _call(self, fn: str, *args: object) -> tuple[object | None, str]:
        try:
            return getattr(self.nv, fn)(*args), ""
        except self.nv.NVMLError as e:  # type: ignore[attr-defined]
            return None, f"{type(e).__name__}: {e}"
        except AttributeError:
            return None, f"{fn} is not in this nvidia-ml-py"

    def sample(self) -> list[GpuSample]:
        """Every GPU's :data:`NVML_METRICS`; an unsupported call gives ``None`` and its error by metric."""
        nv = self.nv
        out = []
        for i, h in enumerate(self.handles):
            pci, _ = self._call("nvmlDeviceGetPciInfo", h)
            bus = getattr(pci, "busId", b"") if pci is not None else b""
            bdf = (bus.decode() if isinstance(bus, bytes) else str(bus)).lower()[-12:]
            name, _ = self._call("nvmlDeviceGetName", h)
            values: dict[str, float | None] = {}
            unsupported: dict[str, str] = {}
            for metric, (fn, _unit) in NVML_METRICS.items():
                args: tuple[object, ...] = (h,)
                if metric == "pcie_tx_kbps":
                    args = (h, getattr(nv, "NVML_PCIE_UTIL_TX_BYTES", 0))
                elif metric == "pcie_rx_kbps":
                    args = (h, getattr(nv, "NVML_PCIE_UTIL_RX_BYTES", 1))
                v, err = self._call(fn, *args)
                if metric == "gpu_util_pct" and v is not None:
                    v = getattr(v, "gpu", None)
                values[metric] = None if v is None else float(v)  # type: ignore[arg-type]
                if err:
                    unsupported[metric] = err
            out.append(GpuSample(i, bdf, name.decode() if isinstance(name, bytes) else str(name or ""), values,
                                 unsupported))
        return out

    def xid_events(self) -> list[tuple[int, int]]:
        """``[(gpu index, xid)]`` since the last call (non-blocking); ``[]`` when Xid events are unsupported
        (the reason is kept in ``xid_error``, e.g. inside a container without the event device)."""
        nv = self.nv
        if self._events is None and not self.xid_error:
            es, err = self._call("nvmlEventSetCreate")
            mask = getattr(nv, "nvmlEventTypeXidCriticalError", 0)
            for h in self.handles if es is not None else []:
                _, e = self._call("nvmlDeviceRegisterEvents", h, mask, es)
                err = err or e
            if es is None or err:
                self.xid_error = err or "nvmlEventSetCreate failed"
                return []
            self._events = es
        if self._events is None:
            return []
        out = []
        while True:
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)  # type: ignore[attr-defined]
            except nv.NVMLError:  # type: ignore[attr-defined]  # NVML_ERROR_TIMEOUT: nothing pending
                break
            except AttributeError:
                self.xid_error = "nvmlEventSetWait_v2 is not in this nvidia-ml-py"
                break
            idx = next((i for i, h in enumerate(self.handles) if h == data.device), -1)
            out.append((idx, int(data.eventData)))
        return out

    def close(self) -> None:
        """Free the event set and shut NVML down."""
        if self._events is not None:
            self._call("nvmlEventSetFree", self._events)
            self._events = None
        self._call("nvmlShutdown")


def link_utilisation(s: GpuSample) -> float | None:
    """The busier direction's PCIe throughput over the current link's Gb/s (0..1), ``None`` when unknown.

    NVML counts PCIe throughput in KB/s over a 20 ms window (``nvmlDeviceGetPcieThroughput``).
    """
    from producers.hostping.pcie_link import link_gbps

    gen, width = s.values.get("pcie_link_gen"), s.values.get("pcie_link_width")
    tx, rx = s.values.get("pcie_tx_kbps"), s.values.get("pcie_rx_kbps")
    if gen is None or not width or tx is None or rx is None or int(gen) not in GEN_SPEED_GTPS:
        return None
    cap = link_gbps(GEN_SPEED_GTPS[int(gen)], int(width))
    return max(tx, rx) * 1e3 * 8 / 1e9 / cap
