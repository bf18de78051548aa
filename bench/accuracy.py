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

import math
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.sim_reducer import SimPipeline
from producers.controller_ident import standing_bounces as standing_bounces_of
from producers.controller_loop import SplitLoop
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
from producers.sim.fabrics import panel1, random_clos
from producers.sim.faults import Fault
from producers.sim.plan import entry_links
from schemas.inventory import Inventory

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
VERDICT_KINDS = ("switch", "rnic", "host_down", "host_unreachable", "stale_qpn", "busy_host", "switch_latency",
                 "rnic_latency")
HOST_FAULT_KINDS = ("host_down", "busy_host", "stale_qpn")
"""Truth kinds of a fault of the whole host: a ``host_unreachable`` claim naming that host is right."""

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
HUGE: tuple[str, Callable[[int], Inventory]] = ("clos 160x8 (10,240)", lambda s: random_clos(s, 160, 8, 8, 8))
BACKGROUND_LOSS = (1e-5, 1e-4)
"""Per-link drop probability of healthy links in the benchmark (log-uniform per scenario)."""


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
    link_probes: dict[int, dict[str, int]] = field(default_factory=dict)
    background_loss: float = 0.0
    tuple_drops: dict[int, dict[int, int]] = field(default_factory=dict)
    """fault index → second → probes a partial 5-tuple loss dropped (:attr:`Simulator.tuple_drops`)."""
    link_failures: dict[int, dict[str, int]] = field(default_factory=dict)
    """window start → fault link → timed-out probes that crossed it (:attr:`SimPipeline.link_failures`)."""
    far_probes: dict[int, int] = field(default_factory=dict)
    """window start → probes that left their ToR (:attr:`SimPipeline.far_probes`)."""


@dataclass
class AccuracyReport:
    """Everything the command prints; plain numbers so tests can check them."""

    seed: int
    scenarios: int
    wall_s: float
    seeds: tuple[int, ...] = ()
    precision: dict[str, tuple[int, int]] = field(default_factory=dict)  # verdict kind -> (right, claims)
    window_recall: dict[str, tuple[int, int]] = field(default_factory=dict)  # fault kind -> (hit, truth-windows)
    fault_recall: dict[str, tuple[int, int]] = field(default_factory=dict)  # fault kind -> (named, faults)
    confusion: dict[str, Counter] = field(default_factory=dict)  # fault kind|(none) -> outcome -> count
    latency_windows: dict[str, list[int]] = field(default_factory=dict)  # fault kind -> windows to verdict
    window_recall_10: tuple[int, int] = (0, 0)  # truth-windows expected to fail >= 10 probes: (hit, all)
    # windows where two or more faults are required: (every one of them named right, such windows)
    concurrent_windows: tuple[int, int] = (0, 0)
    # the same, counting only windows where each of those faults is expected to fail >= 10 probes (as
    # ``window_recall_10``): a partial 5-tuple loss whose hash selects no probed tuple, or whose drops all
    # fall on probes another fault fails anyway, shows nothing any vote could name
    concurrent_windows_10: tuple[int, int] = (0, 0)
    abstentions: list[dict] = field(default_factory=list)  # right abstentions (undetermined naming the fault)
    calibration: list[tuple[float, bool]] = field(default_factory=list)  # (confidence, right) per claim
    undetermined: int = 0
    healthy_windows: tuple[int, int] = (0, 0)  # (undetermined verdicts, windows) before any fault starts
    fault_windows: tuple[int, int] = (0, 0)  # (undetermined verdicts, windows) with a fault active
    revisions: int = 0
    wrong: list[dict] = field(default_factory=list)  # every wrong claim with its scenario
    missed: list[dict] = field(default_factory=list)  # faults never named
    missed_windows: list[dict] = field(default_factory=list)  # truth-windows without a right claim
    # faults whose required windows ended undetermined (an abstention over a set holding the fault, or an
    # undetermined verdict near it, and no right claim): the longest run of consecutive such windows
    undetermined_streaks: list[dict] = field(default_factory=list)
    sizes: Counter = field(default_factory=Counter)
    hostping: tuple[int, int] = (0, 0)
    hostping_wrong: list[str] = field(default_factory=list)
    hostping_by_noise: dict[float, tuple[int, int]] = field(default_factory=dict)  # noise -> (right, tried)

    @staticmethod
    def ratio(x: tuple[int, int]) -> float:
        """``a / b`` of a pair, NaN when ``b`` is 0."""
        return x[0] / x[1] if x[1] else float("nan")

    def reliability(self, bins: int = 10) -> list[tuple[float, float, float, int]]:
        """Reliability table: per confidence bin [lo, lo + 1/bins): (lo, mean confidence, precision, claims)."""
        out = []
        for b in range(bins):
            lo, hi = b / bins, (b + 1) / bins
            xs = [(c, r) for c, r in self.calibration if lo <= c < hi or (b == bins - 1 and c >= 1.0)]
            if xs:
                out.append((lo, float(np.mean([c for c, _ in xs])), float(np.mean([r for _, r in xs])), len(xs)))
        return out

    def ece(self, bins: int = 10) -> float:
        """Expected calibration error: claims-weighted mean |precision − mean confidence| over the bins."""
        n = len(self.calibration)
        return sum(k / n * abs(p - c) for _, c, p, k in self.reliability(bins)) if n else float("nan")

    def overall_precision(self) -> float:
        """Right claims over all claims."""
        return self.ratio((sum(r for r, _ in self.precision.values()), sum(n for _, n in self.precision.values())))


