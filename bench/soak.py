"""`fabricscope bench scale --soak`: a simulated week of pinglist rotation, compressed in time.

The worker's per-key state is the path index (:class:`streams.pingmesh.path_index.PathIndex`); the
reducer's is the latency rule's per-flow baseline (:func:`streams.pingmesh.latency.update_baseline`;
the analyzer's other state is keyed by host, RNIC or job, or pruned by time). At
``rnics`` RNICs each RNIC keeps ``tor_mesh`` ToR-mesh tuples (stable) and ``inter_tor`` inter-ToR
tuples, of which 20 % rotate to new source ports every hour (R-Pingmesh §4.1), plus ``service``
tuples of jobs that come and go every few hours. Each tuple is traced in both directions when it
first appears. Every simulated hour: one path batch with the new traces (:meth:`PathIndex.update`),
then one probe step over every tuple on a pinglist now (:func:`attach_paths`, which records what
was used and evicts what no pinglist probed for two rotation periods). It prints, per simulated
hour, the index size, the update and step CPU times and this process's RSS; both must stay flat.

The reducer runs in a process of its own (so each RSS is its own), over the same rotation (same
seed): every simulated hour one window's flow table (one row per flow now on a pinglist, its P99
network RTT) goes through the latency rule's two stateful steps, :func:`slow_flows` against the
baselines and :func:`update_baseline`, as the reducer does after each window. It prints the flows
with a baseline, the update's CPU time and that process's RSS per hour.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from bench.procstat import rss_mib
from streams.pingmesh.latency import slow_flows, update_baseline
from streams.pingmesh.path_index import HOUR_NS, PathIndex, attach_paths

T0 = 1_800_000_000 * 10**9


@dataclass
class SoakHour:
    """One simulated hour: worker (path index entries, update and probe-step CPU ms, RSS MiB) and reducer
    (flows with a latency baseline, baseline update CPU ms, RSS MiB)."""

    hour: int
    entries: int
    new_paths: int
    update_ms: float
    step_ms: float
    rss_mib: float
    baseline_flows: int = 0
    reducer_update_ms: float = float("nan")
    reducer_rss_mib: float = float("nan")


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


def _rotation(rnics: int, hours: int, tor_mesh: int, inter_tor: int, service: int,
              seed: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Per simulated hour: (hour, src, dst, source port, pinglist code 0/1/2, fresh) of every tuple probed now;
    ``fresh`` marks the tuples first probed this hour (to be traced)."""
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
    code = np.r_[np.zeros(len(mesh_src), np.int8), np.ones(len(it_src), np.int8), np.full(len(sv_src), 2, np.int8)]
    fresh = np.ones(len(code), dtype=bool)
    for h in range(hours + 1):
        if h:
            rot = rng.random(len(it_src)) < 0.2  # Eq. 1: 20 % of the inter-ToR tuples per hour
            it_port = np.where(rot, rng.integers(49153, 65535, len(it_src)), it_port)
            job = rng.random(len(sv_src)) < 0.1  # jobs come and go: new service tuples
            sv_port = np.where(job, rng.integers(49153, 65535, len(sv_src)), sv_port)
            fresh = np.r_[np.zeros(len(mesh_src), bool), rot, job]
        yield h, np.r_[mesh_src, it_src, sv_src], np.r_[mesh_dst, it_dst, sv_dst], np.r_[mesh_port, it_port, sv_port], \
            code, fresh


_PINGLISTS = np.array(["tor_mesh", "inter_tor", "service"])


def _window_flows(src: np.ndarray, dst: np.ndarray, port: np.ndarray, code: np.ndarray,
                  rng: np.random.Generator) -> pa.Table:
    """One window's ``flow_quantiles`` rows for the current tuples: healthy P99s (ns), 20 samples each."""
    n = len(src)
    flow = np.char.add(np.char.add(np.char.add(np.char.add(_PINGLISTS[code], "|r"), src.astype(str)),
                                   np.char.add("|r", dst.astype(str))), np.char.add("|", port.astype(str)))
    return pa.table({"flow": pa.array(flow), "n": pa.array(np.full(n, 20, np.int64)),
                     "p99_ns": pa.array(rng.normal(12_000.0, 500.0, n)),
                     "ts_source": pa.array(np.full(n, "hardware"))})


def _reducer_soak(args: tuple, out: multiprocessing.Queue, parent: int) -> None:
    """The reducer side (a process of its own): ``(hour, flows with a baseline, update ms, RSS MiB)`` per hour.
    Stops when the ``parent`` process is gone (killed before it could stop this one)."""
    rng = np.random.default_rng(99)
    baseline = None
    for h, src, dst, port, code, _ in _rotation(*args):
        if os.getppid() != parent:
            return
        fq = _window_flows(src, dst, port, code, rng)
        t0 = time.process_time()  # CPU time: wall time on a shared machine swings with the load
        marked = slow_flows(fq, baseline)
        baseline = update_baseline(baseline, marked, now_ns=T0 + h * HOUR_NS)
        out.put((h, baseline.num_rows, (time.process_time() - t0) * 1e3, rss_mib(os.getpid())))
    out.put(None)


