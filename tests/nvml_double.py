"""A stand-in for nvidia-ml-py's ``pynvml`` module (the library's Python surface) for tests without a GPU.

Two A100s at the DGX A100 addresses 07:00.0 and 0f:00.0; utilisation unsupported; Xid events either
unsupported (``events=None``) or the given ``(gpu index, xid)`` list. Used only by tests.
"""

from __future__ import annotations

import types


class _NVMLError(Exception):
    pass


class _NotSupported(_NVMLError):
    def __str__(self) -> str:
        return "Not Supported"


def fake_pynvml(events: list[tuple[int, int]] | None) -> types.ModuleType:
    """The slice of nvidia-ml-py's API that NvmlSession calls, for two GPUs; utilisation is unsupported."""
    nv = types.ModuleType("pynvml")
    nv.NVMLError = _NVMLError
    nv.NVML_PCIE_UTIL_TX_BYTES, nv.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    nv.nvmlEventTypeXidCriticalError = 8
    handles = ["h0", "h1"]
    pending = list(events or [])
    nv.nvmlInit = lambda: None
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: handles[i]
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=b"00000000:07:00.0" if h == "h0"
                                                              else b"00000000:0F:00.0")
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA A100-SXM4-40GB"
    nv.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 4 if h == "h0" else 1  # gpu1 idles at Gen1
    nv.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 4
    nv.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    nv.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16
    nv.nvmlDeviceGetPcieReplayCounter = lambda h: 3
    nv.nvmlDeviceGetPcieThroughput = lambda h, c: (10_000_000 if c == 0 else 2_000_000) if h == "h0" else 0

    def util(h: str) -> object:
        raise _NotSupported()

    nv.nvmlDeviceGetUtilizationRates = util
    if events is None:
        def create() -> object:
            raise _NotSupported()
        nv.nvmlEventSetCreate = create
    else:
        nv.nvmlEventSetCreate = lambda: "es"
        nv.nvmlDeviceRegisterEvents = lambda h, mask, es: None
        nv.nvmlEventSetFree = lambda es: None

        def wait(es: str, timeout_ms: int) -> object:
            if not pending:
                raise _NVMLError("Timeout")
            idx, xid = pending.pop(0)
            return types.SimpleNamespace(device=handles[idx], eventData=xid)

        nv.nvmlEventSetWait_v2 = wait
    return nv