# ---- drawing scenarios -----------------------------------------------------------------------


def _switch_links(inv: Inventory) -> list[tuple[str, str]]:
    return sorted((ln.a, ln.b) for ln in inv.links)


def draw_scenario(index: int, seed: int, big_every: int = BIG_EVERY, seconds: int = 80,
                  size: tuple[str, Callable[[int], Inventory]] | None = None) -> Scenario:
    """Scenario ``index`` of run ``seed``: a fabric (``size``, default by index) and 0-3 faults on
    disjoint hosts/links."""
    rng = random.Random(f"accuracy/{seed}/{index}")
    size, build = size or (BIG if big_every and index % big_every == big_every - 1 else SIZES[index % len(SIZES)])
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


def run_scenario(sc: Scenario, seed: int, background_loss: tuple[float, float] | None = None,
                 loop: bool = False, standing_bounces: bool = False) -> ScenarioResult:
    """Feed the simulator's uploads through the production :class:`WindowReducer`, one 5 s round at a time.

    Each round's probe batches reach one in-process worker (:class:`bench.sim_reducer.SimPipeline`),
    whose ``window.partials`` messages the reducer closes windows from; paths and registry
    updates come first, as agents and the controller publish them; an agent with no rows sends
    a heartbeat. Windows before ``T0`` (NTP-skewed clocks only) are not scored.

    ``background_loss`` = (lo, hi): healthy links drop a log-uniform draw in [lo, hi) of the
    packets crossing them (one draw per scenario); None: lossless healthy links.

    ``loop``: run the controller's closed loop in-process (:class:`producers.controller_loop.SplitLoop`):
    a window that ends ``undetermined`` over a group of links changes the probes of the next rounds.

    ``standing_bounces``: the plan keeps bounced probes for the fabric's structural groups from the start
    (:func:`producers.controller_ident.standing_bounces`: the core pairs of the two-pod three-tier fabric).
    """
    t = time.perf_counter()
    bg = 0.0
    if background_loss is not None:
        lo, hi = background_loss
        bg = float(np.exp(random.Random(f"bg/{seed}").uniform(np.log(lo), np.log(hi))))
    sim = Simulator(sc.inv, seed=seed, faults=sc.faults, trace="on_change", background_loss=bg)
    truth = sim.truth()
    split = SplitLoop(sc.inv, sim.registry, entry_links(sim.topo), seed=seed) if loop else None
    pipe = SimPipeline(sim, watch=frozenset(filter(None, (_fault_link(f, tr) for f, tr in zip(sc.faults, truth,
                                                                                               strict=True)))),
                       loop=split,
                       standing=standing_bounces_of(sc.inv, sim.registry, seed=seed) if standing_bounces else [])
    windows = [(ws, res.verdicts.to_pylist()) for ws, res in pipe.run(T0, sc.seconds, tag=f"bench/{sc.index}")]
    return ScenarioResult(sc, truth, windows, time.perf_counter() - t, pipe.link_probes, bg, sim.tuple_drops,
                          pipe.link_failures, pipe.far_probes)