def run(rnics: int = 10_000, hours: int = 168, tor_mesh: int = 8, inter_tor: int = 8, service: int = 2,
        seed: int = 1, every: int = 12, progress=print) -> list[SoakHour]:  # noqa: ANN001 - a print-like callable
    """Soak the path index (this process) and the reducer's flow baselines (a child process) for ``hours``
    simulated hours; ``progress`` gets every ``every``-th hour."""
    args = (rnics, hours, tor_mesh, inter_tor, service, seed)
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    child = ctx.Process(target=_reducer_soak, args=(args, q, os.getpid()), daemon=True)
    child.start()
    index = PathIndex()
    out: list[SoakHour] = []
    reducer: dict[int, tuple] = {}
    for h, src, dst, port, _, fresh in _rotation(*args):
        at = T0 + h * HOUR_NS
        batch = _paths(src[fresh], dst[fresh], port[fresh], at)
        t0 = time.process_time()  # CPU time of this process (the reducer's is in its own)
        index.update(batch)
        t1 = time.process_time()
        attach_paths(_probes(src, dst, port, at + HOUR_NS // 2), index)  # one step over every current tuple
        t2 = time.process_time()
        out.append(SoakHour(h, len(index), batch.num_rows, (t1 - t0) * 1e3, (t2 - t1) * 1e3, rss_mib(os.getpid())))
        _drain(q, reducer, child, wait=False)
        if h % every == 0:
            r = out[-1]
            r.baseline_flows, r.reducer_update_ms, r.reducer_rss_mib = reducer.get(h, (0, float("nan"), float("nan")))
            progress(r)
    _drain(q, reducer, child, wait=True)
    child.join(timeout=60)
    for r in out:
        if r.hour in reducer:
            r.baseline_flows, r.reducer_update_ms, r.reducer_rss_mib = reducer[r.hour]
    return out


def _drain(q: multiprocessing.Queue, into: dict[int, tuple], child: multiprocessing.Process, wait: bool) -> None:
    """Move the reducer process's hours from ``q`` into ``into``; ``wait``: until it says it is done.

    Raises:
        RuntimeError: the reducer process died before it was done.
    """
    import queue

    while -1 not in into:  # -1: the reducer process said it is done
        try:
            got = q.get(timeout=5) if wait else q.get_nowait()
        except queue.Empty:
            if not wait:
                return
            if not child.is_alive():
                raise RuntimeError(f"the reducer soak process exited ({child.exitcode}) before it was done") from None
            continue
        if got is None:
            into[-1] = ()
            return
        h, *figures = got
        into[h] = tuple(figures)


def summary(rows: list[SoakHour]) -> dict:
    """Day-2 and last-day means of each figure and their ratio (last / day 2): the `--json` object."""
    day2 = [r for r in rows if 24 <= r.hour < 48] or rows[: max(1, len(rows) // 2)]
    last = rows[-24:]
    out: dict = {"hours": rows[-1].hour if rows else 0}
    for f in ("entries", "update_ms", "step_ms", "rss_mib", "baseline_flows", "reducer_update_ms", "reducer_rss_mib"):
        a = float(np.nanmean([getattr(r, f) for r in day2]))
        b = float(np.nanmean([getattr(r, f) for r in last]))
        out[f] = {"day2": round(a, 1), "last_day": round(b, 1), "ratio": round(b / a, 3) if a else None}
    return out


def report(rows: list[SoakHour]) -> str:
    """Table of the soak every 12 simulated hours, and day-2 vs last-day means (the flatness check)."""
    lines = ["hour  entries  new paths  update ms  step ms  RSS MiB | baseline flows  update ms  RSS MiB  (ms: CPU)",
             "      ---------------- worker (path index) ----------- | ----- reducer (flow baselines) -----"]
    lines += [f"{r.hour:4d} {r.entries:8d} {r.new_paths:10d} {r.update_ms:10.0f} {r.step_ms:8.0f} {r.rss_mib:8.0f} |"
              f" {r.baseline_flows:14d} {r.reducer_update_ms:10.0f} {r.reducer_rss_mib:8.0f}"
              for r in rows if r.hour % 12 == 0]
    s = summary(rows)
    lines.append("day 2 vs last day (means): " + ", ".join(
        f"{k} {v['day2']:g} -> {v['last_day']:g} ({v['ratio']:.2f}x)" for k, v in s.items()
        if isinstance(v, dict) and v["ratio"] is not None))
    return "\n".join(lines)
