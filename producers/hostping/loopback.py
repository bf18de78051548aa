"""Loopback engine (Hostping §3.3, Figures 5 and 7): what to test, and Eq. 1-3 over the samples.

A loopback writes from a memory region on one endpoint to one on another through the
RNIC (an RC QP connected to itself, so nothing leaves the host). A 1-byte message gives
``T_proc + Lat_host`` (Eq. 2); a 128 KB message (200 Gb/s RNIC) adds ``Size / BW_host``,
so ``BW_host = Size / (Lat_large - Lat_small)`` (Eq. 3). ``T_proc`` is calibrated per RNIC
from its nearest endpoint, whose host latency is taken as Figure 4's distance 1 (1.0 µs).

The measuring backend is pluggable: :class:`producers.hostping.loopback_verbs.VerbsBackend`
needs an RDMA device and pyverbs and fails clearly without them; :class:`producers.hostping.simhost.SimBackend`
drives the same arithmetic from the sim host model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from schemas.intrahost import IntraHostTopology, bw_host_gbps, lat_host_us

SMALL_BYTES = 1
LARGE_BYTES = 128 * 1024
NEAREST_LAT_HOST_US = 1.0


@dataclass(frozen=True)
class LoopbackTest:
    """One loopback: ``rnic`` reads from ``src`` and writes to ``dst`` (both endpoints of its host)."""

    rnic: str
    src: str
    dst: str


@dataclass(frozen=True)
class LoopbackResult:
    """Eq. 2/3 outcome of one test: host latency (µs) and host bandwidth (Gb/s), or an error."""

    test: LoopbackTest
    lat_host_us: float | None
    bw_host_gbps: float | None
    status: str = "ok"
    error: str = ""


class LoopbackBackend(Protocol):
    def latency_us(self, rnic: str, src: str, dst: str, size_bytes: int) -> float:
        """Loopback latency (µs) from ``ibv_post_send`` to the polled completion."""
        ...


class LoopbackUnavailable(RuntimeError):
    """No RDMA device or verbs library: loopback tests cannot run on this machine."""


def plan(topo: IntraHostTopology, mode: str) -> list[LoopbackTest]:
    """Idle: full mesh, every RNIC with every endpoint (§4.2). Busy: each RNIC with its affinitive
    endpoints and the remote memory nodes (§4.3).

    Raises:
        ValueError: ``mode`` is neither ``idle`` nor ``busy``.
    """
    if mode not in ("idle", "busy"):
        raise ValueError(f"loopback mode {mode!r}: use 'idle' (full mesh) or 'busy' (affinitive)")
    tests = []
    for r in topo.rnics:
        if mode == "idle":
            eps = topo.endpoints
        else:
            remote = [m for m in topo.nodes("mem") if topo.socket(m) != topo.socket(r)]
            eps = topo.affinitive(r) + remote
        tests += [LoopbackTest(r, e, e) for e in eps]
    return tests


def measure(backend: LoopbackBackend, tests: list[LoopbackTest]) -> list[LoopbackResult]:
    """Run small and large messages for every test and apply Eq. 2 and Eq. 3.

    A backend error on one test yields a ``status='error'`` result naming it; the others still run.
    """
    small: dict[LoopbackTest, float] = {}
    large: dict[LoopbackTest, float] = {}
    errors: dict[LoopbackTest, str] = {}
    for t in tests:
        try:
            small[t] = backend.latency_us(t.rnic, t.src, t.dst, SMALL_BYTES)
            large[t] = backend.latency_us(t.rnic, t.src, t.dst, LARGE_BYTES)
        except (OSError, RuntimeError, ValueError) as e:
            errors[t] = f"{type(e).__name__}: {e}"
    t_proc = {r: min(v for t, v in small.items() if t.rnic == r) - NEAREST_LAT_HOST_US for r in {t.rnic for t in small}}
    out = []
    for t in tests:
        if t in errors:
            out.append(LoopbackResult(t, None, None, "error", errors[t]))
            continue
        try:
            bw = bw_host_gbps(LARGE_BYTES, large[t], small[t])
        except ValueError as e:  # a noisy sample: the large message was not slower than the small one
            out.append(LoopbackResult(t, None, None, "error", f"ValueError: {e}"))
            continue
        out.append(LoopbackResult(t, lat_host_us(small[t], t_proc[t.rnic]), bw))
    return out


def to_rows(results: list[LoopbackResult], agent_id: str, host: str, mode: str, upload_ns: int) -> list[dict]:
    """``loopback.v1`` rows (schemas.records.LOOPBACK_V1), one per result, for the large message."""
    return [
        {
            "agent_id": agent_id,
            "upload_ns": upload_ns,
            "host": host,
            "rnic": r.test.rnic,
            "src_endpoint": r.test.src,
            "dst_endpoint": r.test.dst,
            "msg_bytes": LARGE_BYTES,
            "latency_ns": None if r.lat_host_us is None else round(r.lat_host_us * 1000),
            "bandwidth_gbps": r.bw_host_gbps,
            "mode": mode,
            "status": r.status,
        }
        for r in results
    ]
