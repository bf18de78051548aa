"""`fabricscope bench scale`: a simulated R-Pingmesh fabric at the paper's rates through the real pipeline.

The fabric: ``rnics`` RNICs (8 per host, 4 hosts and 32 RNICs per ToR, 32 spines: the paper's
Tomahawk-4 ToRs, §6) probing on the three pinglists (R-Pingmesh §3.2, §4): ToR-mesh (10 probes/s
per RNIC), inter-ToR (Eq. 1, P = 0.99, over 10 probes/s each way on every uplink) and service
(one job connection per RNIC to the same slot under the next ToR, 100 probes/s; jobs of 64
RNICs). Every rate is then scaled so the mean RNIC sends ``rate`` x 150 probes/s, which keeps the
pinglists' shares. One ToR uplink is down for the whole run, so every window has a ``switch``
verdict whose way into the store can be timed.

The simulator (:class:`producers.sim.Simulator`, traces on change) makes ~0.5 M rows/s on one core
at 10,000 RNICs, but it would share the cores with the pipeline it measures, so every message is
generated and published first (the registry, then per 5 s upload round each agent's traced paths
and probe batch, Arrow IPC as the workers read it), and only then do the worker processes, the
reducer and the store writer start, laid out as ``fabricscope up`` does (:class:`bench.pipeline.PipelineProcs`:
N ``--role stream`` workers, one ``--role reducer`` process): they run as fast as they go, and nothing
else uses the CPU meanwhile. Measured, from outside the processes:

- sustained rows/s: probe rows stored, from the first stored row to the last;
- consumer lag over time, once a second: uncommitted messages of ``probes.raw`` (the workers'
  group), ``window.partials`` (the reducer's) and ``probes.raw`` again (the store writer's, in its own group);
- per window, from its ``windows.closed`` summary: reducer milliseconds (from taking the message
  that moved the watermark past the window's end to the window merged and analyzed), and of them:
  before the reducer's thread started on the message (mirror catch-up), the CPU milliseconds that
  thread spent on it (merge, close, analysis; pyarrow's own thread pool not counted) and the
  milliseconds it was runnable but waiting for a core (schedstat: the machine's load); the rest it
  was blocked (the GIL, I/O, pyarrow's pool); and the reducer process's RSS then;
- verdict latency: from that same moment to the window's verdict rows being readable through the
  store writer's query endpoint (polled every 0.1 s), p50/p99 over the windows with verdicts, and
  its two later legs: merged + analyzed to the verdicts acknowledged by the broker ("to broker"),
  then to readable in the store ("to store": the store writer's wait and insert, the poll);
- CPU seconds per stored row of the workers, the reducer, the store writer and the broker, and the
  cores a 1.5 M rows/s cluster would need at that cost.

:func:`profile_reducer` profiles the reducer alone on the same fabric, in one process;
:func:`profile_startup` measures a stream worker's start-up load of the fabric's traced paths.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PAPER_PPS_PER_RNIC = 150.0  # R-Pingmesh §6: ToR-mesh + inter-ToR + service probes per RNIC and second
CLUSTER_ROWS_S = 1_500_000  # 10,000 RNICs x 150 probes/s
JOB_RNICS = 64  # RNICs per simulated job (8 hosts)


@dataclass
class WindowFigures:
    """One analyzed window: reducer wall ms, CPU ms (its thread) and RSS MiB, verdicts, and verdict latency
    (s; NaN without verdicts) with its legs after the close."""

    window_start_ns: int
    verdicts: int
    timeouts: int
    reduce_ms: float
    reduce_cpu_ms: float
    reducer_rss_mib: float
    verdict_latency_s: float
    before_merge_ms: float = float("nan")
    """watermark message taken -> the reducer thread starts on it (topic mirrors' catch-up, the thread's queue)"""
    reduce_runqueue_ms: float = float("nan")
    """the reducer thread's ms runnable but waiting for a core while on that message (Linux schedstat)"""
    send_ms: float = float("nan")
    """merged + analyzed -> its verdicts acknowledged by the broker (ms)"""
    store_s: float = float("nan")
    """verdicts acknowledged -> readable in the store (s): the store writer's wait, its insert, the 0.1 s poll"""


