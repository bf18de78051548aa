"""`fabricscope bench accuracy`: diagnosis accuracy of the analyzer against the simulator's ground truth.

Each scenario is a seeded fabric (Panel 1 up to 1,024 RNICs) with 0-3 concurrent faults
drawn from: switch link down, lossy link (0.5 %-50 %), partial 5-tuple loss, flapping port
(switch link or RNIC cable), RNIC down, host down, host restart, busy host. The simulator's
uploads go through :class:`streams.pingmesh.analyzer.Analyzer` (the one-process wiring of the
pipeline: watermark, path index, window partials, reducer) window by window, and every
verdict is scored against :meth:`producers.sim.Simulator.truth`.

Scoring (also in BENCHMARKS.md):

- a *claim* is a verdict that is not ``undetermined`` and not a revision; it is right when
  its kind and location match a fault active in its window (a ``stale_qpn`` at an RNIC
  counts for its host). Precision = right claims / claims, per verdict kind and overall.
- a *truth-window* is a (fault, window) pair where the fault is active for at least half
  the window. Window recall = truth-windows with a right claim / truth-windows; fault
  recall = faults named right in at least one window / faults.
- the confusion table counts truth-windows by outcome: the right kind, else the kind of a
  wrong claim near the fault (sharing a node: link end, RNIC, host), else ``undetermined``
  near it, else ``missed``; row ``(none)`` counts wrong claims near no fault (false alarms).
- time to verdict: windows from the window a fault starts in to its first right claim
  (0 = named when that window closes, at most 20 s + grace after the start).
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from producers.sim import (
    BusyHost,
    FlappingLink,
    HostDown,
    HostRestart,
    LinkDown,
    LossyLink,
    PartialTupleLoss,
    RnicDown,
    Simulator,
)
from producers.sim.engine import BATCH_NS
from producers.sim.fabrics import panel1, random_clos
from producers.sim.faults import Fault
from producers.sim.stream import registry_updates
from schemas.arrow_pa import table_from_columns
from schemas.inventory import Inventory
from streams.pingmesh.analyzer import Analyzer, WindowResult, analyze_window
from streams.pingmesh.partial import merge
from streams.pingmesh.rtt import decompose

S = 1_000_000_000
WINDOW = 20 * S
T0 = 1_000_000 * WINDOW
FAULT_KINDS = (
    "link_down",
    "lossy_link",
    "partial_5tuple_loss",
    "flapping_link",
    "flapping_rnic_port",
    "rnic_down",
    "host_down",
    "host_restart",
    "busy_host",
)
VERDICT_KINDS = ("switch", "rnic", "host_down", "stale_qpn", "busy_host", "switch_latency", "rnic_latency")

# (name, builder(seed) -> Inventory); scenario i uses SIZES[i % len] except every BIG_EVERY-th.
SIZES: tuple[tuple[str, Callable[[int], Inventory]], ...] = (
    ("panel1 (12 RNICs)", lambda s: panel1()),
    ("clos 4x4 (32)", lambda s: random_clos(s, 4, 4, 4, 2)),
    ("clos 6x4 (96)", lambda s: random_clos(s, 6, 4, 4, 4)),
    ("3-tier 8 ToRs (64)", lambda s: random_clos(s, 8, 2, 4, 2, n_pods=2, n_cores=4)),
    ("clos 16x4 (256)", lambda s: random_clos(s, 16, 4, 4, 4)),
)
BIG: tuple[str, Callable[[int], Inventory]] = ("clos 32x8 (1,024)", lambda s: random_clos(s, 32, 8, 4, 8))
BIG_EVERY = 10


@dataclass
class Scenario:
    """One drawn scenario: its fabric, faults and run length."""

    index: int
    size: str
    inv: Inventory
    faults: list[Fault]
    seconds: int


@dataclass
class ScenarioResult:
    """Verdicts per window of one scenario, with the truth and the wall time it took."""

    scenario: Scenario
    truth: list[dict]
    windows: list[tuple[int, list[dict]]]
    wall_s: float


@dataclass
class AccuracyReport:
    """Everything the command prints; plain numbers so tests can check them."""

    seed: int
    scenarios: int
    wall_s: float
    precision: dict[str, tuple[int, int]] = field(default_factory=dict)  # verdict kind -> (right, claims)
    window_recall: dict[str, tuple[int, int]] = field(default_factory=dict)  # fault kind -> (hit, truth-windows)
    fault_recall: dict[str, tuple[int, int]] = field(default_factory=dict)  # fault kind -> (named, faults)
    confusion: dict[str, Counter] = field(default_factory=dict)  # fault kind|(none) -> outcome -> count
    latency_windows: dict[str, list[int]] = field(default_factory=dict)  # fault kind -> windows to verdict
    undetermined: int = 0
    revisions: int = 0
    wrong: list[dict] = field(default_factory=list)  # every wrong claim with its scenario
    missed: list[dict] = field(default_factory=list)  # faults never named
    sizes: Counter = field(default_factory=Counter)
    hostping: tuple[int, int] = (0, 0)
    hostping_wrong: list[str] = field(default_factory=list)

    @staticmethod
    def ratio(x: tuple[int, int]) -> float:
        """``a / b`` of a pair, NaN when ``b`` is 0."""
        return x[0] / x[1] if x[1] else float("nan")

    def overall_precision(self) -> float:
        """Right claims over all claims."""
        return self.ratio((sum(r for r, _ in self.precision.values()), sum(n for _, n in self.precision.values())))


# ---- drawing scenarios -----------------------------------------------------------------------


def _switch_links(inv: Inventory) -> list[tuple[str, str]]:
    return sorted((ln.a, ln.b) for ln in inv.links)


def draw_scenario(index: int, seed: int, big_every: int = BIG_EVERY, seconds: int = 80) -> Scenario:
    """Scenario ``index`` of run ``seed``: a fabric and 0-3 faults on disjoint hosts/links."""
    rng = random.Random(f"accuracy/{seed}/{index}")
    size, build = BIG if big_every and index % big_every == big_every - 1 else SIZES[index % len(SIZES)]
    inv = build(seed * 1000 + index)
    n_faults = rng.choice((0, 1, 1, 2, 2, 3))
    used_hosts: set[str] = set()
    used_links: set[tuple[str, str]] = set()
    hosts = sorted(inv.hosts)
    links = _switch_links(inv)
    faults: list[Fault] = []
    for _ in range(n_faults):
        kind = rng.choice(FAULT_KINDS)
        # starts: from the beginning, or inside the first two windows (time to verdict)
        start = None if rng.random() < 0.3 else T0 + rng.randrange(0, 40) * S
        t = {"start_ns": start}
        if kind in ("link_down", "lossy_link", "partial_5tuple_loss", "flapping_link"):
            free = [ln for ln in links if ln not in used_links]
            if not free:
                continue
            a, b = rng.choice(free)
            used_links.add((a, b))
            if kind == "link_down":
                faults.append(LinkDown(a, b, **t))
            elif kind == "lossy_link":
                faults.append(LossyLink(a, b, rate=round(float(np.exp(rng.uniform(np.log(0.005), np.log(0.5)))), 4),
                                        **t))
            elif kind == "partial_5tuple_loss":
                faults.append(PartialTupleLoss(a, b, fraction=round(rng.uniform(0.1, 0.6), 2), **t))
            else:
                faults.append(FlappingLink(a, b, period_s=rng.choice((5.0, 10.0, 20.0)),
                                           down_s=rng.choice((1.0, 2.0, 3.0)), **t))
            continue
        free_hosts = [h for h in hosts if h not in used_hosts]
        if not free_hosts:
            continue
        host = rng.choice(free_hosts)
        used_hosts.add(host)
        rnic = rng.choice(inv.rnics_of_host(host))
        if kind == "flapping_rnic_port":  # RNIC-ToR cable
            faults.append(FlappingLink(rnic, inv.tor_of(rnic), period_s=rng.choice((5.0, 10.0)),
                                       down_s=rng.choice((2.0, 3.0)), **t))
        elif kind == "rnic_down":
            faults.append(RnicDown(rnic, **t))
        elif kind == "host_down":
            faults.append(HostDown(host, **t))
        elif kind == "host_restart":
            faults.append(HostRestart(host, start_ns=start or T0 + rng.randrange(1, 40) * S))
        else:
            faults.append(BusyHost(host, **t))
    return Scenario(index, size, inv, faults, seconds)


# ---- running one scenario --------------------------------------------------------------------


@dataclass
class _Recording(Analyzer):
    """:class:`Analyzer` that also records the start of each window it closes (for scoring)."""

    closed_starts: list[int] = field(default_factory=list)

    def close(self) -> list[WindowResult]:
        """As :meth:`Analyzer.close`; ``closed_starts`` lists the starts of the returned windows."""
        self.closed_starts = []
        out = []
        for ws in self.tracker.close_ready():
            parts = self.partials.pop(ws, None)
            if not parts:
                continue
            self.closed_starts.append(ws)
            out.append(analyze_window(merge(parts), registry=self.registry,
                                      host_last_upload=self.tracker.host_last_upload, state=self.state,
                                      job_metrics=self.job_metrics, thresholds=self.thresholds,
                                      config=self.config))
        return out


def run_scenario(sc: Scenario, seed: int) -> ScenarioResult:
    """Feed the simulator's uploads through :class:`Analyzer`, one 5 s upload round at a time.

    Each round's probe batches reach the analyzer as one table (what one worker that
    consumed every agent's message of the round sees); paths and registry updates come
    first, as agents and the controller publish them; an agent with no rows sends a
    heartbeat. Windows before ``T0`` (NTP-skewed clocks only) are not scored.
    """
    t = time.perf_counter()
    sim = Simulator(sc.inv, seed=seed, faults=sc.faults, trace="on_change")
    an = _Recording()
    an.on_registry(table_from_columns("registry.v1", sim.registry_columns(T0 - BATCH_NS)))
    windows: list[tuple[int, list[dict]]] = []
    n_windows = sc.seconds // 20
    for k in range(sc.seconds // 5 + 4):
        t0 = T0 + k * BATCH_NS
        reg = registry_updates(sim, t0, t0 + BATCH_NS)
        if reg["rnic"]:
            an.on_registry(table_from_columns("registry.v1", reg))
        batches = sim.upload_batches(t0)
        probes = []
        for agent, probe_cols, path_cols in batches:
            if len(path_cols["hops"]):
                an.on_paths(table_from_columns("path.v1", path_cols))
            if len(probe_cols["seq"]):
                probes.append(table_from_columns("probe.v1", probe_cols))
            else:
                an.tracker.heartbeat(agent, t0 + BATCH_NS, agent)
        closed: list[WindowResult] = []
        an.closed_starts = []
        if probes:
            closed = an.on_probes(decompose(pa.concat_tables(probes), f"bench/{sc.index}/{k}"))
        for ws, res in zip(an.closed_starts, closed, strict=True):
            if ws >= T0:
                windows.append((ws, res.verdicts.to_pylist()))
        if len(windows) >= n_windows:
            break
    return ScenarioResult(sc, sim.truth(), windows[:n_windows], time.perf_counter() - t)


# ---- scoring ---------------------------------------------------------------------------------


def _interval(tr: dict) -> tuple[int, int]:
    lo = tr["start_ns"] if tr["start_ns"] is not None else -(2**62)
    hi = tr["end_ns"] if tr["end_ns"] is not None else 2**62
    return lo, hi


def _nodes_of_truth(tr: dict, inv: Inventory) -> set[str]:
    loc = tr["location"]
    if "->" in loc:
        return set(loc.split("->"))
    if loc in inv.rnics:
        return {loc, inv.host_of(loc)}
    return {loc, *inv.rnics_of_host(loc)} if loc in inv.hosts else {loc}


def _nodes_of_verdict(v: dict, inv: Inventory) -> set[str]:
    out: set[str] = set()
    for part in str(v["location"]).split("|"):
        if "->" in part:
            out |= set(part.split("->"))
        elif part in inv.rnics:
            out |= {part, inv.host_of(part)}
        elif part in inv.hosts:
            out |= {part, *inv.rnics_of_host(part)}
    return out


def _matches(v: dict, tr: dict, inv: Inventory) -> bool:
    loc = v["location"]
    if v["kind"] == "stale_qpn" and loc in inv.rnics:
        loc = inv.host_of(loc)
    return v["kind"] == tr["kind"] and loc == tr["location"]


def fault_kind(tr: dict) -> str:
    """The row a truth record is scored under: its fault, with RNIC-port flaps apart from switch-link flaps."""
    return "flapping_rnic_port" if tr["fault"] == "flapping_link" and tr["kind"] == "rnic" else tr["fault"]


def score(results: list[ScenarioResult], seed: int, wall_s: float) -> AccuracyReport:
    """Precision, recall, confusion and time to verdict over every scenario's windows."""
    rep = AccuracyReport(seed=seed, scenarios=len(results), wall_s=wall_s)
    prec: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    wrec: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    frec: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    conf: dict[str, Counter] = defaultdict(Counter)
    lat: dict[str, list[int]] = defaultdict(list)
    for r in results:
        inv = r.scenario.inv
        rep.sizes[r.scenario.size] += 1
        first_right: dict[int, int] = {}
        revised = {v["revision_of"]: f"{v['kind']} {v['location']}" for _, rows in r.windows for v in rows
                   if v["revision_of"] is not None}
        for wi, (ws, rows) in enumerate(r.windows):
            we = ws + WINDOW
            active = [(ti, tr) for ti, tr in enumerate(r.truth)
                      if _interval(tr)[0] < we and _interval(tr)[1] > ws]
            claims = []
            for v in rows:
                if v["revision_of"] is not None:
                    rep.revisions += 1
                    continue
                if v["kind"] == "undetermined":
                    rep.undetermined += 1
                    continue
                claims.append(v)
            right_of: dict[int, bool] = {}
            for v in claims:
                hit = [ti for ti, tr in active if _matches(v, tr, inv)]
                prec[v["kind"]][1] += 1
                if hit:
                    prec[v["kind"]][0] += 1
                    for ti in hit:
                        right_of[ti] = True
                        first_right.setdefault(ti, wi)
                else:
                    near = [tr for _, tr in active if _nodes_of_truth(tr, inv) & _nodes_of_verdict(v, inv)]
                    rep.wrong.append({"scenario": r.scenario.index, "size": r.scenario.size, "window": wi,
                                      "kind": v["kind"], "location": v["location"], "confidence": v["confidence"],
                                      "faults": [f"{t['fault']}@{t['location']}" for t in r.truth],
                                      "revised_to": revised.get(v["verdict_id"], ""),
                                      "near": [t["fault"] for t in near]})
                    if not near:
                        conf["(none)"][v["kind"]] += 1
            for ti, tr in active:
                lo, hi = _interval(tr)
                if min(hi, we) - max(lo, ws) < WINDOW // 2:
                    continue  # active for under half the window: not required in this window
                fk = fault_kind(tr)
                wrec[fk][1] += 1
                if right_of.get(ti):
                    wrec[fk][0] += 1
                    conf[fk][tr["kind"]] += 1
                    continue
                nodes = _nodes_of_truth(tr, inv)
                wrong_near = sorted({v["kind"] for v in claims if nodes & _nodes_of_verdict(v, inv)})
                und = [v for v in rows if v["kind"] == "undetermined" and nodes & _nodes_of_verdict(v, inv)]
                conf[fk][wrong_near[0] if wrong_near else ("undetermined" if und else "missed")] += 1
        for ti, tr in enumerate(r.truth):
            frec[fault_kind(tr)][1] += 1
            if ti in first_right:
                frec[fault_kind(tr)][0] += 1
                lo = tr["start_ns"] if tr["start_ns"] is not None else T0
                start_w = max(0, (lo - T0) // WINDOW)
                lat[fault_kind(tr)].append(int(first_right[ti] - start_w))
            elif any(_interval(tr)[0] < ws + WINDOW and _interval(tr)[1] > ws for ws, _ in r.windows):
                rep.missed.append({"scenario": r.scenario.index, "size": r.scenario.size, "fault": fault_kind(tr),
                                   "location": tr["location"], "start_ns": tr["start_ns"]})
    rep.precision = {k: (a, b) for k, (a, b) in prec.items()}
    rep.window_recall = {k: (a, b) for k, (a, b) in wrec.items()}
    rep.fault_recall = {k: (a, b) for k, (a, b) in frec.items()}
    rep.confusion = dict(conf)
    rep.latency_windows = dict(lat)
    return rep


# ---- Hostping patterns -----------------------------------------------------------------------


def hostping_patterns(seeds: tuple[int, ...] = (1, 2, 3)) -> tuple[int, int, list[str]]:
    """Run the 12 Hostping bottleneck patterns (Hostping §6) on the sim host for each seed.

    Returns (named right, tried, descriptions of the wrong ones).
    """
    from producers.hostping.simhost import Bottleneck, SimHost
    from schemas.intrahost import figure2_topology
    from streams.hostping.hostlink import BandwidthMatrix, LinkHistory, algorithm1, busy_path_states, idle_path_states
    from streams.hostping.hostpatterns import name_patterns

    topo = figure2_topology("h1")
    # (#, bottlenecks, mode, rounds, with registers, expected (pattern, location))
    cases = [
        (1, [Bottleneck("cap", "sw2->rnic2", 67.0)], "idle", 1, False, ("rnic_pcie_link_failure", "sw2->rnic2")),
        (2, [Bottleneck("cap", "sw2->gpu4", 50.0)], "idle", 1, False, ("gpu_pcie_link_failure", "sw2->gpu4")),
        (3, [Bottleneck("scale", "cpu0->mem0", 0.4)], "idle", 1, False, ("memory_channel_failure", "cpu0->mem0")),
        (4, [Bottleneck("cap", "cpu0->cpu1", 60.0)], "idle", 1, False, ("upi_failure", "cpu0->cpu1")),
        (5, [Bottleneck("cap", "cpu0->sw0", 80.0)], "idle", 1, False, ("cpu_root_port_failure", "cpu0->sw0")),
        (6, [Bottleneck("flap", "cpu0->mem0", 0.4)], "idle", 3, False, ("memory_channel_flapping", "cpu0->mem0")),
        (7, [Bottleneck("acs", f"sw{i}") for i in range(4)], "idle", 1, False, ("acs_enabled", "sw0,sw1,sw2,sw3")),
        (8, [Bottleneck("ats_off", value=1.5)], "idle", 1, False, ("ats_disabled", "h1")),
        (9, [Bottleneck("slow_start", "rnic1", 0.6)], "idle", 1, True, ("rnic_slow_start", "rnic1")),
        (10, [Bottleneck("tx_window", "rnic1", 0.5)], "idle", 1, True, ("rnic_small_tx_window", "rnic1")),
        (11, [Bottleneck("congest", "cpu0->cpu1", 0.5, util=0.95)], "busy", 1, False, ("upi_overload", "cpu0->cpu1")),
        (12, [Bottleneck("congest", "cpu0->mem0", 0.5, util=0.97)], "busy", 1, False,
         ("memory_channel_overload", "cpu0->mem0")),
    ]
    ok, tried, wrong = 0, 0, []
    for seed in seeds:
        for no, bs, mode, rounds, with_config, want in cases:
            sim = SimHost(topo, list(bs), seed=seed)
            base = sim.baseline()
            history = LinkHistory()
            got: list[tuple[str, str]] = []
            for k in range(rounds):
                m = BandwidthMatrix(sim.rnics, sim.endpoints, sim.matrix(round_no=k, mode=mode))
                states = idle_path_states(m, base) if mode == "idle" else busy_path_states(m, base)
                rnd = algorithm1(topo, m, states, history)
                history = rnd.history
                vs = name_patterns(topo, m, base, rnd, sim.bus_util(), sim.rnic_config() if with_config else None)
                got = [(v.pattern, v.location) for v in vs]
            tried += 1
            if got == [want]:
                ok += 1
            else:
                wrong.append(f"#{no} seed {seed}: want {want}, got {got}")
    return ok, tried, wrong


# ---- the run and its report ------------------------------------------------------------------


def run(n_scenarios: int = 30, seed: int = 1, big_every: int = BIG_EVERY, seconds: int = 80,
        progress: Callable[[ScenarioResult], None] | None = None) -> AccuracyReport:
    """Draw and run ``n_scenarios`` scenarios, score them, and run the Hostping patterns."""
    t = time.perf_counter()
    results = []
    for i in range(n_scenarios):
        r = run_scenario(draw_scenario(i, seed, big_every, seconds), seed * 1000 + i)
        results.append(r)
        if progress:
            progress(r)
    rep = score(results, seed, time.perf_counter() - t)
    ok, tried, wrong = hostping_patterns()
    rep.hostping, rep.hostping_wrong = (ok, tried), wrong
    return rep


def _pct(x: tuple[int, int]) -> str:
    return f"{x[0] / x[1]:.1%}" if x[1] else "-"


def _quantile(xs: list[int], q: float) -> str:
    return f"{float(np.quantile(np.array(xs), q, method='inverted_cdf')):.0f}" if xs else "-"


def print_report(rep: AccuracyReport, console: object | None = None) -> None:
    """Print the report as rich tables."""
    from rich.console import Console
    from rich.table import Table

    con = console if console is not None else Console()
    sizes = ", ".join(f"{n}x {s}" for s, n in sorted(rep.sizes.items()))
    con.print(f"[bold]accuracy[/bold]: {rep.scenarios} scenarios, seed {rep.seed}, {rep.wall_s:.0f} s ({sizes})")

    t = Table(title="precision per verdict kind (claims: verdicts other than undetermined)")
    for c in ("verdict kind", "right", "claims", "precision"):
        t.add_column(c, justify="right" if c != "verdict kind" else "left")
    for k in sorted(rep.precision):
        a, b = rep.precision[k]
        t.add_row(k, str(a), str(b), _pct((a, b)))
    a = sum(x for x, _ in rep.precision.values())
    b = sum(y for _, y in rep.precision.values())
    t.add_row("[bold]overall[/bold]", str(a), str(b), _pct((a, b)))
    con.print(t)
    con.print(f"undetermined verdicts (no claim): {rep.undetermined}; revisions: {rep.revisions}")

    t = Table(title="recall per fault kind; time to first right verdict (windows after the start window)")
    for c in ("fault kind", "windows hit", "window recall", "faults named", "fault recall", "p50", "p99"):
        t.add_column(c, justify="right" if c != "fault kind" else "left")
    for k in FAULT_KINDS:
        if k not in rep.fault_recall:
            continue
        w = rep.window_recall.get(k, (0, 0))
        f = rep.fault_recall[k]
        lat = rep.latency_windows.get(k, [])
        t.add_row(k, f"{w[0]}/{w[1]}", _pct(w), f"{f[0]}/{f[1]}", _pct(f), _quantile(lat, 0.5), _quantile(lat, 0.99))
    wa = (sum(x for x, _ in rep.window_recall.values()), sum(y for _, y in rep.window_recall.values()))
    fa = (sum(x for x, _ in rep.fault_recall.values()), sum(y for _, y in rep.fault_recall.values()))
    all_lat = [x for v in rep.latency_windows.values() for x in v]
    t.add_row("[bold]overall[/bold]", f"{wa[0]}/{wa[1]}", _pct(wa), f"{fa[0]}/{fa[1]}", _pct(fa),
              _quantile(all_lat, 0.5), _quantile(all_lat, 0.99))
    con.print(t)

    cols = [*VERDICT_KINDS, "undetermined", "missed"]
    cols = [c for c in cols if any(rep.confusion.get(r, Counter()).get(c) for r in rep.confusion)] or cols
    t = Table(title="confusion: truth-windows by outcome (row (none): wrong claims near no fault)")
    t.add_column("truth \\ verdict")
    for c in cols:
        t.add_column(c, justify="right")
    for r in [*[k for k in FAULT_KINDS if k in rep.confusion], *(["(none)"] if "(none)" in rep.confusion else [])]:
        t.add_row(r, *[str(rep.confusion[r].get(c, 0) or "") for c in cols])
    con.print(t)

    if rep.wrong:
        t = Table(title="wrong claims")
        for c in ("scen", "size", "win", "verdict", "location", "conf", "later revised to", "faults injected"):
            t.add_column(c)
        for w in rep.wrong[:60]:
            t.add_row(str(w["scenario"]), w["size"], str(w["window"]), w["kind"], w["location"],
                      f"{w['confidence']:.2f}", w["revised_to"], ", ".join(w["faults"]) or "(none)")
        con.print(t)
    if rep.missed:
        t = Table(title="faults never named right")
        for c in ("scen", "size", "fault", "location", "start (s after T0)"):
            t.add_column(c)
        for m in rep.missed:
            st = "-" if m["start_ns"] is None else f"{(m['start_ns'] - T0) / S:.0f}"
            t.add_row(str(m["scenario"]), m["size"], m["fault"], m["location"], st)
        con.print(t)
    ok, tried = rep.hostping
    con.print(f"[bold]Hostping[/bold]: {ok}/{tried} pattern runs named right (12 patterns x {tried // 12} seeds)")
    for w in rep.hostping_wrong:
        con.print(f"  wrong: {w}")