def _fault_link(f: Fault, tr: dict) -> str | None:
    """The physical link (``lower->upper``) a link fault sits on, else None."""
    if not isinstance(f, LinkDown | LossyLink | PartialTupleLoss | FlappingLink):
        return None
    if "->" in tr["location"]:
        return tr["location"]
    other = f.b if f.a == tr["location"] else f.a
    return f"{tr['location']}->{other}"


def expected_failures(f: Fault, tr: dict, link_probes: dict[str, int], overlap_ns: int,
                      dropped: dict[int, int] | None = None, span: tuple[int, int] = (0, 0)) -> float:
    """Probes a fault is expected to fail in a window: loss rate × probes crossing its link while
    active (link faults); host and RNIC faults fail every probe to them (infinite here).

    A partial 5-tuple loss drops whole tuples, so its rate over probes is the share of the *probed*
    tuples its hash selects, which ``fraction`` does not tell when few tuples cross the link (3 tuples at
    20 % select none half the time): with ``dropped`` (second → probes it dropped, from the simulator) it
    is the probes it dropped in ``span`` = [start, end) ns.
    """
    lk = _fault_link(f, tr)
    if lk is None:
        return float("inf")
    if isinstance(f, PartialTupleLoss) and dropped is not None:
        lo, hi = span[0] // 1_000_000_000, -(-span[1] // 1_000_000_000)
        return float(sum(k for sec, k in dropped.items() if lo <= sec < hi))
    rate = (1.0 if isinstance(f, LinkDown) else f.rate if isinstance(f, LossyLink)
            else f.fraction if isinstance(f, PartialTupleLoss) else f.down_s / f.period_s)
    return rate * link_probes.get(lk, 0) * overlap_ns / WINDOW


def link_test_rate(far_probes: int, crossing: int, off_failures: int = 0) -> float:
    """The per-probe background the vote tests a switch link against in one window
    (:func:`streams.pingmesh.tomography.greedy_cover`): the 95 % upper bound of the ``off_failures`` that did
    not cross the link over the ``far_probes - crossing`` probes that left their ToR without crossing it, at
    least :attr:`streams.pingmesh.tomography.VoteConfig.test_floor`.

    Raises:
        ValueError: a count < 0.
    """
    from streams.pingmesh.tomography import VoteConfig, link_background

    if min(far_probes, crossing, off_failures) < 0:
        raise ValueError(f"link_test_rate: counts must be >= 0 (far_probes {far_probes}, crossing {crossing}, "
                         f"off_failures {off_failures})")
    return float(link_background(off_failures, far_probes - crossing, VoteConfig().test_floor))


def min_failures_named(crossing: int, links_probed: int, background: float, alpha: float | None = None) -> int:
    """The fewest timed-out probes over one link in one window that the per-link low-rate test of the
    switch vote (:func:`streams.pingmesh.tomography.greedy_cover`) names: the smallest ``k`` with
    P(X >= k) < ``alpha / links_probed`` for X ~ Poisson(``crossing`` x ``background``).

    This is the analyzer's detection bound for a lossy link: a link with loss rate r is named in a window
    with probability :func:`lossy_link_named_probability`, not always.

    Args:
        crossing: probes whose forward or ACK path crossed the link in the window.
        links_probed: links the window's probes crossed (the Bonferroni family).
        background: per-probe background rate the test uses (:func:`link_test_rate` for the window).
        alpha: family-wise false-alarm rate; default :attr:`streams.pingmesh.tomography.VoteConfig.alpha`.

    Raises:
        ValueError: ``crossing`` < 0 or ``links_probed`` < 1.
    """
    from streams.pingmesh.context import log_poisson_tail
    from streams.pingmesh.tomography import VoteConfig

    if crossing < 0 or links_probed < 1:
        raise ValueError(f"min_failures_named: crossing {crossing} must be >= 0 and links_probed "
                         f"{links_probed} >= 1")
    a = VoteConfig().alpha if alpha is None else alpha
    limit, k = np.log(a / links_probed), max(VoteConfig().min_votes, 1)
    while float(log_poisson_tail(k, crossing * background)[0]) >= limit:
        k += 1
    return k