@dataclass
class ScaleResult:
    """Figures of one `bench scale` run (`as_dict` gives the JSON keys)."""

    rnics: int
    windows: int
    rate: float
    workers: int
    probes_per_rnic_s: float
    rows_produced: int
    messages: int
    generate_s: float
    rows_stored: int
    minute_tier_probes: int
    pipeline_s: float
    rows_s: float
    lag: list[dict] = field(default_factory=list)
    window_figures: list[WindowFigures] = field(default_factory=list)
    verdict_latency_p50_s: float = float("nan")
    verdict_latency_p99_s: float = float("nan")
    reduce_ms_max: float = float("nan")
    reduce_cpu_ms_max: float = float("nan")
    reducer_rss_mib_max: float = float("nan")
    cpu_us_per_row: dict[str, float] = field(default_factory=dict)
    cores_for_1_5m_rows_s: float = float("nan")
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    loop_lag_p99_ms: float = float("nan")
    cpu_from: str = "first stored row"
    """where rows/s and CPU per row are counted from (``process start`` when a tiny run stores at once)"""
    load_avg: tuple[float, float, float] = (0.0, 0.0, 0.0)
    own_reducer: bool = True
    """the reducer in a process of its own (``fabricscope up``'s layout), else inside a worker"""
    restart_at_s: float = float("nan")
    """``restart_worker_s`` given: when (s after the processes started) a stream worker was killed and restarted"""
    restart_stall_s: float = float("nan")
    """after that restart: the longest time a ``probes.raw`` partition with input left committed nothing
    (its agents' uploads, and so every window's watermark, waited that long)"""
    stall_before_restart_s: float = float("nan")
    """the same over the 60 s before the restart: what commits every few seconds look like undisturbed"""
    complete: bool = False

    def as_dict(self) -> dict:
        """JSON-ready dict: every field, floats rounded, windows as dicts."""
        def rnd(v: object) -> object:
            if isinstance(v, float):
                return None if math.isnan(v) else round(v, 3)
            if isinstance(v, dict):
                return {k: rnd(x) for k, x in v.items()}
            if isinstance(v, list | tuple):
                return [rnd(x) for x in v]
            if isinstance(v, WindowFigures):
                return rnd(v.__dict__)
            return v
        return {k: rnd(v) for k, v in self.__dict__.items()}


def build_simulator(rnics: int, rate: float = 1.0, seed: int = 1):  # noqa: ANN201 - producers.sim.Simulator
    """The benchmark's fabric and pinglists (module docstring); ``rate`` scales the paper's 150 probes/s/RNIC.

    Raises:
        ValueError: ``rnics`` < 64 (two ToRs) or ``rate`` not positive.
    """
    from producers import controller as ctl
    from producers.sim import Simulator
    from producers.sim.fabrics import random_clos
    from producers.sim.faults import LinkDown

    if rnics < 64 or not rate > 0:
        raise ValueError(f"need at least 64 RNICs (two ToRs) and a positive rate; got {rnics} RNICs, rate {rate}")
    inv = random_clos(seed, n_tors=max(2, round(rnics / 32)), n_spines=32, hosts_per_tor=4, rnics_per_host=8)
    tors = list(inv.tors)
    under = [inv.rnics_under_tor(t) for t in tors]
    rng = np.random.default_rng(seed)
    conns = []
    for ti, rs in enumerate(under):  # each RNIC to the RNIC in its slot under the next ToR: a job's ring
        nxt = under[(ti + 1) % len(tors)]
        for i, r in enumerate(rs):
            conns.append({"job_id": f"job{(ti * len(rs) + i) // JOB_RNICS}", "src_rnic": r,
                          "dst_rnic": nxt[i % len(nxt)], "flow_label": int(rng.integers(1 << 20))})
    reg = ctl.Registry.from_inventory(inv, seed=seed)  # the one Simulator builds: same seed, same QPNs
    lists = {"tor_mesh": ctl.tor_mesh(inv, reg), "inter_tor": ctl.inter_tor(inv, reg, seed=seed, now_ns=0),
             "service": ctl.service(inv, reg, conns)}
    total = sum(e["rate_pps"] for es in lists.values() for e in es)
    k = rate * PAPER_PPS_PER_RNIC * len(inv.rnics) / total
    lists = {name: [{**e, "rate_pps": e["rate_pps"] * k} for e in es] for name, es in lists.items()}
    return Simulator(inv, seed=seed, faults=[LinkDown(a=tors[0], b="S3")], pinglists=lists, trace="on_change")


