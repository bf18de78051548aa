"""The verbs loopback engine (Hostping §3.3, Figure 7): RDMA writes through an RC QP connected to itself.

Per RNIC one RC queue pair is connected to its own QP number and GID, so a WRITE never leaves
the host: the RNIC reads the source memory region over PCIe and writes the destination region
back over PCIe. Per endpoint two regions are registered (read and write side): host memory bound
to NUMA node N for ``memN``, GPU memory for ``gpuN`` (CUDA memory registered through
nvidia-peermem). The latency of one message is the time from posting the WRITE to polling its
completion (Eq. 1); :func:`producers.hostping.loopback.measure` turns 1-byte and 128 KB latencies
into ``T_proc + Lat_host`` (Eq. 2) and ``BW_host`` (Eq. 3). Python's own post/poll cost is
constant per message, so it lands in ``T_proc`` and cancels in Eq. 3's difference.

The engine talks to the RDMA stack only through :class:`RdmaDevice` / :class:`LoopbackQp`
(small protocols). :class:`PyverbsDevice` implements them with rdma-core's pyverbs; tests inject
their own implementation to check everything around the device. Without an RDMA device or
pyverbs, :class:`VerbsBackend` refuses at construction and says what is missing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from producers.hostping.loopback import LoopbackUnavailable

WARMUP = 5
ITERATIONS = 50


class MemoryRegion(Protocol):
    """A registered region: its address as the RNIC sees it, its keys and length (bytes)."""

    addr: int
    lkey: int
    rkey: int
    length: int


class LoopbackQp(Protocol):
    """An RC QP connected to itself on one RNIC."""

    def register(self, endpoint: str, nbytes: int) -> MemoryRegion:
        """Register ``nbytes`` on ``endpoint`` (``memN``: host memory of NUMA node N; ``gpuN``: GPU memory).

        Raises:
            LoopbackUnavailable: the endpoint's memory cannot be registered here (e.g. no peer memory).
        """
        ...

    def write(self, src: MemoryRegion, dst: MemoryRegion, nbytes: int) -> None:
        """Post one signaled RDMA WRITE of ``nbytes`` from ``src`` to ``dst`` and poll its completion.

        Raises:
            RuntimeError: the completion carries an error status (names it).
        """
        ...

    def close(self) -> None:
        """Destroy the QP, its CQ, MRs and protection domain."""
        ...


class RdmaDevice(Protocol):
    """The RDMA stack as the engine sees it."""

    def devices(self) -> list[str]:
        """RDMA device names (``mlx5_0``)."""
        ...

    def open_loopback(self, rnic: str) -> LoopbackQp:
        """Open ``rnic`` and connect one RC QP to itself."""
        ...


class VerbsBackend:
    """:class:`producers.hostping.loopback.LoopbackBackend` over real RNICs.

    Args:
        sysfs_root: where to look for ``class/infiniband`` (``--path.sysfs``).
        device: the RDMA stack; default :class:`PyverbsDevice` over ``sysfs_root``.
        iterations, warmup: messages timed per latency (median reported) and untimed before them.
        clock: a monotonic ns clock (``time.perf_counter_ns``).

    Raises:
        LoopbackUnavailable: at construction, when there is no RDMA device or no pyverbs.
    """

    def __init__(self, sysfs_root: str | Path = "/sys", device: RdmaDevice | None = None,
                 iterations: int = ITERATIONS, warmup: int = WARMUP,
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        if iterations < 1 or warmup < 0:
            raise ValueError(f"iterations must be >= 1 and warmup >= 0, got {iterations}, {warmup}")
        self.device = device if device is not None else PyverbsDevice(sysfs_root)
        self.devices = sorted(self.device.devices())
        if not self.devices:
            raise LoopbackUnavailable(
                f"no RDMA device under {Path(sysfs_root) / 'class' / 'infiniband'}: loopback tests need an RNIC "
                "(mlx5_*) and its driver; this host runs the hardware monitor only")
        self.iterations, self.warmup, self.clock = iterations, warmup, clock
        self._qps: dict[str, LoopbackQp] = {}
        self._mrs: dict[tuple[str, str, str], MemoryRegion] = {}

    def _qp(self, rnic: str) -> LoopbackQp:
        if rnic not in self.devices:
            raise ValueError(f"{rnic} is not an RDMA device of this host ({', '.join(self.devices)})")
        if rnic not in self._qps:
            self._qps[rnic] = self.device.open_loopback(rnic)
        return self._qps[rnic]

    def _mr(self, qp: LoopbackQp, rnic: str, side: str, endpoint: str, nbytes: int) -> MemoryRegion:
        key = (rnic, side, endpoint)
        mr = self._mrs.get(key)
        if mr is None or mr.length < nbytes:  # registered once at the largest size asked for
            mr = qp.register(endpoint, max(nbytes, 128 * 1024))
            self._mrs[key] = mr
        return mr

    def latency_us(self, rnic: str, src: str, dst: str, size_bytes: int) -> float:
        """Median loopback latency (µs) of ``size_bytes`` WRITEs from ``src``'s region to ``dst``'s.

        Raises:
            LoopbackUnavailable: an endpoint's memory cannot be registered here.
            RuntimeError: a completion with an error status.
            ValueError: ``rnic`` is not a device of this host, or ``size_bytes`` < 1.
        """
        if size_bytes < 1:
            raise ValueError(f"message size must be >= 1 byte, got {size_bytes}")
        qp = self._qp(rnic)
        a = self._mr(qp, rnic, "read", src, size_bytes)
        b = self._mr(qp, rnic, "write", dst, size_bytes)
        for _ in range(self.warmup):
            qp.write(a, b, size_bytes)
        samples = []
        for _ in range(self.iterations):
            t0 = self.clock()
            qp.write(a, b, size_bytes)
            samples.append(self.clock() - t0)
        return statistics.median(samples) / 1000.0

    def close(self) -> None:
        """Close every QP (and with it its regions)."""
        for qp in self._qps.values():
            qp.close()
        self._qps.clear()
        self._mrs.clear()


# --- pyverbs implementation (runs only where an RNIC and rdma-core's pyverbs exist) --------------

_MPOL_BIND = 2
_MPOL_MF_STRICT, _MPOL_MF_MOVE = 1 << 0, 1 << 1
_MBIND_NR = {"x86_64": 237, "aarch64": 235}


def bind_to_node(buf: mmap.mmap, node: int) -> None:
    """``mbind(2)`` an anonymous mapping to NUMA ``node`` (MPOL_BIND, pages moved), then touch it.

    Raises:
        OSError: the kernel refused (no such node, or no NUMA support).
    """
    import platform

    nr = _MBIND_NR.get(platform.machine())
    if nr is None:
        raise OSError(f"mbind: no syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    mask = ctypes.c_ulong(1 << node)
    if libc.syscall(nr, ctypes.c_void_p(addr), ctypes.c_ulong(len(buf)), _MPOL_BIND, ctypes.byref(mask),
                    ctypes.c_ulong(64), _MPOL_MF_MOVE | _MPOL_MF_STRICT) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mbind to NUMA node {node}: {ctypes.cast(libc.strerror(err), ctypes.c_char_p).value}")
    buf[:] = b"\0" * len(buf)  # fault every page in on the bound node before registration


class PyverbsDevice:
    """:class:`RdmaDevice` over rdma-core's pyverbs (``python3-pyverbs``).

    Raises:
        LoopbackUnavailable: no device under ``<sysfs_root>/class/infiniband``, or pyverbs missing.
    """

    def __init__(self, sysfs_root: str | Path = "/sys", port: int = 1, gid_index: int = 3) -> None:
        ib = Path(sysfs_root) / "class" / "infiniband"
        self._names = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
        if not self._names:
            raise LoopbackUnavailable(
                f"no RDMA device under {ib}: loopback tests need an RNIC (mlx5_*) and its driver; "
                "this host runs the hardware monitor only (use the sim backend elsewhere)")
        try:
            import pyverbs  # noqa: F401
        except ImportError:
            raise LoopbackUnavailable(
                "pyverbs is not installed: install rdma-core's python3-pyverbs (or `pip install .[verbs]`)"
            ) from None
        self.port, self.gid_index = port, gid_index

    def devices(self) -> list[str]:
        return list(self._names)

    def open_loopback(self, rnic: str) -> LoopbackQp:
        return _PyverbsQp(rnic, self.port, self.gid_index)


class _Region:
    def __init__(self, addr: int, lkey: int, rkey: int, length: int, keep: object) -> None:
        self.addr, self.lkey, self.rkey, self.length = addr, lkey, rkey, length
        self.keep = keep  # the MR and its buffer live as long as the region


class _PyverbsQp:
    """One RC QP on ``rnic`` connected to itself (RoCEv2: the destination GID is its own)."""

    def __init__(self, rnic: str, port: int, gid_index: int) -> None:
        import pyverbs.enums as e
        from pyverbs.addr import AHAttr, GlobalRoute
        from pyverbs.cq import CQ
        from pyverbs.device import Context
        from pyverbs.pd import PD
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

        self.e = e
        self.ctx = Context(name=rnic)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 16)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                          cap=QPCap(max_send_wr=16, max_recv_wr=1, max_send_sge=1, max_recv_sge=1))
        self.qp = QP(self.pd, init)
        pattr = self.ctx.query_port(port)
        gid = self.ctx.query_gid(port, gid_index)
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, cur_qp_state=e.IBV_QPS_RESET, port_num=port)
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        attr.path_mtu = pattr.active_mtu
        attr.dest_qp_num = self.qp.qp_num  # connected to itself
        attr.rq_psn = attr.sq_psn = 0
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(port_num=port, is_global=1, dlid=pattr.lid,
                              gr=GlobalRoute(dgid=gid, sgid_index=gid_index))
        self.qp.to_rts(attr)
        self._cuda: ctypes.CDLL | None = None

    def register(self, endpoint: str, nbytes: int) -> MemoryRegion:
        from pyverbs.mr import MR

        e = self.e
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        if endpoint.startswith("mem") and endpoint[3:].isdigit():
            buf = mmap.mmap(-1, nbytes)
            bind_to_node(buf, int(endpoint[3:]))
            addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
            mr = MR(self.pd, nbytes, access, address=addr)
            return _Region(addr, mr.lkey, mr.rkey, nbytes, (mr, buf))
        if endpoint.startswith("gpu") and endpoint[3:].isdigit():
            addr = self._cuda_alloc(int(endpoint[3:]), nbytes)
            try:
                mr = MR(self.pd, nbytes, access, address=addr)
            except Exception as err:  # pyverbs raises PyverbsRDMAError; any failure means no peer memory
                raise LoopbackUnavailable(
                    f"{endpoint}: registering GPU memory failed ({err}); load nvidia-peermem (or use a dmabuf-capable "
                    "rdma-core and driver)") from None
            return _Region(addr, mr.lkey, mr.rkey, nbytes, mr)
        raise LoopbackUnavailable(f"endpoint {endpoint!r}: expected memN (NUMA node) or gpuN")

    def _cuda_alloc(self, gpu: int, nbytes: int) -> int:
        """``cuMemAlloc`` on GPU ``gpu`` through the CUDA driver API (libcuda), in its primary context."""
        if self._cuda is None:
            name = ctypes.util.find_library("cuda")
            if name is None:
                raise LoopbackUnavailable("GPU endpoints need libcuda (the NVIDIA driver); not found")
            self._cuda = ctypes.CDLL(name)
            if self._cuda.cuInit(0) != 0:
                raise LoopbackUnavailable("cuInit failed: no usable NVIDIA GPU for GPU endpoints")
        cu = self._cuda
        dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
        for call, args in (("cuDeviceGet", (ctypes.byref(dev), gpu)),
                           ("cuDevicePrimaryCtxRetain", (ctypes.byref(ctx), dev)),
                           ("cuCtxSetCurrent", (ctx,)),
                           ("cuMemAlloc_v2", (ctypes.byref(ptr), ctypes.c_size_t(nbytes)))):
            rc = getattr(cu, call)(*args)
            if rc != 0:
                raise LoopbackUnavailable(f"gpu{gpu}: {call} returned CUDA error {rc}")
        return int(ptr.value)

    def write(self, src: MemoryRegion, dst: MemoryRegion, nbytes: int) -> None:
        from pyverbs.wr import SGE, SendWR

        e = self.e
        wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.addr, nbytes, src.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(dst.rkey, dst.addr)
        self.qp.post_send(wr)
        while True:
            n, wcs = self.cq.poll()
            if n:
                if wcs[0].status != e.IBV_WC_SUCCESS:
                    raise RuntimeError(f"RDMA WRITE completion status {wcs[0].status} (ibv_wc_status)")
                return

    def close(self) -> None:
        for obj in (self.qp, self.cq, self.pd, self.ctx):
            obj.close()