def lossy_link_named_probability(rate: float, crossing: int, links_probed: int, background: float) -> float:
    """P(a link dropping ``rate`` of the probes crossing it is named in a window): P(Binomial(``crossing``,
    ``rate``) >= :func:`min_failures_named`) at per-probe ``background`` and the vote's alpha."""
    k = min_failures_named(crossing, links_probed, background)
    below = sum(math.comb(crossing, i) * rate**i * (1 - rate) ** (crossing - i) for i in range(min(k, crossing + 1)))
    return max(0.0, 1.0 - below)


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
    if v["kind"] == "host_unreachable":  # a claim about the whole host: right when it names the faulty host
        return tr["kind"] in HOST_FAULT_KINDS and loc == tr["location"]
    return v["kind"] == tr["kind"] and loc == tr["location"]


def _abstains_on(v: dict, tr: dict) -> bool:
    """An ``undetermined`` verdict naming a set of indistinguishable links that holds the fault's link."""
    return v["kind"] == "undetermined" and "|" in str(v["location"]) and tr["location"] in str(v["location"]).split("|")


def fault_kind(tr: dict) -> str:
    """The row a truth record is scored under: its fault, with RNIC-port flaps apart from switch-link flaps."""
    return "flapping_rnic_port" if tr["fault"] == "flapping_link" and tr["kind"] == "rnic" else tr["fault"]


def longest_run(windows: list[int]) -> int:
    """The longest run of consecutive integers in ascending ``windows`` (0 for none): ``[1, 2, 3, 5]`` -> 3."""
    best = run = 0
    for i, w in enumerate(windows):
        run = run + 1 if i and w == windows[i - 1] + 1 else 1
        best = max(best, run)
    return best


def score(results: list[ScenarioResult], seed: int, wall_s: float) -> AccuracyReport:
    """Precision, recall, confusion and time to verdict over every scenario's windows."""
    rep = AccuracyReport(seed=seed, scenarios=len(results), wall_s=wall_s)
    prec: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    wrec: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    frec: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    conf: dict[str, Counter] = defaultdict(Counter)
    lat: dict[str, list[int]] = defaultdict(list)
    w10, both, both10 = [0, 0], [0, 0], [0, 0]
    healthy, faulty = [0, 0], [0, 0]
    for r in results:
        inv = r.scenario.inv
        rep.sizes[r.scenario.size] += 1
        first_right: dict[int, int] = {}
        und_windows: dict[int, list[int]] = defaultdict(list)  # fault -> windows that ended undetermined on it
        revised = {v["revision_of"]: f"{v['kind']} {v['location']}" for _, rows in r.windows for v in rows
                   if v["revision_of"] is not None}
        for wi, (ws, rows) in enumerate(r.windows):
            we = ws + WINDOW
            active = [(ti, tr) for ti, tr in enumerate(r.truth)
                      if _interval(tr)[0] < we and _interval(tr)[1] > ws]
            claims = []
            und_here = 0
            for v in rows:
                if v["revision_of"] is not None:
                    rep.revisions += 1
                    continue
                if v["kind"] == "undetermined":
                    rep.undetermined += 1
                    und_here += 1
                    continue
                claims.append(v)
            # A window after every fault has ended is neither: the fault's aftermath may still show.
            phase = faulty if active else healthy if all(_interval(tr)[0] >= we for tr in r.truth) else None
            if phase is not None:
                phase[0] += und_here
                phase[1] += 1
            right_of: dict[int, bool] = {}
            required: list[int] = []  # faults this window must name (not under half active, not abstained on)
            visible = True  # each required fault expected to fail >= 10 probes
            for v in claims:
                hit = [ti for ti, tr in active if _matches(v, tr, inv)]
                prec[v["kind"]][1] += 1
                rep.calibration.append((float(v["confidence"]), bool(hit)))
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
                if not right_of.get(ti) and any(_abstains_on(v, tr) for v in rows):
                    rep.abstentions.append({"scenario": r.scenario.index, "size": r.scenario.size, "window": wi,
                                            "fault": fk, "location": tr["location"],
                                            "verdict": next(v["location"] for v in rows if _abstains_on(v, tr))})
                    und_windows[ti].append(wi)
                    continue  # a right abstention: neither a claim nor a miss
                wrec[fk][1] += 1
                required.append(ti)
                exp = expected_failures(r.scenario.faults[ti], tr, r.link_probes.get(ws, {}),
                                        min(hi, we) - max(lo, ws), r.tuple_drops.get(ti, {}),
                                        (max(lo, ws), min(hi, we)))
                if exp >= 10:
                    w10[1] += 1
                    w10[0] += bool(right_of.get(ti))
                else:
                    visible = False
                if right_of.get(ti):
                    wrec[fk][0] += 1
                    conf[fk][tr["kind"]] += 1
                    continue
                rep.missed_windows.append({"scenario": r.scenario.index, "size": r.scenario.size, "window": wi,
                                           "fault": fk, "location": tr["location"],
                                           "expected_failures": round(exp, 1) if exp != float("inf") else None})
                nodes = _nodes_of_truth(tr, inv)
                wrong_near = sorted({v["kind"] for v in claims if nodes & _nodes_of_verdict(v, inv)})
                und = [v for v in rows if v["kind"] == "undetermined" and nodes & _nodes_of_verdict(v, inv)]
                conf[fk][wrong_near[0] if wrong_near else ("undetermined" if und else "missed")] += 1
                if und:
                    und_windows[ti].append(wi)
            if len(required) >= 2:
                both[1] += 1
                both[0] += all(right_of.get(ti) for ti in required)
                if visible:
                    both10[1] += 1
                    both10[0] += all(right_of.get(ti) for ti in required)
        for ti, wins in sorted(und_windows.items()):
            tr = r.truth[ti]
            rep.undetermined_streaks.append({"scenario": r.scenario.index, "size": r.scenario.size,
                                             "fault": fault_kind(tr), "location": tr["location"],
                                             "windows": len(wins), "longest": longest_run(wins)})
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
    rep.healthy_windows, rep.fault_windows = (healthy[0], healthy[1]), (faulty[0], faulty[1])
    rep.precision = {k: (a, b) for k, (a, b) in prec.items()}
    rep.window_recall = {k: (a, b) for k, (a, b) in wrec.items()}
    rep.fault_recall = {k: (a, b) for k, (a, b) in frec.items()}
    rep.confusion = dict(conf)
    rep.latency_windows = dict(lat)
    rep.window_recall_10 = (w10[0], w10[1])
    rep.concurrent_windows = (both[0], both[1])
    rep.concurrent_windows_10 = (both10[0], both10[1])
    return rep