def publish_fabric(sim, bootstrap: str, prefix: str, start_ns: int, rounds: int,  # noqa: ANN001 - Simulator
                   progress=None) -> tuple[int, int]:  # noqa: ANN001 - a print-like callable or None
    """Publish the registry, then ``rounds`` 5 s upload rounds from ``start_ns``: per agent its traced
    paths, then its probe batch (with the heartbeat headers an agent sends). Returns (probe rows, messages).

    Raises:
        RuntimeError: the broker did not take every message.
    """
    from producers.kafka_producer import AgentProducer
    from producers.sim.engine import BATCH_NS
    from schemas.arrow_pa import table_from_columns
    from schemas.codec import encode
    from schemas.topics import PATHS_TRACED, PROBES_RAW, REGISTRY, topic_name

    probes_t, paths_t, reg_t = (topic_name(t, prefix) for t in (PROBES_RAW, PATHS_TRACED, REGISTRY))
    prod = AgentProducer(bootstrap, max_buffered=1_000_000)
    prod.publish(reg_t, encode(table_from_columns("registry.v1", sim.registry_columns(start_ns))), "registry.v1",
                 key="controller")
    rows = messages = 0
    for i in range(rounds):
        t0 = start_ns + i * BATCH_NS
        for agent, probes, paths in sim.upload_batches(t0):
            if len(paths["hops"]):
                prod.publish(paths_t, encode(table_from_columns("path.v1", paths)), "path.v1", key=agent)
            n = len(probes["seq"])
            upload_ns = int(probes["upload_ns"].max()) if n else t0 + BATCH_NS
            hb = [("agent_id", agent.encode()), ("upload_ns", str(upload_ns).encode()), ("host", agent.encode())]
            prod.publish(probes_t, encode(table_from_columns("probe.v1", probes)), "probe.v1", key=agent, headers=hb)
            rows += n
            messages += 1
        if prod.flush(600):  # bounded memory: one round in flight
            raise RuntimeError("the broker did not take every upload round in 600 s")
        if progress:
            progress(f"round {i + 1}/{rounds} published: {rows:,} probe rows so far")
    if prod.flush(600) or prod.stats.dropped_oldest or prod.stats.failed:
        raise RuntimeError(f"uploads lost on the way to the broker: {prod.stats}")
    return rows, messages


