"""A test double of the RDMA device layer of :mod:`producers.hostping.loopback_verbs`.

Each WRITE advances a clock by Hostping Eq. 1 (``T_proc + Lat_host + Size / BW_host``) for the pair's
hand-set latency and bandwidth, so tests can check the engine and Eq. 2-3 against known values.
Used only by tests: the product never fakes a loopback result.
"""

from __future__ import annotations

from dataclasses import dataclass

from producers.hostping.loopback import LoopbackUnavailable


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


@dataclass
class Region:
    endpoint: str
    addr: int
    lkey: int
    rkey: int
    length: int


class Qp:
    """One RC QP connected to itself; a WRITE advances the clock by Eq. 1 for its endpoints."""

    def __init__(self, dev: Device, rnic: str) -> None:
        self.dev, self.rnic, self.closed = dev, rnic, False

    def register(self, endpoint: str, nbytes: int) -> Region:
        if endpoint in self.dev.no_peer_memory:
            raise LoopbackUnavailable(f"{endpoint}: registering GPU memory failed; load nvidia-peermem")
        self.dev.registered.append((self.rnic, endpoint, nbytes))
        return Region(endpoint, 0x1000 * len(self.dev.registered), 1, 2, nbytes)

    def write(self, src: Region, dst: Region, nbytes: int) -> None:
        assert nbytes <= src.length and nbytes <= dst.length
        if (self.rnic, dst.endpoint) in self.dev.bad_completion:
            raise RuntimeError("RDMA WRITE completion status 12 (ibv_wc_status)")
        lat_host_us, bw_gbps = self.dev.paths[(self.rnic, dst.endpoint)]
        us = self.dev.t_proc_us + lat_host_us + nbytes * 8 / (bw_gbps * 1e3)
        self.dev.clock.ns += round(us * 1000)
        self.dev.writes += 1

    def close(self) -> None:
        self.closed = True


class Device:
    def __init__(self, paths: dict[tuple[str, str], tuple[float, float]], t_proc_us: float = 1.5) -> None:
        self.paths, self.t_proc_us = paths, t_proc_us
        self.clock = Clock()
        self.registered: list[tuple[str, str, int]] = []
        self.no_peer_memory: set[str] = set()
        self.bad_completion: set[tuple[str, str]] = set()
        self.qps: list[Qp] = []
        self.writes = 0

    def devices(self) -> list[str]:
        return sorted({r for r, _ in self.paths})

    def open_loopback(self, rnic: str) -> Qp:
        qp = Qp(self, rnic)
        self.qps.append(qp)
        return qp