# ---- Hostping patterns -----------------------------------------------------------------------


HOSTPING_NOISE = (0.01, 0.03, 0.05)
"""Relative noise (standard deviation) of each loopback result the Hostping patterns run at; the first is
the headline figure."""


def learned_baseline(sim: object, seed: int) -> np.ndarray:
    """The baseline an agent learns on a host: the first complete idle round of a healthy host of the same
    model (topology and noise as ``sim``, no bottleneck, its own noise draw from ``seed``), as
    :meth:`producers.hostping.agent.HostAgent.loopback_round` takes its first idle round when no baseline
    file is given. Never the simulator's noise-free model (:meth:`SimHost.baseline`). Gb/s, RNICs x
    endpoints."""
    from producers.hostping.simhost import SimHost

    healthy = SimHost(sim.topo, [], seed=seed, noise=sim.noise, base_util=sim.base_util)  # type: ignore[attr-defined]
    return healthy.matrix(round_no=0, mode="idle")


def hostping_patterns(seeds: tuple[int, ...] = (1, 2, 3), noise: float = HOSTPING_NOISE[0]
                      ) -> tuple[int, int, list[str]]:
    """Run the 12 Hostping bottleneck patterns (Hostping §6) on the sim host for each seed, each loopback
    result with ``noise`` relative Gaussian noise, against a baseline learned as an agent learns it
    (:func:`learned_baseline`, a noise draw of its own), not the simulator's noise-free model. The faults
    are still the simulator's models of the paper's bottlenecks (:mod:`producers.hostping.simhost`).

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
            sim = SimHost(topo, list(bs), seed=seed, noise=noise)
            base = learned_baseline(sim, seed=10_000 + seed)
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
        progress: Callable[[ScenarioResult], None] | None = None,
        background_loss: tuple[float, float] | None = BACKGROUND_LOSS, huge: int = 0,
        seeds: tuple[int, ...] | None = None, jobs: int = 1, loop: bool = False,
        standing_bounces: bool = False) -> AccuracyReport:
    """Draw and run ``n_scenarios`` scenarios per seed (``seeds``, default ``(seed,)``), plus ``huge``
    scenarios on the 10,240-RNIC fabric per seed, in ``jobs`` processes; score them all; run the
    Hostping patterns. Results do not depend on ``jobs`` (each scenario is seeded on its own).
    ``loop``: with the controller's closed loop; ``standing_bounces``: with standing bounced probes
    (:func:`run_scenario`)."""
    t = time.perf_counter()
    work = []
    for sd in seeds or (seed,):
        drawn = [draw_scenario(i, sd, big_every, seconds) for i in range(n_scenarios)]
        drawn += [draw_scenario(n_scenarios + j, sd, big_every, seconds, size=HUGE) for j in range(huge)]
        work += [(sc, sd * 1000 + sc.index, background_loss, loop, standing_bounces) for sc in drawn]
    results = run_scenarios(work, jobs, progress)
    rep = score(results, seeds[0] if seeds else seed, time.perf_counter() - t)
    rep.seeds = tuple(seeds or (seed,))
    run_hostping(rep)
    return rep


def run_scenarios(work: list[tuple[Scenario, int, tuple[float, float] | None, bool, bool]], jobs: int = 1,
                  progress: Callable[[ScenarioResult], None] | None = None) -> list[ScenarioResult]:
    """Run (scenario, seed, background loss, closed loop, standing bounces) items (:func:`run_scenario`) in
    ``jobs`` processes, results in the order given. The pool starts its processes from a fork server, never by
    forking this process (it runs pyarrow's threads); each scenario is seeded on its own, so the results do not
    depend on ``jobs``."""
    if jobs <= 1:
        out = []
        for w in work:
            out.append(_run_one(w))
            if progress:
                progress(out[-1])
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    out = []
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("forkserver")) as ex:
        for r in ex.map(_run_one, work):
            out.append(r)
            if progress:
                progress(r)
    return out


def _run_one(w: tuple[Scenario, int, tuple[float, float] | None, bool, bool]) -> ScenarioResult:
    return run_scenario(*w)


def _pct(x: tuple[int, int]) -> str:
    return f"{x[0] / x[1]:.1%}" if x[1] else "-"


def _quantile(xs: list[int], q: float) -> str:
    return f"{float(np.quantile(np.array(xs), q, method='inverted_cdf')):.0f}" if xs else "-"


def print_report(rep: AccuracyReport, console: object | None = None, hostping: bool = True) -> None:
    """Print the report as rich tables (``hostping``: and the Hostping line, which only the simulator runs)."""
    from rich.console import Console
    from rich.table import Table

    con = console if console is not None else Console()
    sizes = ", ".join(f"{n}x {s}" for s, n in sorted(rep.sizes.items()))
    seeds = ", ".join(map(str, rep.seeds or (rep.seed,)))
    con.print(f"[bold]accuracy[/bold]: {rep.scenarios} scenarios, seeds {seeds}, {rep.wall_s:.0f} s ({sizes})")

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
    con.print(f"undetermined verdicts (no claim): {rep.undetermined}; revisions: {rep.revisions}; "
              f"right abstentions (undetermined naming a link set that holds the fault): {len(rep.abstentions)}")
    (hu, hw), (fu, fw) = rep.healthy_windows, rep.fault_windows
    con.print(f"undetermined per 1,000 healthy windows (before any fault starts): "
              f"{1000 * hu / hw if hw else float('nan'):.2f} ({hu} in {hw}); "
              f"per fault window: {fu / fw if fw else float('nan'):.3f} ({fu} in {fw})")

    streaks = rep.undetermined_streaks
    long_ = [x for x in streaks if x["longest"] > 2]
    con.print(f"faults left undetermined in some window: {len(streaks)}; for more than 2 consecutive windows: "
              f"{len(long_)} (longest {max((x['longest'] for x in streaks), default=0)})"
              + "".join(f"\n  scenario {x['scenario']} ({x['size']}) {x['fault']} {x['location']}: "
                        f"{x['longest']} windows in a row" for x in long_))

    t = Table(title=f"reliability of claims' confidence (ECE {rep.ece():.3f})")
    for c in ("confidence bin", "mean confidence", "precision", "claims"):
        t.add_column(c, justify="right")
    for lo, c, p, k in rep.reliability():
        t.add_row(f"[{lo:.1f}, {lo + 0.1:.1f})", f"{c:.3f}", f"{p:.3f}", str(k))
    con.print(t)

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
    h, n = rep.window_recall_10
    con.print(f"window recall, truth-windows expected to fail >= 10 probes: {h}/{n} = {_pct((h, n))}")
    h, n = rep.concurrent_windows
    con.print(f"windows with two or more faults to name, all of them named: {h}/{n} = {_pct((h, n))}")
    h, n = rep.concurrent_windows_10
    con.print(f"  of them, windows where each is expected to fail >= 10 probes: {h}/{n} = {_pct((h, n))}")

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
        for w in rep.wrong:
            t.add_row(str(w["scenario"]), w["size"], str(w["window"]), w["kind"], w["location"],
                      f"{w['confidence']:.2f}", w["revised_to"], ", ".join(w["faults"]) or "(none)")
        con.print(t)
    if rep.abstentions:
        t = Table(title="right abstentions (not claims, not misses)")
        for c in ("scen", "size", "win", "fault", "location", "undetermined over"):
            t.add_column(c)
        for a in rep.abstentions:
            t.add_row(str(a["scenario"]), a["size"], str(a["window"]), a["fault"], a["location"], a["verdict"])
        con.print(t)
    if rep.missed_windows:
        t = Table(title="truth-windows without a right claim")
        for c in ("scen", "size", "win", "fault", "location", "expected failures"):
            t.add_column(c)
        for m in rep.missed_windows:
            e = m["expected_failures"]
            t.add_row(str(m["scenario"]), m["size"], str(m["window"]), m["fault"], m["location"],
                      "all probes" if e is None else f"{e:.1f}")
        con.print(t)
    if rep.missed:
        t = Table(title="faults never named right")
        for c in ("scen", "size", "fault", "location", "start (s after T0)"):
            t.add_column(c)
        for m in rep.missed:
            st = "-" if m["start_ns"] is None else f"{(m['start_ns'] - T0) / S:.0f}"
            t.add_row(str(m["scenario"]), m["size"], m["fault"], m["location"], st)
        con.print(t)
    if hostping:
        print_hostping(rep, con)


def run_hostping(rep: AccuracyReport) -> None:
    """Run the Hostping patterns at every noise of :data:`HOSTPING_NOISE` into ``rep`` (the first is the
    headline ``rep.hostping``; ``rep.hostping_wrong`` lists the wrong runs at every noise)."""
    rep.hostping_wrong = []
    for noise in HOSTPING_NOISE:
        ok, tried, wrong = hostping_patterns(noise=noise)
        rep.hostping_by_noise[noise] = (ok, tried)
        rep.hostping_wrong += [f"{noise:.0%} noise, {w}" for w in wrong]
        if noise == HOSTPING_NOISE[0]:
            rep.hostping = (ok, tried)


def print_hostping(rep: AccuracyReport, console: object | None = None) -> None:
    """Print the Hostping line: right runs at the headline noise, what the baseline is, the other noises."""
    from rich.console import Console

    con = console if console is not None else Console()
    ok, tried = rep.hostping
    con.print(f"[bold]Hostping[/bold]: {ok}/{tried} pattern runs named right (12 patterns x {tried // 12} seeds; "  # type: ignore[attr-defined]
              f"{HOSTPING_NOISE[0]:.0%} noise per result; baseline: the first idle round of a healthy host, "
              "as an agent learns it; faults: the simulator's models of the paper's bottlenecks)")
    others = [f"{n:.0%} noise {a}/{b}" for n, (a, b) in rep.hostping_by_noise.items() if n != HOSTPING_NOISE[0]]
    if others:
        con.print("  at more noise: " + ", ".join(others))  # type: ignore[attr-defined]
    for w in rep.hostping_wrong:
        con.print(f"  wrong: {w}")  # type: ignore[attr-defined]
