"""`fabricscope bench agent`: CPU (% of one core) and memory of an agent's process tree, measured from /proc.

Two agents, each run for a bounded time (default 30 s after a 5 s warm-up):

- ``udp`` on the netns lab (needs root and network namespaces): a lab of its own
  (namespace prefix ``fsb-``, 2 ToRs x 2 hosts x 8 RNICs, 2 spines) beside any other lab;
  the prober of host H1 probes with 8 RNICs x ``rate`` probes/s (its controller pinglist,
  ToR-mesh and inter-ToR entries, each entry's ``rate_pps`` set so every RNIC sends
  ``rate``/s), uploading to Kafka every 5 s. The responder of H2 (which answers its share)
  is measured too.
- ``host``: one host's whole udp agent as deployed (prober and responder in one process, role ``both``)
  over loopback, no root: two such hosts of 8 RNICs each (``127.0.3.x``, ``127.0.4.x``) probe each
  other at ``rate`` probes/s per RNIC and answer each other, so each process sends and answers
  8 x ``rate`` probes/s, the symmetric load of a host in a full mesh; both upload to Kafka every 5 s.
- ``sim``: a process that simulates one host's 8 RNICs at ``rate`` probes/s each on a
  128-RNIC fabric (:class:`producers.sim.Simulator`, paced to real time) and publishes
  its 5 s batches (nanoarrow, never pyarrow) to Kafka, like a ``sim`` agent.

CPU = utime and stime apart, of the process and its descendants, over the measured wall interval
(``/proc/<pid>/stat``); PSS summed over the tree at the end (``/proc/<pid>/smaps_rollup``); RSS =
``VmRSS`` at the end and ``VmHWM`` (peak) of the root process from ``/proc/<pid>/status``. Probe rows actually
sent are counted back from the Kafka topic.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
RNICS = 8
RATE = 150.0


@dataclass
class ProcSample:
    """CPU and memory of one process and its descendants (its process tree) over a measured interval.

    ``cpu_pct`` = ``user_pct`` + ``sys_pct`` (% of one core; system time apart: the kernel's socket work has
    no counterpart in the paper's RDMA agent); ``rss_mib``/``hwm_mib``: the tree's root process, current and
    peak; ``pss_mib``: the proportional set size summed over the tree at the end (shared pages split between
    the processes that map them, so the sum is what the tree costs the host); ``processes``: how many."""

    name: str
    cpu_pct: float
    rss_mib: float
    hwm_mib: float
    wall_s: float
    probes_per_s: float = float("nan")
    note: str = ""
    extra: dict[str, object] = field(default_factory=dict)
    user_pct: float = float("nan")
    sys_pct: float = float("nan")
    pss_mib: float = float("nan")
    processes: int = 1


def _ticks(pid: int) -> tuple[int, int]:
    """(utime, stime) clock ticks of ``pid`` (fields 14 and 15 of ``/proc/<pid>/stat``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def _mem_mib(pid: int) -> tuple[float, float]:
    rss = hwm = float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
    return rss, hwm


def process_tree(pid: int) -> list[int]:
    """``pid`` and every live descendant (from each task's ``/proc/<pid>/task/<tid>/children``), root first.

    Raises:
        FileNotFoundError: ``pid`` is not running.
    """
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        try:
            kids = [int(k) for t in Path(f"/proc/{p}/task").iterdir()
                    for k in (t / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            if p == pid:
                raise
            continue  # a descendant that exited meanwhile
        out.append(p)
        todo += kids
    return out


def pss_mib(pid: int) -> float:
    """Proportional set size of ``pid`` in MiB (``Pss:`` of ``/proc/<pid>/smaps_rollup``); NaN if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return float("nan")


def _tree_ticks(pids: list[int]) -> dict[int, tuple[int, int]]:
    out = {}
    for p in pids:
        try:
            out[p] = _ticks(p)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def measure(pids: dict[str, int], warmup_s: float, seconds: float) -> dict[str, ProcSample]:
    """Sample each process tree's CPU ticks (user and system apart) after ``warmup_s`` and again ``seconds``
    later, and its PSS at the end. A descendant's CPU counts from the first sample it is seen in (a child born
    inside the interval counts in full); one that exits inside the interval is not counted (its ticks go to
    its parent only once it is reaped)."""
    time.sleep(warmup_s)
    t0 = time.monotonic()
    start = {n: _tree_ticks(process_tree(p)) for n, p in pids.items()}
    time.sleep(seconds)
    wall = time.monotonic() - t0
    out = {}
    for n, p in pids.items():
        tree = process_tree(p)
        end = _tree_ticks(tree)
        user = sum(u - start[n].get(q, (0, 0))[0] for q, (u, _) in end.items()) / CLK_TCK / wall * 100
        sys_ = sum(s - start[n].get(q, (0, 0))[1] for q, (_, s) in end.items()) / CLK_TCK / wall * 100
        rss, hwm = _mem_mib(p)
        out[n] = ProcSample(n, user + sys_, rss, hwm, wall, user_pct=user, sys_pct=sys_,
                            pss_mib=sum(pss_mib(q) for q in tree), processes=len(tree))
    return out


def _count_probe_rows(bootstrap: str, topic: str, since_ns: int, until_ns: int) -> int:
    """Probe rows in ``topic`` with ``t1`` in [since, until) (prober host clock)."""
    import pyarrow.compute as pc
    from confluent_kafka import Consumer

    from schemas.codec import decode

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"benchagent{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    n, idle = 0, 0
    while idle < 3:
        msgs = c.consume(num_messages=500, timeout=1.0)
        if not msgs:
            idle += 1
            continue
        for m in msgs:
            if m.error():
                continue
            t = decode(m.value(), "probe.v1")[1]
            if t.num_rows:
                t1 = t["t1"]
                n += int(pc.sum(pc.and_(pc.greater_equal(t1, since_ns), pc.less(t1, until_ns))).as_py() or 0)
    c.close()
    return n


# ---- udp agent on the lab -------------------------------------------------------------------


def bench_udp(bootstrap: str, seconds: float = 30.0, warmup_s: float = 5.0, rate: float = RATE) -> list[ProcSample]:
    """The udp prober of one host with 8 RNICs at ``rate`` probes/s each, on a lab of its own.

    Raises:
        infra.lab.netns.LabError: not root or no network namespaces.
    """
    from fabricscope.cmd_lab import build_lab_pinglists
    from fabricscope.kafka_admin import create_topics, delete_topics
    from infra import lab as lab_infra
    from infra.lab import agents
    from schemas.inventory_yaml import from_dict
    from schemas.topics import PROBES_RAW, topic_name

    spec = lab_infra.LabSpec(spines=2, tors=2, hosts_per_tor=2, nics_per_host=RNICS, prefix="fsb-")
    prefix = f"benchagent{uuid.uuid4().hex[:6]}."
    create_topics(bootstrap, prefix)
    d = Path(tempfile.mkdtemp(prefix="fabricscope-bench-agent-"))
    try:
        fab = lab_infra.up(spec, d)
        inv = from_dict(fab.inventory_dict(), source=str(d / "inventory.yaml"))
        out = {"kind": "kafka", "bootstrap": bootstrap, "topic_prefix": prefix}
        qpns = agents.start_agents(d, out, wait_s=15.0)
        lists = build_lab_pinglists(inv, qpns, 1, [])
        mine = lists["H1"]
        per_rnic: dict[str, int] = {}
        for e in mine:
            per_rnic[e["prober_rnic"]] = per_rnic.get(e["prober_rnic"], 0) + 1
        for e in mine:
            e["rate_pps"] = rate / per_rnic[e["prober_rnic"]]
        agents.write_pinglists({h: (mine if h == "H1" else []) for h in lists}, d)
        pids = {"udp prober H1 (8 RNICs)": agents.agent_entry(d, "H1", "prober")["pid"],
                "udp responder H2 (8 RNICs)": agents.agent_entry(d, "H2", "responder")["pid"]}
        since = time.time_ns() + int(warmup_s * 1e9)
        res = measure(pids, warmup_s, seconds)
        until = time.time_ns()
        time.sleep(6)  # one more upload carries the last probes
        sent = _count_probe_rows(bootstrap, topic_name(PROBES_RAW, prefix), since, until)
        p = res["udp prober H1 (8 RNICs)"]
        p.probes_per_s = sent / p.wall_s
        p.note = (f"{len(per_rnic)} RNICs x {rate:g}/s asked ({len(mine)} entries); "
                  f"{p.probes_per_s:,.0f} probes/s uploaded")
        res["udp responder H2 (8 RNICs)"].note = "answers H1's probes to H2 (about a third)"
        return list(res.values())
    finally:
        lab_infra.down(d)
        delete_topics(bootstrap, prefix)
        shutil.rmtree(d, ignore_errors=True)


# ---- one-process udp agents over loopback ---------------------------------------------------


def _loopback_configs(d: Path, bootstrap: str, prefix: str, rate: float, port: int, rnics: int = RNICS
                      ) -> dict[str, Path]:
    """Configs of two hosts ``LA``/``LB`` of ``rnics`` loopback RNICs, each probing every RNIC of the other.

    Raises:
        ValueError: ``rnics`` outside 1..64 (the source ports of one host's entries stay below 5,000).
    """
    if not 1 <= rnics <= 64:
        raise ValueError(f"bench agent: --rnics {rnics} is not in 1..64")
    hosts = {"LA": [f"127.0.3.{i}" for i in range(1, rnics + 1)], "LB": [f"127.0.4.{i}" for i in range(1, rnics + 1)]}
    qpns = {f"{h}{i}": 0x10000 * (k + 1) + i for k, h in enumerate(hosts) for i in range(1, rnics + 1)}
    out = {}
    for k, (host, peer) in enumerate((("LA", "LB"), ("LB", "LA"))):
        base = 20000 + 5000 * k
        entries = [{"pinglist": "tor_mesh", "prober_rnic": f"{host}{i}", "responder_rnic": f"{peer}{j}",
                    "responder_host": peer, "dst_ip": ip, "dst_port": port, "src_port": base + (i - 1) * rnics + j,
                    "qpn": qpns[f"{peer}{j}"], "rate_pps": rate / rnics}
                   for i in range(1, rnics + 1) for j, ip in enumerate(hosts[peer], start=1)]
        (d / f"{host}.pinglist.json").write_text(json.dumps({"entries": entries}))
        cfg = {"host": host, "role": "both", "dst_port": port, "allowed_sources": hosts[peer],
               "rnics": [{"name": f"{host}{i}", "ip": ip} for i, ip in enumerate(hosts[host], start=1)],
               "qpns": {f"{host}{i}": qpns[f"{host}{i}"] for i in range(1, rnics + 1)},
               "pinglist_file": str(d / f"{host}.pinglist.json"),
               "output": {"kind": "kafka", "bootstrap": bootstrap, "topic_prefix": prefix}}
        out[host] = d / f"{host}.json"
        out[host].write_text(json.dumps(cfg))
    return out


def bench_host(bootstrap: str, seconds: float = 30.0, warmup_s: float = 5.0, rate: float = RATE, rnics: int = RNICS
               ) -> list[ProcSample]:
    """Two one-process udp agents (role ``both``) over loopback, each sending and answering ``rnics`` x ``rate``/s.

    Raises:
        ValueError: ``rnics`` outside 1..64.
    """
    from fabricscope.kafka_admin import create_topics, delete_topics
    from schemas.topics import PROBES_RAW, topic_name

    d = Path(tempfile.mkdtemp(prefix="fabricscope-bench-host-"))
    prefix = f"benchagent{uuid.uuid4().hex[:6]}."
    configs = _loopback_configs(d, bootstrap, prefix, rate, 0, rnics)  # checks rnics before any topic exists
    create_topics(bootstrap, prefix)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = {}
    try:
        configs = _loopback_configs(d, bootstrap, prefix, rate, port, rnics)
        for host, cfg in configs.items():
            log = (d / f"{host}.log").open("w")
            procs[host] = subprocess.Popen([sys.executable, "-m", "producers.udp_agent", "--config", str(cfg),
                                            "--duration", str(warmup_s + seconds + 2)], stdout=log, stderr=log)
        since = time.time_ns() + int(warmup_s * 1e9)
        res = measure({f"udp agent {h} ({rnics} RNICs, one process)": p.pid for h, p in procs.items()}, warmup_s,
                      seconds)
        until = time.time_ns()
        for p in procs.values():
            p.wait(timeout=60)
        sent = _count_probe_rows(bootstrap, topic_name(PROBES_RAW, prefix), since, until)
        for r in res.values():
            r.probes_per_s = sent / len(procs) / r.wall_s
            r.note = (f"prober + responder, loopback; sends and answers {rnics} RNICs x {rate:g}/s "
                      f"({r.probes_per_s:,.0f} probes/s uploaded a host)")
        return list(res.values())
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        delete_topics(bootstrap, prefix)
        shutil.rmtree(d, ignore_errors=True)  # the agents' configs and logs


# ---- sim agent ------------------------------------------------------------------------------


def sim_agent_main(argv: list[str] | None = None) -> None:
    """``python -m bench.agent sim-agent``: publish one simulated host's batches in real time."""
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("sim-agent",))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--rate", type=float, default=RATE)
    ap.add_argument("--duration", type=float, default=40.0)
    a = ap.parse_args(argv)

    from producers.kafka_producer import AgentProducer
    from producers.sim import Simulator, to_pylists
    from producers.sim.engine import BATCH_NS
    from producers.sim.fabrics import random_clos
    from schemas.arrow_nano import encode_columns
    from schemas.topics import PROBES_RAW, topic_name

    inv = random_clos(1, 4, 4, 4, RNICS)  # 128 RNICs, 8 per host
    host = sorted(inv.hosts)[0]
    mine = set(inv.rnics_of_host(host))
    full = Simulator(inv, seed=1).pinglists(0)
    lists = {k: [dict(e) for e in v if e["prober_rnic"] in mine] for k, v in full.items()}
    per_rnic: dict[str, int] = {}
    for v in lists.values():
        for e in v:
            per_rnic[e["prober_rnic"]] = per_rnic.get(e["prober_rnic"], 0) + 1
    for v in lists.values():
        for e in v:
            e["rate_pps"] = a.rate / per_rnic[e["prober_rnic"]]
    sim = Simulator(inv, seed=1, pinglists=lists, trace="on_change")
    producer = AgentProducer(a.bootstrap)
    topic = topic_name(PROBES_RAW, a.prefix)
    end = time.monotonic() + a.duration
    t_ev = (time.time_ns() // BATCH_NS) * BATCH_NS
    next_at = time.monotonic()
    batches = 0
    while time.monotonic() < end:
        for agent, probes, _paths in sim.upload_batches(t_ev):
            if agent != host:
                continue
            hb = [("agent_id", agent.encode()), ("upload_ns", str(t_ev + BATCH_NS).encode()),
                  ("host", agent.encode())]
            producer.publish(topic, encode_columns("probe.v1", to_pylists(probes)), "probe.v1", key=agent,
                             headers=hb)
        producer.flush()
        batches += 1
        t_ev += BATCH_NS
        next_at += BATCH_NS / 1e9
        time.sleep(max(0.0, next_at - time.monotonic()))
    print(f"batches {batches}; pyarrow imported: {'pyarrow' in sys.modules}", flush=True)


def bench_sim(bootstrap: str, seconds: float = 30.0, warmup_s: float = 5.0, rate: float = RATE) -> list[ProcSample]:
    """The sim agent of one host (8 RNICs x ``rate``/s) publishing to Kafka, measured from /proc."""
    from fabricscope.kafka_admin import create_topics, delete_topics
    from schemas.topics import PROBES_RAW, topic_name

    prefix = f"benchagent{uuid.uuid4().hex[:6]}."
    create_topics(bootstrap, prefix)
    try:
        p = subprocess.Popen([sys.executable, "-m", "bench.agent", "sim-agent", "--bootstrap", bootstrap,
                              "--prefix", prefix, "--rate", str(rate), "--duration", str(warmup_s + seconds + 1)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            res = measure({"sim agent (8 RNICs)": p.pid}, warmup_s, seconds)["sim agent (8 RNICs)"]
            out, _ = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        rows = _count_probe_rows(bootstrap, topic_name(PROBES_RAW, prefix), 0, 2**63 - 1)
        last = (out.strip().splitlines() or [""])[-1]
        batches = int(last.split()[1].rstrip(";")) if last.startswith("batches") else 0
        res.probes_per_s = rows / (5.0 * batches) if batches else float("nan")
        res.note = f"{RNICS} RNICs x {rate:g}/s; {rows:,} rows in {batches} 5 s uploads; {last}"
        return [res]
    finally:
        delete_topics(bootstrap, prefix)


def run(bootstrap: str, seconds: float = 30.0, rate: float = RATE, which: tuple[str, ...] = ("udp", "sim"),
        rnics: int = RNICS) -> tuple[list[ProcSample], list[str]]:
    """Run the chosen agents (``udp``, ``host``, ``sim``); returns the samples and why any agent was skipped.
    ``rnics`` applies to ``host`` (the lab's and the simulated host have 8).

    Raises:
        ValueError: an agent name that is none of those, or ``rnics`` outside 1..64.
    """
    unknown = set(which) - {"udp", "host", "sim"}
    if unknown:
        raise ValueError(f"bench agent: {', '.join(sorted(unknown))} is not one of udp, host, sim")
    samples: list[ProcSample] = []
    skipped: list[str] = []
    if "udp" in which:
        from infra.lab.netns import LabError

        try:
            samples += bench_udp(bootstrap, seconds, rate=rate)
        except LabError as e:
            skipped.append(f"udp on the lab: {e}")
    if "host" in which:
        samples += bench_host(bootstrap, seconds, rate=rate, rnics=rnics)
    if "sim" in which:
        samples += bench_sim(bootstrap, seconds, rate=rate)
    return samples, skipped


def print_report(samples: list[ProcSample], skipped: list[str]) -> None:
    """Rich table of the samples, with the paper's agent for comparison."""
    from rich.console import Console
    from rich.table import Table

    con = Console(width=160)
    t = Table(title="agent cost (each process with its descendants, measured from /proc)")
    for c in ("agent", "CPU % of one core", "user %", "system %", "PSS MiB (tree)", "RSS MiB", "peak RSS MiB",
              "processes", "probes/s", "seconds", "note"):
        t.add_column(c, justify="left" if c in ("agent", "note") else "right")
    for s in samples:
        pps = "-" if s.probes_per_s != s.probes_per_s else f"{s.probes_per_s:,.0f}"
        t.add_row(s.name, f"{s.cpu_pct:.1f}", f"{s.user_pct:.1f}", f"{s.sys_pct:.1f}", f"{s.pss_mib:.1f}",
                  f"{s.rss_mib:.1f}", f"{s.hwm_mib:.1f}", str(s.processes), pps, f"{s.wall_s:.0f}", s.note)
    lab = [s for s in samples if s.name.startswith(("udp prober", "udp responder"))]
    if len(lab) > 1:
        t.add_row("[bold]udp agent, all processes[/bold]", f"{sum(s.cpu_pct for s in lab):.1f}",
                  f"{sum(s.user_pct for s in lab):.1f}", f"{sum(s.sys_pct for s in lab):.1f}",
                  f"{sum(s.pss_mib for s in lab):.1f}", "", "", str(sum(s.processes for s in lab)),
                  "", "", "prober + responder (the lab's two processes)")
    t.add_row("R-Pingmesh paper's agent", "3", "", "", "", "", "18.5 MB", "1", "", "", "production, C++/verbs")
    con.print(t)
    for s in skipped:
        con.print(f"skipped: {s}")


if __name__ == "__main__":
    sim_agent_main()
