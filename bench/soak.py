"""`fabricscope bench scale --soak`: a simulated week of pinglist rotation, compressed in time.

The worker's per-key state is the path index (:class:`streams.pingmesh.links.PathIndex`). At
``rnics`` RNICs each RNIC keeps ``tor_mesh`` ToR-mesh tuples (stable) and ``inter_tor`` inter-ToR
tuples, of which 20 % rotate to new source ports every hour (R-Pingmesh §4.1), plus ``service``
tuples of jobs that come and go every few hours. Each tuple is traced in both directions when it
first appears. Every simulated hour: one path batch with the new traces (:meth:`PathIndex.update`),
then one probe step over every tuple on a pinglist now (:func:`attach_paths`, which records what
was used and evicts what no pinglist probed for two rotation periods). It prints, per simulated
hour, the index size, the update and step times and this process's RSS; both must stay flat.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from bench.procstat import rss_mib
from streams.pingmesh.links import HOUR_NS, PathIndex, attach_paths

T0 = 1_800_000_000 * 10**9


@dataclass
class SoakHour:
    """One simulated hour: index entries, update ms, probe-step ms, RSS MiB."""

    hour: int
    entries: int
    new_paths: int
    update_ms: float
    step_ms: float
    rss_mib: float


def _ip(r: np.ndarray) -> np.ndarray:
    return np.char.add("10.", np.char.add((r // 256).astype(str), np.char.add(".", (r % 256).astype(str))))


def _paths(src: np.ndarray, dst: np.ndarray, sport: np.ndarray, at_ns: int) -> pa.Table:
    """Forward and reverse traces of tuples (src RNIC, dst RNIC, source port): 5 hops each."""
    n = len(src)
    si, di = _ip(src), _ip(dst)
    hops = np.char.add(np.char.add(np.char.add("r", src.astype(str)), ",T,S,T2,r"), dst.astype(str))
    both = {
        "direction": np.r_[np.full(n, "forward"), np.full(n, "reverse")],
        "src_ip": np.r_[si, di], "dst_ip": np.r_[di, si],
        "src_port": np.r_[sport, sport].astype(np.uint16), "dst_port": np.full(2 * n, 4791, np.uint16),
        "hops": np.r_[hops, hops], "trace_ns": np.full(2 * n, at_ns, np.int64),
    }
    return pa.table({k: pa.array(v) for k, v in both.items()})


def _probes(src: np.ndarray, dst: np.ndarray, sport: np.ndarray, at_ns: int) -> pa.Table:
    n = len(src)
    return pa.table({"src_ip": pa.array(_ip(src)), "dst_ip": pa.array(_ip(dst)),
                     "src_port": pa.array(sport.astype(np.uint16)), "dst_port": pa.array(np.full(n, 4791, np.uint16)),
                     "upload_ns": pa.array(np.full(n, at_ns, np.int64))})


def run(rnics: int = 10_000, hours: int = 168, tor_mesh: int = 8, inter_tor: int = 8, service: int = 2,
        seed: int = 1, every: int = 12, progress=print) -> list[SoakHour]:  # noqa: ANN001 - a print-like callable
    """Soak the path index for ``hours`` simulated hours; ``progress`` gets every ``every``-th hour."""
    rng = np.random.default_rng(seed)
    r = np.arange(rnics)
    mesh_src = np.repeat(r, tor_mesh)
    mesh_dst = ((mesh_src // 32) * 32 + (mesh_src % 32 + 1 + np.tile(np.arange(tor_mesh), rnics)) % 32) % rnics
    mesh_port = np.full(len(mesh_src), 49152, np.int64)
    it_src = np.repeat(r, inter_tor)
    it_dst = rng.integers(0, rnics, len(it_src))
    it_port = rng.integers(49153, 65535, len(it_src))
    sv_src = np.repeat(r, service)
    sv_dst = rng.integers(0, rnics, len(sv_src))
    sv_port = rng.integers(49153, 65535, len(sv_src))
    index = PathIndex()
    out: list[SoakHour] = []
    fresh = np.ones(len(mesh_src) + len(it_src) + len(sv_src), dtype=bool)
    for h in range(hours + 1):
        at = T0 + h * HOUR_NS
        if h:
            rot = rng.random(len(it_src)) < 0.2  # Eq. 1: 20 % of the inter-ToR tuples per hour
            it_port = np.where(rot, rng.integers(49153, 65535, len(it_src)), it_port)
            job = rng.random(len(sv_src)) < 0.1  # jobs come and go: new service tuples
            sv_port = np.where(job, rng.integers(49153, 65535, len(sv_src)), sv_port)
            fresh = np.r_[np.zeros(len(mesh_src), bool), rot, job]
        src = np.r_[mesh_src, it_src, sv_src]
        dst = np.r_[mesh_dst, it_dst, sv_dst]
        port = np.r_[mesh_port, it_port, sv_port]
        batch = _paths(src[fresh], dst[fresh], port[fresh], at)
        t0 = time.perf_counter()
        index.update(batch)
        t1 = time.perf_counter()
        attach_paths(_probes(src, dst, port, at + HOUR_NS // 2), index)  # one step over every current tuple
        t2 = time.perf_counter()
        row = SoakHour(h, len(index), batch.num_rows, (t1 - t0) * 1e3, (t2 - t1) * 1e3, rss_mib(os.getpid()))
        out.append(row)
        if h % every == 0:
            progress(row)
    return out


def report(rows: list[SoakHour]) -> str:
    """Table of the soak, and first/last-day means."""
    lines = ["hour  entries  new paths  update ms  step ms  RSS MiB"]
    lines += [f"{r.hour:4d} {r.entries:8d} {r.new_paths:10d} {r.update_ms:10.0f} {r.step_ms:8.0f} {r.rss_mib:8.0f}"
              for r in rows if r.hour % 12 == 0]
    day1 = [r for r in rows if 24 <= r.hour < 48]
    last = rows[-24:]
    if day1 and last:
        def mean(rs: list[SoakHour], f: str) -> float:
            return float(np.mean([getattr(r, f) for r in rs]))
        lines.append(
            f"day 2 vs last day: entries {mean(day1, 'entries'):.0f} -> {mean(last, 'entries'):.0f}, update ms "
            f"{mean(day1, 'update_ms'):.0f} -> {mean(last, 'update_ms'):.0f}, step ms {mean(day1, 'step_ms'):.0f} -> "
            f"{mean(last, 'step_ms'):.0f}, RSS MiB {mean(day1, 'rss_mib'):.0f} -> {mean(last, 'rss_mib'):.0f}")
    return "\n".join(lines)