class _ClosedReader(threading.Thread):
    """Reads ``windows.closed`` summaries as the reducer writes them (a daemon thread)."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.summaries: dict[int, dict] = {}
        self._halt = threading.Event()
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-closed-{uuid.uuid4().hex[:6]}",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self._c.subscribe([topic])

    def run(self) -> None:
        while not self._halt.is_set():
            m = self._c.poll(0.5)
            if m is None or m.error():
                continue
            s = json.loads(m.value())
            self.summaries[int(s["window_start_ns"])] = s
        self._c.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


class _VerdictPoller(threading.Thread):
    """Asks the store every 0.1 s which windows have verdicts; keeps the wall ns each was first seen (a daemon
    thread of its own, so the benchmark's slower polls (row counts, group lag) never delay the reading)."""

    def __init__(self, pipe) -> None:  # noqa: ANN001 - bench.pipeline.PipelineProcs
        super().__init__(daemon=True)
        self.first_seen: dict[int, int] = {}
        self._pipe = pipe
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                rows = self._pipe.query("SELECT DISTINCT window_start_ns AS ws FROM verdicts")
            except Exception:  # noqa: BLE001 - the writer is starting or busy; ask again
                rows = None
            wall = time.time_ns()
            for r in rows or ():
                self.first_seen.setdefault(int(r["ws"]), wall)
            self._halt.wait(0.1)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


def run(bootstrap: str, rnics: int = 10_000, windows: int = 3, rate: float = 1.0, workers: int | None = None,
        seed: int = 1, timeout_s: float = 3600.0, progress=print,  # noqa: ANN001 - print-like
        own_reducer: bool = True, restart_worker_s: float | None = None) -> ScaleResult:
    """Generate and publish ``windows`` 20 s windows of the fabric, run the pipeline over them, measure.

    ``own_reducer`` False runs the reducer inside one of the workers (``--role all``), the layout before
    ``fabricscope up`` gave it a process of its own: for comparison. ``restart_worker_s``: that many
    seconds after the first stored row, ``kill -9`` the last stream worker and start it again (an
    operator's restart), and measure how long its partitions then stall (``restart_stall_s``).

    Waits until every produced probe row is in ``probes`` and counted in ``probes_1m`` and every
    window's summary is out (``complete``), or ``timeout_s`` passed (``complete`` False).
    """
    from bench.pipeline import (
        FAUST_GROUP,
        REDUCER_GROUP,
        STORE_GROUP,
        GroupLag,
        PipelineProcs,
        broker_pid,
        worker_loop_lag_ms,
    )
    from fabricscope.kafka_admin import create_topics, delete_topics
    from producers.sim.engine import BATCH_NS
    from schemas import topics as T
    from streams.pingmesh.windows import WINDOW_NS

    workers = workers or os.cpu_count() or 1
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (`timeout`, kill) unwinds like Ctrl-C: the worker and store-writer children are
        # stopped and the benchmark's topics deleted, never left behind
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t_gen = time.perf_counter()
    sim = build_simulator(rnics, rate, seed)
    # the last `windows` whole windows before now (the store's TTLs keep recent rows only)
    start = (time.time_ns() // WINDOW_NS - windows - 1) * WINDOW_NS
    prefix = f"bscale{uuid.uuid4().hex[:6]}."
    raw, partials, closed_t = (T.topic_name(t, prefix) for t in (T.PROBES_RAW, T.WINDOW_PARTIALS, T.WINDOWS_CLOSED))
    try:
        create_topics(bootstrap, prefix)
        rows, messages = publish_fabric(sim, bootstrap, prefix, start, windows * WINDOW_NS // BATCH_NS, progress)
        res = ScaleResult(len(sim.inv.rnics), windows, rate, workers, rate * PAPER_PPS_PER_RNIC, rows, messages,
                          time.perf_counter() - t_gen, 0, 0, float("nan"), float("nan"), own_reducer=own_reducer)
        del sim
        progress(f"{rows:,} probe rows in {messages:,} uploads published in {res.generate_s:.0f} s; "
                 f"starting {workers} worker(s), {'the reducer, ' if own_reducer else ''}and the store writer")
        closed = _ClosedReader(bootstrap, closed_t)
        closed.start()
        groups = ({f"{prefix}{FAUST_GROUP}": [raw], f"{prefix}{REDUCER_GROUP}": [partials]} if own_reducer
                  else {f"{prefix}{FAUST_GROUP}": [raw, partials]})
        lag = GroupLag(bootstrap, {**groups, f"{prefix}{STORE_GROUP}": [raw]})
        broker = broker_pid(bootstrap)
        with tempfile.TemporaryDirectory() as d, PipelineProcs(bootstrap, prefix, Path(d), workers,
                                                                      own_reducer=own_reducer) as pipe:
            commits = (_PartitionCommits(bootstrap, f"{prefix}{FAUST_GROUP}", raw) if restart_worker_s is not None
                       else None)
            seen = _measure(pipe, res, closed, lag, broker, start, timeout_s, progress, restart_worker_s, commits)
            if commits is not None:
                res.restart_stall_s = longest_stall(commits.samples, res.restart_at_s)
                res.stall_before_restart_s = longest_stall(
                    [x for x in commits.samples if x[0] <= res.restart_at_s], res.restart_at_s - 60)
                commits.close()
            res.loop_lag_p99_ms = worker_loop_lag_ms(pipe.metrics_ports)[0]
            res.peak_rss_mib = pipe.peak_rss()
        closed.stop()
        lag.close()
    finally:
        delete_topics(bootstrap, prefix)
    _summarize(res, closed.summaries, seen, start)
    res.load_avg = os.getloadavg()
    return res


def _measure(pipe, res: ScaleResult, closed: _ClosedReader, lag, broker: int | None,  # noqa: ANN001
             start_ns: int, timeout_s: float, progress,  # noqa: ANN001 - print-like callable
             restart_worker_s: float | None = None, commits: _PartitionCommits | None = None) -> dict[int, int]:
    """Poll the store (verdicts every 0.1 s, row counts every 1 s), the groups' lag (every 1 s) until all rows
    are stored and counted.

    Fills ``res``'s rows, rates, lag and CPU figures; returns ``{window start: wall ns its verdicts were
    first readable}``."""
    from streams.pingmesh.windows import WINDOW_NS

    want_windows = {start_ns + i * WINDOW_NS for i in range(res.windows)}
    poller = _VerdictPoller(pipe)
    poller.start()
    seen_verdicts = poller.first_seen
    t_start = time.perf_counter()
    deadline = t_start + timeout_s
    t_first = t_last = None
    cpu_start, cpu0 = pipe.cpu(broker), {}  # the children just started: their CPU from 0
    n = m = n_first = 0
    next_lag = next_count = 0.0
    try:
        while time.perf_counter() < deadline:
            now = time.perf_counter()
            if pipe.dead():
                raise RuntimeError(f"pipeline process(es) exited: {', '.join(pipe.dead())}")
            if now >= next_count:
                next_count = now + 1.0
                try:
                    c = pipe.query("SELECT (SELECT count() FROM probes) AS n, (SELECT sum(probes) FROM probes_1m) AS m")
                except Exception:  # noqa: BLE001 - as above
                    c = None
                if c:
                    n, m = int(c[0]["n"]), int(c[0]["m"] or 0)
                if n and t_first is None:
                    t_first, n_first, cpu0 = time.perf_counter(), n, pipe.cpu(broker)
                if n > n_first:
                    t_last = time.perf_counter()
                if restart_worker_s is not None and t_first is not None and math.isnan(res.restart_at_s) \
                        and now - t_first >= restart_worker_s:
                    victim = max(k for k in pipe.procs if k.startswith("worker"))
                    pipe.restart_worker(victim)
                    res.restart_at_s = now - t_start
                    progress(f"{now - t_start:6.0f} s: {victim} killed (-9) and started again")
                if commits is not None:
                    commits.sample(now - t_start)
            if now >= next_lag:
                next_lag = now + 1.0
                sample = {"t_s": round(now - t_start, 1), **lag.sample(), "rows_stored": n}
                res.lag.append(sample)
                if len(res.lag) % 10 == 1:
                    progress(f"{sample['t_s']:6.0f} s: {n:,}/{res.rows_produced:,} rows stored, lag {sample}")
            done_windows = want_windows <= closed.summaries.keys()
            if n >= res.rows_produced and m >= res.rows_produced and done_windows:
                wanted = {w for w in want_windows if closed.summaries[w].get("verdicts")}
                if wanted <= seen_verdicts.keys():
                    res.complete = True
                    break
            time.sleep(0.1)
    finally:
        poller.stop()
    cpu1 = pipe.cpu(broker)
    res.rows_stored, res.minute_tier_probes = n, m
    if n - n_first >= n // 10:  # from the first stored row: start-up (imports, catch-up) left out
        done, since = n - n_first, cpu0
        res.pipeline_s = (t_last or time.perf_counter()) - (t_first or t_start)
    else:  # (nearly) every row came in the first insert (a tiny run): from the processes' start
        done, since = max(n, 1), {k: (0.0 if k != "broker" else v) for k, v in cpu_start.items()}
        res.pipeline_s = (t_last or time.perf_counter()) - t_start
        res.cpu_from = "process start"
    res.rows_s = done / max(res.pipeline_s, 1e-9)
    used = {k: cpu1[k] - since.get(k, cpu1[k]) for k in cpu1}
    per = {"worker": sum(v for k, v in used.items() if k.startswith("worker")),
           "reducer": used.get("reducer", float("nan")), "store_writer": used["sink"], "broker": used["broker"]}
    res.cpu_us_per_row = {k: v / done * 1e6 for k, v in per.items()}
    res.cores_for_1_5m_rows_s = CLUSTER_ROWS_S * sum(
        v for v in res.cpu_us_per_row.values() if not math.isnan(v)) / 1e6
    return dict(seen_verdicts)


def _summarize(res: ScaleResult, summaries: dict[int, dict], seen: dict[int, int], start_ns: int) -> None:
    """Per-window figures from the reducer's summaries and ``seen`` (wall ns each window's verdicts were
    first readable in the store)."""
    figs = []
    for ws in sorted(summaries):
        s = summaries[ws]
        wm = s.get("watermark_wall_ns") or 0
        timed = s.get("verdicts") and ws in seen and wm
        lat = (seen[ws] - wm) / 1e9 if timed else float("nan")
        closed_ns = s.get("closed_wall_ns", wm)
        sent_ns = s.get("sent_wall_ns")
        figs.append(WindowFigures(ws, int(s.get("verdicts", 0)), int(s.get("timeouts", 0)),
                                  (closed_ns - wm) / 1e6, float(s.get("reducer_cpu_ms", "nan")),
                                  float(s.get("reducer_rss_mib", "nan")), lat,
                                  (s.get("merge_start_wall_ns", wm) - wm) / 1e6,
                                  float(s.get("reducer_runqueue_ms", "nan")),
                                  (sent_ns - closed_ns) / 1e6 if sent_ns else float("nan"),
                                  (seen[ws] - sent_ns) / 1e9 if timed and sent_ns else float("nan")))
    res.window_figures = figs
    lats = [f.verdict_latency_s for f in figs if not math.isnan(f.verdict_latency_s)]
    if lats:
        res.verdict_latency_p50_s = float(np.percentile(lats, 50))
        res.verdict_latency_p99_s = float(np.percentile(lats, 99))
    full = [f for f in figs if f.window_start_ns >= start_ns] or figs
    if full:
        res.reduce_ms_max = max(f.reduce_ms for f in full)
        res.reduce_cpu_ms_max = max(f.reduce_cpu_ms for f in full)
        res.reducer_rss_mib_max = max(f.reducer_rss_mib for f in full)


def print_report(r: ScaleResult) -> None:
    """Rich tables: the run, lag over time, per-window reducer figures and verdict latency, CPU and cores."""
    from rich.console import Console
    from rich.table import Table

    con = Console(width=150)
    con.print(f"[bold]bench scale[/bold]: {r.rnics:,} RNICs x {r.probes_per_rnic_s:g} probes/s, {r.windows} "
              f"window(s), {r.workers} worker(s), reducer {'in its own process' if r.own_reducer else 'in a worker'}; "
              f"{r.rows_produced:,} probe rows in {r.messages:,} uploads, "
              f"generated and published in {r.generate_s:.0f} s; load average "
              f"{r.load_avg[0]:.1f} {r.load_avg[1]:.1f} {r.load_avg[2]:.1f}")
    con.print(f"stored {r.rows_stored:,} rows in {r.pipeline_s:.1f} s: [bold]{r.rows_s:,.0f} rows/s[/bold] "
              f"sustained; minute tier counts {r.minute_tier_probes:,} probes; "
              f"{'complete' if r.complete else '[red]INCOMPLETE (timed out)[/red]'}")
    lag = Table(title="consumer lag (messages not committed)")
    keys = [k for k in (r.lag[0] if r.lag else {}) if k != "t_s"]
    lag.add_column("t s", justify="right")
    for k in keys:
        lag.add_column(k.split(".", 1)[-1], justify="right")
    step = max(1, len(r.lag) // 20)
    for s in r.lag[::step] + ([r.lag[-1]] if r.lag and (len(r.lag) - 1) % step else []):
        lag.add_row(f"{s['t_s']:.0f}", *(f"{s.get(k, 0):,}" for k in keys))
    con.print(lag)
    w = Table(title="windows (reducer: from the message that moved the watermark to merged + analyzed)")
    for c in ("window start (ns)", "timeouts", "verdicts", "reducer ms", "of it: before merge", "CPU", "run queue",
              "reducer RSS MiB", "to broker ms", "to store s", "verdict latency s"):
        w.add_column(c, justify="right")

    def opt(v: float, fmt: str) -> str:
        return "-" if math.isnan(v) else format(v, fmt)

    for f in r.window_figures:
        w.add_row(str(f.window_start_ns), f"{f.timeouts:,}", str(f.verdicts), f"{f.reduce_ms:,.0f}",
                  opt(f.before_merge_ms, ",.0f"), f"{f.reduce_cpu_ms:,.0f}", opt(f.reduce_runqueue_ms, ",.0f"),
                  f"{f.reducer_rss_mib:,.0f}", opt(f.send_ms, ",.0f"),
                  opt(f.store_s, ".2f"), opt(f.verdict_latency_s, ".2f"))
    con.print(w)
    con.print(f"verdict latency (watermark passed -> verdict readable in the store): p50 "
              f"{r.verdict_latency_p50_s:.2f} s, p99 {r.verdict_latency_p99_s:.2f} s")
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in r.cpu_us_per_row.items())
    con.print(f"CPU µs per stored row (from the {r.cpu_from}): {cpu}; cores for {CLUSTER_ROWS_S / 1e6:g} M rows/s: "
              f"[bold]{r.cores_for_1_5m_rows_s:.1f}[/bold]")
    if not math.isnan(r.restart_at_s):
        con.print(f"a stream worker killed (-9) and restarted at {r.restart_at_s:.0f} s: the longest time a "
                  f"probes.raw partition with input left then committed nothing: [bold]{r.restart_stall_s:.1f} s"
                  f"[/bold] (in the 60 s before: {r.stall_before_restart_s:.1f} s)")
    con.print("peak RSS MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in r.peak_rss_mib.items())
              + f"; worker event-loop lag p99 <= {r.loop_lag_p99_ms:.0f} ms")


def profile_reducer(rnics: int = 1024, rate: float = 1.0, seed: int = 1, top: int = 12) -> str:
    """cProfile of the reducer closing the benchmark fabric's windows, in this process, without Kafka.

    The simulator's uploads go through the production worker and reducer functions
    (:class:`bench.sim_reducer.SimPipeline`, one worker) for two windows; only
    :meth:`WindowReducer.close_ready` (the window's folded partials taken, the analyzer) is profiled. Returns a
    report: CPU (and wall) seconds per closed window, and of the whole ``window.partials`` message that closed
    it (its decode and fold too: what the verdict waits for), the reducer's CPU per message outside the
    closes (decode, partials folded, watermark), this process's peak RSS (simulator and worker included: an
    upper bound) and the ``top`` functions by cumulative CPU time (the process's, all threads: Acero's
    group-bys run on a thread pool).
    """
    import cProfile
    import io
    import pstats
    import resource

    from bench.sim_reducer import SimPipeline
    from producers.sim.engine import BATCH_NS
    from streams.pingmesh.windows import WINDOW_NS

    sim = build_simulator(rnics, rate, seed)
    pipe = SimPipeline(sim)
    start = (time.time_ns() // WINDOW_NS - 3) * WINDOW_NS
    pipe.start(start - BATCH_NS)
    red = pipe.reducer
    close = red.close_ready
    prof = cProfile.Profile(time.process_time)  # CPU time: on a shared machine wall time is mostly waiting
    per_window: list[tuple[int, float, float]] = []

    marks = [0]

    def profiled():  # noqa: ANN202 - close_ready's own signature
        # asked after every upload mark; only a call that closes a window is profiled (the profiler's
        # per-call overhead would otherwise swamp the watermark's per-mark cost measured below)
        marks[0] += 1
        wm = red.watermark()
        if wm is None or not any(w + red.config.window_ns <= wm for w in red.open_windows):
            return []  # what close_ready returns when no window is ready
        c0, t0 = time.process_time(), time.perf_counter()
        prof.enable()
        out = close()
        prof.disable()
        if out:
            per_window.append((len(out), time.process_time() - c0, time.perf_counter() - t0))
        return out

    red.close_ready = profiled  # type: ignore[method-assign]
    receive = red.receive
    messages = [0, 0.0]  # window.partials messages, their CPU s (closes included)
    closing: list[float] = []  # CPU s of each message that closed windows (decode, fold, close)

    def counted(headers, value):  # noqa: ANN001, ANN202 - receive's own signature
        c0 = time.process_time()
        out = receive(headers, value)
        messages[0] += 1
        messages[1] += time.process_time() - c0
        if out:
            closing.append(time.process_time() - c0)
        return out

    red.receive = counted  # type: ignore[method-assign]
    for k in range(2 * WINDOW_NS // BATCH_NS + 1):
        pipe.round(start + k * BATCH_NS)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(top)
    lines = [f"reducer on {len(sim.inv.rnics):,} RNICs x {rate * PAPER_PPS_PER_RNIC:g} probes/s, "
             "one process, no Kafka:"]
    lines += [f"  close of {n} window(s): {cpu:.2f} CPU s, {wall:.2f} wall s (the message that closed it: "
              f"{msg:.2f} CPU s)" for (n, cpu, wall), msg in zip(per_window, closing, strict=False)]
    between = messages[1] - sum(cpu for _, cpu, _ in per_window)
    lines.append(f"  {messages[0]:,} window.partials messages ({marks[0]:,} upload marks): {between:.2f} CPU s "
                 f"outside the closes (decode, partials folded, watermark: {between / max(marks[0], 1) * 1e6:,.0f} µs "
                 "per mark)")
    lines.append(f"  peak RSS of this process (simulator and worker too): "
                 f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")
    body = buf.getvalue().splitlines()
    first = next((i for i, x in enumerate(body) if x.strip().startswith("ncalls")), 0)
    return "\n".join(lines + body[first:])


@dataclass
class StartupLoad:
    """One load of ``paths.traced`` into a fresh path index, as a starting stream worker does it."""

    coalesce_rows: int
    """rows per ``PathIndex.update`` call (0: one call per message, the former way)"""
    messages: int
    apply_calls: int
    entries: int
    cpu_s: float
    """process CPU s of the catch-up (decode and index update)"""
    wall_s: float
    links_cpu_s: float
    """process CPU s of :meth:`PathIndex.hop_links` after it (every hop string's links, once)"""


@dataclass
class StartupProfile:
    """:func:`profile_startup`'s figures: the fabric, what was published, one :class:`StartupLoad` per mode."""

    rnics: int
    rate: float
    probe_rows: int
    path_rows: int
    loads: list[StartupLoad]


def profile_startup(bootstrap: str, rnics: int = 10_000, rate: float = 0.1, rounds: int = 4, seed: int = 1,
                    modes: tuple[int, ...] | None = None) -> StartupProfile:
    """Publish ``rounds`` upload rounds of the benchmark fabric (as :func:`run` does), then load its
    ``paths.traced`` into a fresh :class:`PathIndex` through a :class:`TopicMirror` once per mode of
    ``modes`` (``coalesce_rows``; default: per message, then the workers' setting), in this process.


    Raises:
        AssertionError: the modes built different indexes (they must not: same rows, same order).
        ValueError: as :func:`build_simulator`.
    """
    from fabricscope.kafka_admin import create_topics, delete_topics
    from schemas import topics as T
    from schemas.topic_mirror import PATHS_COALESCE_ROWS, TopicMirror
    from streams.pingmesh.path_index import PathIndex
    from streams.pingmesh.windows import WINDOW_NS

    modes = modes if modes is not None else (0, PATHS_COALESCE_ROWS)
    prefix = f"bstart{uuid.uuid4().hex[:6]}."
    create_topics(bootstrap, prefix)
    try:
        sim = build_simulator(rnics, rate, seed)
        n_rnics = len(sim.inv.rnics)
        rows, _ = publish_fabric(sim, bootstrap, prefix, (time.time_ns() // WINDOW_NS - 2) * WINDOW_NS, rounds)
        del sim
        loads, tables, path_rows = [], [], [0]
        for coalesce in modes:
            index = PathIndex()

            def update(t, index=index):  # noqa: ANN001, ANN202 - the mirror's apply
                path_rows[0] += t.num_rows
                index.update(t)

            path_rows[0] = 0
            mirror = TopicMirror(bootstrap, T.topic_name(T.PATHS_TRACED, prefix), update, coalesce_rows=coalesce)
            c0, w0 = time.process_time(), time.perf_counter()
            n = mirror.catch_up()
            c1, w1 = time.process_time(), time.perf_counter()
            index.hop_links()
            loads.append(StartupLoad(coalesce, n, mirror.applied_calls, len(index), c1 - c0, w1 - w0,
                                     time.process_time() - c1))
            mirror.close()
            key = [(c, "ascending") for c in ("direction", "src_ip", "dst_ip", "src_port", "dst_port")]
            tables.append(index.latest.drop_columns(["_entry"]).sort_by(key))
            del index
        assert all(t.equals(tables[0]) for t in tables[1:]), "the modes built different path indexes"
        return StartupProfile(n_rnics, rate, rows, path_rows[0], loads)
    finally:
        delete_topics(bootstrap, prefix)


def startup_report(p: StartupProfile) -> str:
    """Lines of :func:`profile_startup`'s figures, one per mode."""
    lines = [f"start-up load of paths.traced at {p.rnics:,} RNICs x {p.rate * PAPER_PPS_PER_RNIC:g} probes/s "
             f"({p.probe_rows:,} probe rows published; {p.path_rows:,} path rows; one process, load average "
             f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}):"]
    for s in p.loads:
        how = "per message" if s.coalesce_rows <= 0 else f"coalesced to {s.coalesce_rows:,} rows"
        lines.append(f"  {how:>30}: {s.messages:,} messages in {s.apply_calls:,} index updates, {s.entries:,} "
                     f"entries: {s.cpu_s:.2f} CPU s ({s.wall_s:.1f} s wall), then hop_links {s.links_cpu_s:.2f} CPU s")
    lines.append("  the indexes are equal")
    return "\n".join(lines)


class _PartitionCommits:
    """Committed offset and end of every partition of one topic for one consumer group, sampled over time."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        parts = self._c.list_topics(topic, timeout=10).topics[topic].partitions
        self._tps = [TopicPartition(topic, p) for p in sorted(parts)]
        self.samples: list[tuple[float, dict[int, tuple[int, int]]]] = []

    def sample(self, t_s: float) -> None:
        """Record ``{partition: (committed offset, end offset)}`` at ``t_s`` (a failed read is skipped)."""
        try:
            got = {tp.partition: (max(tp.offset, 0), self._c.get_watermark_offsets(tp, timeout=5, cached=False)[1])
                   for tp in self._c.committed(self._tps, timeout=5)}
        except Exception:  # noqa: BLE001 - the broker busy: the next sample
            return
        self.samples.append((t_s, got))

    def close(self) -> None:
        self._c.close()


def longest_stall(samples: list[tuple[float, dict[int, tuple[int, int]]]], since_s: float) -> float:
    """The longest time (s) after ``since_s`` that a partition with input left kept one committed offset.

    Args:
        samples: ``(t s, {partition: (committed offset, end offset)})`` in time order.
        since_s: where to start (a worker's restart); NaN: nothing to measure.

    Returns:
        Per partition, from ``since_s`` (or its last commit after it) to its next commit, or to the last
        sample while it still had input left; the maximum over partitions (a commit is a change from the
        previous sample, the one at or before ``since_s`` included; the resolution is the sampling's).
        0.0 when no partition had input left; NaN when ``since_s`` is NaN or nothing was sampled after it.
    """
    if math.isnan(since_s):
        return float("nan")
    before = [got for t, got in samples if t <= since_s]
    after = [(t, got) for t, got in samples if t > since_s]
    if not after:
        return float("nan")
    worst = 0.0
    for p in after[0][1]:
        last_t, last_off = since_s, before[-1].get(p, (0, 0))[0] if before else None
        for t, got in after:
            off, end = got.get(p, (0, 0))
            if last_off is None:
                last_off = off
            if off != last_off:
                worst, last_t, last_off = max(worst, t - last_t), t, off
            if off >= end:  # nothing left: it cannot stall from here
                break
            worst = max(worst, t - last_t)
    return worst
