"""`fabricscope bench accuracy --source lab`: diagnosis accuracy on the netns lab's real packets.

One lab (:func:`fabricscope.cmd_lab.start_lab_source`) and one pipeline (the store writer and a
worker on the broker, under a topic prefix of their own, as ``fabricscope demo`` starts them) serve
the whole run. Scenarios run one after another, each on the 20 s window grid:

1. at a window boundary, inject the scenario's faults (none, one, or two at once on disjoint
   links and hosts) with :func:`infra.lab.faults.inject`;
2. let them run for ``windows`` windows;
3. clear them (:func:`infra.lab.faults.clear`; after a host fault the pinglists are rebuilt with
   the restarted responders' QPNs, as the controller's rebuild does);
4. let one window pass, then the next scenario starts at the next boundary.

Each fault's truth is the wall-clock interval from just before its injection to just after its
clear returned, in the shape of :meth:`producers.sim.Simulator.truth` (``kind``, ``location``,
``start_ns``, ``end_ns``, ``fault``): a switch link is named ``ToR->spine``, the analyzer's name
for the physical link whichever direction a probe crossed it in (:mod:`streams.pingmesh.links`).
A scenario's windows are every window from its injection boundary up to the next scenario's,
closed or not (a window the pipeline never closed is scored with no verdicts). They are scored by
:func:`bench.accuracy.score`, unchanged: a fault active for under half a window (the clear is a
few hundred ms late, so the window after it overlaps it) is not required there, and a claim there
that matches it is right, exactly as for the simulator's faults. Times are shifted so that each
scenario's first window starts at :data:`bench.accuracy.T0` (the scoring's "time to verdict"
counts windows from there). The probes crossing each faulted link per window (for the
"expected to fail >= 10 probes" recall) are summed from the workers' ``window.partials`` steps.
"""

from __future__ import annotations

import contextlib
import random
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.accuracy import T0, WINDOW, Scenario, ScenarioResult
from producers.sim.faults import (
    BusyHost,
    Fault,
    FlappingLink,
    HostDown,
    HostRestart,
    LinkDown,
    LossyLink,
    PartialTupleLoss,
    RnicDown,
)
from schemas.inventory import Inventory

LAB_KINDS: dict[str, tuple[str, str]] = {
    "link-down": ("link_down", "switch"),
    "link-loss": ("lossy_link", "switch"),
    "one-way-loss": ("lossy_link", "switch"),
    "partial-5tuple": ("partial_5tuple_loss", "switch"),
    "flapping-link": ("flapping_link", "switch"),
    "nic-down": ("rnic_down", "rnic"),
    "host-down": ("host_down", "host_down"),
    "host-restart": ("host_restart", "stale_qpn"),
    "busy-host": ("busy_host", "busy_host"),
}
"""Lab fault kind (:data:`infra.lab.faults.KINDS`) → (the simulator's fault name, the verdict kind a
correct analyzer gives), the names :func:`bench.accuracy.score` scores under. A one-way loss is scored in
the lossy-link row: the simulator has no fault of its own for it."""
LINK_KINDS = ("link-down", "link-loss", "one-way-loss", "partial-5tuple", "flapping-link")
HOST_KINDS = ("host-down", "host-restart", "busy-host")
N_FAULTS = (0, 1, 1, 1, 1, 2)
"""How many concurrent faults a scenario draws (uniformly from this tuple): 1 in 6 healthy, 1 in 6 two."""
LOSS_RANGE = (0.005, 0.5)
"""``link-loss`` drop probability, log-uniform: the simulator benchmark's range."""
FRACTION_RANGE = (0.1, 0.6)
"""``partial-5tuple`` share of tuples dropped, uniform: the simulator benchmark's range."""


@dataclass(frozen=True)
class LabFault:
    """One drawn lab fault: ``kind`` (a key of :data:`LAB_KINDS`), its target and parameters.

    ``target`` is ``{"a": ToR, "b": spine}`` for link kinds, ``{"rnic": name}`` for ``nic-down``,
    ``{"host": name}`` for host kinds (the keyword arguments of :func:`infra.lab.faults.inject`).
    ``loss`` (0..1) is used by ``link-loss`` and ``one-way-loss`` (which drops what the ToR sends up the
    cable when ``down`` is False, else what the spine sends down it), ``fraction`` (0..1) and
    ``hash_seed`` by ``partial-5tuple``, ``period_s`` and ``down_s`` (s) by ``flapping-link``.
    """

    kind: str
    target: tuple[tuple[str, str], ...]
    loss: float = 0.0
    fraction: float = 0.0
    hash_seed: int = 1
    down: bool = False
    period_s: float = 10.0
    down_s: float = 2.0

    @property
    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`infra.lab.faults.inject` for this fault (besides ``kind``)."""
        kw: dict[str, Any] = dict(self.target)
        if self.kind in ("link-loss", "one-way-loss"):
            kw["loss"] = self.loss
        if self.kind == "one-way-loss" and self.down:  # the sender is ``a``
            kw["a"], kw["b"] = kw["b"], kw["a"]
        if self.kind == "partial-5tuple":
            kw["fraction"], kw["seed"] = self.fraction, self.hash_seed
        if self.kind == "flapping-link":
            kw["period_s"], kw["down_s"] = self.period_s, self.down_s
        return kw


@dataclass(frozen=True)
class LabScenario:
    """Scenario ``index`` of a run: its faults (empty: healthy) and how many windows they last."""

    index: int
    faults: tuple[LabFault, ...]
    windows: int


def draw_lab_scenario(index: int, seed: int, fabric: Any, windows: int = 2) -> LabScenario:
    """Scenario ``index`` of run ``seed`` on ``fabric`` (an :class:`infra.lab.Fabric`, e.g.
    :func:`infra.lab.plan`): a pure function of its arguments.

    Draws 0-2 faults (:data:`N_FAULTS`) of the lab kinds, each on a link or host no other fault of
    the scenario uses (an ``nic-down`` takes its host). Link faults sit on ToR-spine cables.

    Raises:
        ValueError: ``windows`` < 1.
    """
    if windows < 1:
        raise ValueError(f"windows={windows}: a scenario lasts at least one window")
    rng = random.Random(f"lab-accuracy/{seed}/{index}")
    links = sorted((t, s) for t in fabric.tors for s in fabric.spines)
    hosts = sorted(fabric.hosts)
    used_links: set[tuple[str, str]] = set()
    used_hosts: set[str] = set()
    out: list[LabFault] = []
    for _ in range(rng.choice(N_FAULTS)):
        kind = rng.choice(tuple(LAB_KINDS))
        if kind in LINK_KINDS:
            tor, spine = rng.choice([ln for ln in links if ln not in used_links])
            used_links.add((tor, spine))
            lo, hi = LOSS_RANGE
            out.append(LabFault(kind, (("a", tor), ("b", spine)),
                                loss=round(float(np.exp(rng.uniform(np.log(lo), np.log(hi)))), 3),
                                fraction=round(rng.uniform(*FRACTION_RANGE), 2), hash_seed=rng.randrange(1, 2**16),
                                down=rng.random() < 0.5, period_s=rng.choice((5.0, 10.0, 20.0)),
                                down_s=rng.choice((1.0, 2.0, 3.0))))
            continue
        host = rng.choice([h for h in hosts if h not in used_hosts])
        used_hosts.add(host)
        if kind == "nic-down":
            out.append(LabFault(kind, (("rnic", rng.choice([r.name for r in fabric.host_rnics(host)])),)))
        else:
            out.append(LabFault(kind, (("host", host),)))
    return LabScenario(index, tuple(out), windows)


def truth_of(f: LabFault, start_ns: int, end_ns: int) -> dict:
    """The truth record of lab fault ``f`` active over [``start_ns``, ``end_ns``), in the shape of
    :meth:`producers.sim.Simulator.truth` (``kind``, ``location``, ``start_ns``, ``end_ns``, ``fault``).

    A ToR-spine cable is ``ToR->spine`` (the analyzer's ``lower->upper`` name of the physical link, so
    either direction's failures name it); an RNIC is its name; a host fault names the host.

    Raises:
        ValueError: an unknown kind.
    """
    if f.kind not in LAB_KINDS:
        raise ValueError(f"unknown lab fault {f.kind!r}; kinds are {', '.join(LAB_KINDS)}")
    fault, kind = LAB_KINDS[f.kind]
    t = dict(f.target)
    loc = f"{t['a']}->{t['b']}" if f.kind in LINK_KINDS else t.get("rnic") or t["host"]
    return {"kind": kind, "location": loc, "start_ns": int(start_ns), "end_ns": int(end_ns), "fault": fault}


def sim_fault_of(f: LabFault, start_ns: int, end_ns: int) -> Fault:
    """The simulator's model of lab fault ``f`` (what :func:`bench.accuracy.expected_failures` reads:
    the link and its loss rate, or a fault of a whole RNIC or host)."""
    t = dict(f.target)
    span = {"start_ns": int(start_ns), "end_ns": int(end_ns)}
    if f.kind == "link-down":
        return LinkDown(a=t["a"], b=t["b"], **span)
    if f.kind == "link-loss":
        return LossyLink(a=t["a"], b=t["b"], rate=f.loss, **span)
    if f.kind == "one-way-loss":  # about half the probes crossing a cable cross it in the lossy direction
        return LossyLink(a=t["a"], b=t["b"], rate=f.loss / 2, **span)
    if f.kind == "partial-5tuple":
        return PartialTupleLoss(a=t["a"], b=t["b"], fraction=f.fraction, **span)
    if f.kind == "flapping-link":
        return FlappingLink(a=t["a"], b=t["b"], period_s=f.period_s, down_s=f.down_s, **span)
    if f.kind == "nic-down":
        return RnicDown(rnic=t["rnic"], **span)
    if f.kind == "host-down":
        return HostDown(host=t["host"], **span)
    if f.kind == "host-restart":
        return HostRestart(host=t["host"], **span)
    if f.kind == "busy-host":
        return BusyHost(host=t["host"], **span)
    raise ValueError(f"unknown lab fault {f.kind!r}; kinds are {', '.join(LAB_KINDS)}")


@dataclass
class LabRun:
    """What one scenario did on the lab: when its window grid starts, what was in force when (wall clock).

    ``events`` are (fault, start ns, end ns): the scenario's faults, and for each ``host-down`` the
    restart of the host's agents that its clear is (new QPNs: :func:`restart_span`), as a
    ``host-restart``.
    """

    scenario: LabScenario
    first_window_ns: int
    events: list[tuple[LabFault, int, int]] = field(default_factory=list)
    n_windows: int = 0
    """Windows from its injection boundary to the next scenario's: its fault windows and the quiet ones after
    the clear (one, or more while a restart's stale QPNs may linger); 0: ``scenario.windows + 1``."""
    wall_s: float = 0.0
    """From its injection boundary to the next scenario's (s)."""
    inject_s: float = 0.0
    """How long injecting its faults took (s; a host restart waits for the responders to register)."""
    clear_s: float = 0.0
    """How long clearing them (and rebuilding the pinglists after a host fault) took (s)."""

    @property
    def window_starts(self) -> list[int]:
        """Its windows' starts (ns)."""
        return [self.first_window_ns + i * WINDOW for i in range(self.n_windows or self.scenario.windows + 1)]


REGISTRY_REFRESH_S = 10.0
"""How often the benchmark's probers re-read the registry (s; the agents' default is 30): after a host's
agents restart with new QPNs, a prober keeps probing the old ones until its next read, at its own phase
(``stale_qpn`` noise, R-Pingmesh §5). The truth of a restart runs until ``REGISTRY_REFRESH_S`` after the new
QPNs registered, a bound; a shorter period makes it tighter (the simulator's probers all refresh at once,
its truth is exact), so a window is required to name the restart only where the stale probes were."""


def restart_span(started_ns: int, registered_ns: int, refresh_s: float = REGISTRY_REFRESH_S) -> tuple[int, int]:
    """When a host restart's probes may time out on stale QPNs: from the restart's start until
    ``refresh_s`` after its responders registered the new QPNs (the simulator's ``HostRestart``
    truth: downtime + refresh)."""
    return int(started_ns), int(registered_ns + refresh_s * 1e9)


def quiet_windows(events: list[tuple[LabFault, int, int]], clear_done_ns: int, fault_end_ns: int) -> int:
    """Windows to wait after the fault windows (ending at boundary ``fault_end_ns``) before the next
    scenario: one, or more until every event has ended (a restart's stale QPNs) and the clear returned."""
    last = max([clear_done_ns, *(b for _, _, b in events)])
    return max(1, -(-(last - fault_end_ns) // WINDOW))


def scenario_result(run: LabRun, inv: Inventory, size: str, verdicts: list[dict],
                    link_probes: dict[int, dict[str, int]] | None = None) -> ScenarioResult:
    """The run of one scenario as :func:`bench.accuracy.score` takes it.

    Args:
        run: the scenario and its events' intervals (wall clock, ns).
        inv: the lab's inventory.
        size: the fabric's label in the report.
        verdicts: verdict.v1 dicts; those of the scenario's windows are kept (every window of it is
            there, with no verdicts when none came).
        link_probes: window start (wall clock) → link → probes that crossed it.

    Times are shifted by one offset so that the scenario's first window starts at ``T0``.
    """
    shift = run.first_window_ns - T0
    truths = [truth_of(f, a - shift, b - shift) for f, a, b in run.events]
    faults = [sim_fault_of(f, a - shift, b - shift) for f, a, b in run.events]
    by_ws: dict[int, list[dict]] = {}
    for v in verdicts:
        by_ws.setdefault(int(v["window_start_ns"]), []).append(v)
    windows = [(ws - shift, by_ws.get(ws, [])) for ws in run.window_starts]
    probes = {ws - shift: dict((link_probes or {}).get(ws, {})) for ws in run.window_starts}
    sc = Scenario(run.scenario.index, size, inv, faults, run.scenario.windows * WINDOW // 1_000_000_000)
    return ScenarioResult(sc, truths, windows, run.wall_s, probes)


# ---- the run on the lab --------------------------------------------------------------------------


class _PartialsCounter:
    """Probes crossing each watched link per window, summed from the workers' ``window.partials`` steps
    (each step once: a step whose raw offset ranges were counted is a replay)."""

    def __init__(self, bootstrap: str, prefix: str, conf: dict[str, str]) -> None:
        from confluent_kafka import Consumer

        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}labacc-{uuid.uuid4().hex[:6]}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "fetch.message.max.bytes": str(32 * 1024 * 1024), **conf})
        self.c.subscribe([f"{prefix}window.partials"])
        self.parts: dict[str, dict[int, bytes]] = {}
        self.seen: set[bytes] = set()
        self.link_probes: dict[int, dict[str, int]] = {}

    def poll(self, timeout: float = 0.2) -> None:
        from streams.pingmesh.partial import from_bytes
        from streams.pingmesh.step_message import StepFormatError, decode_body, part_of

        for m in self.c.consume(num_messages=200, timeout=timeout):
            if m.error():
                continue
            headers = {k: v for k, v in (m.headers() or [])}
            try:
                part = part_of(headers)
            except StepFormatError:
                continue
            got = self.parts.setdefault(part.step_id, {})
            got[part.index] = m.value()
            if len(got) < part.count:
                continue
            del self.parts[part.step_id]
            key = headers["ranges"]
            if key in self.seen:
                continue
            self.seen.add(key)
            step = decode_body(part.ranges, b"".join(got[i] for i in range(part.count)))
            for ws, data in step.partials.items():
                crossing = from_bytes(data).crossing
                d = self.link_probes.setdefault(ws, {})
                for lk, n in zip(crossing["link"].to_pylist(), crossing["n"].to_pylist(), strict=True):
                    d[lk] = d.get(lk, 0) + int(n)

    def close(self) -> None:
        from fabricscope.stopping import call_abandonable

        call_abandonable(self.c.close, 5.0)


class LabLoop:
    """The controller's closed loop on the lab (:class:`producers.controller_loop.SplitLoop`, the code
    ``fabricscope pinglist loop`` runs): verdicts in, the agents' pinglist files out.

    Each batch of verdicts the run collects goes to the loop (the RNICs and hosts judged down or busy, the
    probe requests of ``undetermined`` groups, the links named), and every host's pinglist file is
    rewritten as the controller's lists plus the loop's entries in force whenever those change (the lab's
    probers read their file within a second). Candidate 5-tuples are chosen on the inventory's ECMP model,
    as the service chooses them; the lab's routers hash with a seed of their own, so which spine a tuple
    takes is the kernel's draw, and the vote reads the paths the agents trace.

    Args:
        lab: the running :class:`fabricscope.cmd_lab.LabSource` (its inventory, QPNs and base pinglists).
        seed: the loop's candidate draw.
    """

    def __init__(self, lab: Any, seed: int) -> None:
        from producers import controller as ctl
        from producers.controller_loop import SplitLoop
        from producers.sim.plan import entry_links
        from producers.sim.routing import Topology

        self.lab = lab
        self.seed = seed
        reg = ctl.Registry.from_inventory(lab.inventory, lab.qpns, seed=seed)
        # no bounced probes: the lab's routers do not decapsulate IP-in-IP (docs/identifiability.md)
        self.loop = SplitLoop(lab.inventory, reg, entry_links(Topology(lab.inventory, seed)), seed=seed,
                              bounce=False)
        self._seen = 0
        self._written: list[dict] = []

    def on_new_registry(self) -> None:
        """The lab's QPNs changed (a host restarted): the loop's new entries take the new ones."""
        from producers import controller as ctl

        self.loop.reg = ctl.Registry.from_inventory(self.lab.inventory, self.lab.qpns, seed=self.seed)
        self._written = []  # the base lists were rewritten: write the loop's entries again

    def step(self, verdicts: list[dict], now_ns: int) -> bool:
        """Feed the verdicts not seen yet; rewrite the pinglist files if the loop's entries changed.

        Returns True when the files were rewritten."""
        from infra.lab import agents
        from streams.pingmesh.probe_requests import down_endpoints, named_links, requests_from_verdicts

        new = verdicts[self._seen:]
        self._seen = len(verdicts)
        if new:
            self.loop.on_down(down_endpoints(new), now_ns)
            self.loop.on_requests(requests_from_verdicts(new), now_ns)
            self.loop.on_named(named_links(new), now_ns)
        entries = self.loop.entries(now_ns)
        if entries == self._written:
            return False
        lists = {h: list(es) for h, es in self.lab.pinglists.items()}
        for e in entries:
            lists.setdefault(e["prober_host"], []).append(e)
        agents.write_pinglists(lists, self.lab.directory)
        self._written = entries
        return True


@dataclass
class LabAccuracyRun:
    """Everything the lab run collected: per scenario its run, and the verdicts and closed windows."""

    runs: list[LabRun] = field(default_factory=list)
    verdicts: list[dict] = field(default_factory=list)
    closed: set[int] = field(default_factory=set)
    link_probes: dict[int, dict[str, int]] = field(default_factory=dict)
    unclosed: list[int] = field(default_factory=list)
    """Window starts of the scenarios that the pipeline had not closed when the run ended."""
    loop_writes: int = 0
    """Times the closed loop rewrote the agents' pinglist files (``loop=True``)."""
    loop_log: list[dict] = field(default_factory=list)
    """The loop's answers (:attr:`producers.controller_loop.SplitLoop.log`; ``loop=True``)."""


def run_lab(settings: Any, n_scenarios: int, seed: int, windows: int = 2, lab_prefix: str | None = None,
            var: Path | None = None, warmup_s: float = 30.0, say: Callable[[str], None] = print,
            progress: Callable[[LabRun], None] | None = None, close_wait_s: float = 120.0,
            loop: bool = False, first: int = 0) -> tuple[LabAccuracyRun, Inventory, str]:
    """Run ``n_scenarios`` drawn scenarios on one lab and one pipeline; returns what came back, the
    lab's inventory and its size label.

    Args:
        settings: :class:`fabricscope.settings.Settings` (the broker, its client config).
        n_scenarios, seed: :func:`draw_lab_scenario` of indices ``first..first + n_scenarios - 1``.
        first: index of the first scenario, so that one scenario of a seed can be run again alone.
        windows: windows each scenario's faults last.
        lab_prefix: namespace prefix of the lab (default :class:`infra.lab.LabSpec`'s), so that it can
            run beside another lab.
        var: where the pipeline's store, logs and the lab's state go (default a temporary directory).
        warmup_s: healthy traffic before the first scenario's boundary (baselines, paths).
        close_wait_s: after the last scenario, how long to wait for its windows to close.
        loop: run the controller's closed loop on the lab (:class:`LabLoop`): windows that end
            ``undetermined`` over a group of links change the agents' pinglists for the next windows.

    Everything it started (faults, lab, pipeline processes, topics) is removed on the way out, also
    on KeyboardInterrupt.

    Raises:
        infra.lab.netns.LabError: the lab needs root and network namespaces, or the prefix is in use.
        RuntimeError: a pipeline process exited.
    """
    import tempfile

    from fabricscope import demo
    from fabricscope.cmd_lab import start_lab_source
    from fabricscope.kafka_admin import create_topics, delete_topics
    from fabricscope.stopping import Cleanup
    from infra import lab as lab_infra
    from infra.lab import faults as lab_faults
    from infra.lab.netns import down_if_ours
    from infra.process_group import kill_group, signal_group

    spec = lab_infra.LabSpec(prefix=lab_prefix) if lab_prefix else lab_infra.LabSpec()
    fab = lab_infra.plan(spec)
    drawn = [draw_lab_scenario(i, seed, fab, windows) for i in range(first, first + n_scenarios)]
    prefix = f"labacc{uuid.uuid4().hex[:6]}."
    tmp = tempfile.TemporaryDirectory(prefix="fabricscope-labacc-") if var is None else None
    var = Path(tmp.name) if tmp else Path(var)
    lab_dir = var / "lab"
    conf = settings.kafka_client_config()
    out = LabAccuracyRun()
    procs: list[Any] = []
    collector: Any = None
    counter: _PartialsCounter | None = None
    split: LabLoop | None = None

    class _Sink:  # the demo collector fills a DemoResult's verdicts and windows
        def __init__(self) -> None:
            self.verdicts: list[dict] = []
            self.windows: list[dict] = []

    sink = _Sink()

    def pump(until_ns: int) -> None:
        """Collect verdicts, window summaries and partials until wall-clock ``until_ns``."""
        while True:
            left = (until_ns - time.time_ns()) / 1e9
            collector.poll(sink, timeout=max(0.05, min(0.5, left)))  # type: ignore[arg-type]
            counter.poll(timeout=0.05)  # type: ignore[union-attr]
            if split is not None and split.step(sink.verdicts, time.time_ns()):
                out.loop_writes += 1
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a pipeline process exited; see the logs in {var}")
            if time.time_ns() >= until_ns:
                return

    try:
        create_topics(settings.kafka_bootstrap, prefix, conf)
        procs += demo._children(settings, prefix, var, 1)
        collector = demo._Collector(settings.kafka_bootstrap, prefix, conf)
        counter = _PartialsCounter(settings.kafka_bootstrap, prefix, conf)
        say(f"lab {spec.prefix}*: building, agents uploading to {settings.kafka_bootstrap} (topics {prefix}*)")
        lab = start_lab_source(settings.kafka_bootstrap, prefix, seed=seed, spec=spec, directory=lab_dir,
                               kafka_config=conf or None, registry_refresh_s=REGISTRY_REFRESH_S)
        size = f"lab {len(fab.spines)}x{len(fab.tors)} ({len(fab.rnics)} RNICs)"
        split = LabLoop(lab, seed) if loop else None
        boundary = (time.time_ns() + int(warmup_s * 1e9)) // WINDOW * WINDOW + WINDOW
        for sc in drawn:
            pump(boundary)
            t0 = time.perf_counter()
            run = LabRun(sc, boundary)
            out.runs.append(run)  # from here on its windows are scored, whatever happens next
            placed: list[tuple[LabFault, str, int, int]] = []  # fault, lab id, start, injected
            for f in sc.faults:
                started = time.time_ns()
                placed.append((f, lab_faults.inject(f.kind, lab_dir, **f.kwargs)["id"], started, time.time_ns()))
            run.inject_s = time.perf_counter() - t0
            pump(boundary + sc.windows * WINDOW)
            t1 = time.perf_counter()
            cleared: list[tuple[LabFault, int, int]] = []
            for f, fid, _, _ in placed:
                started = time.time_ns()
                lab_faults.clear(fid, lab_dir)  # a host-down's clear restarts its agents: new QPNs
                cleared.append((f, started, time.time_ns()))
            if any(f.kind in HOST_KINDS for f in sc.faults):
                lab.refresh_pinglists(seed)  # the controller's rebuild with the new QPNs
                if split is not None:
                    split.on_new_registry()
            end = time.time_ns()
            run.clear_s = time.perf_counter() - t1
            for f, _, started, injected in placed:
                run.events.append((f, *(restart_span(started, injected) if f.kind == "host-restart"
                                        else (started, end))))
            for f, started, done in cleared:
                if f.kind == "host-down":
                    run.events.append((LabFault("host-restart", f.target), *restart_span(started, done)))
            quiet = quiet_windows(run.events, end, boundary + sc.windows * WINDOW)
            run.n_windows = sc.windows + quiet
            boundary += run.n_windows * WINDOW
            pump(boundary)
            run.wall_s = time.perf_counter() - t0
            if progress:
                progress(run)
        last = out.runs[-1].window_starts[-1] if out.runs else 0
        deadline = boundary + int(close_wait_s * 1e9)
        while time.time_ns() < deadline and not any(w["window_start_ns"] >= last for w in sink.windows):
            pump(min(deadline, time.time_ns() + 1_000_000_000))
        collector.poll(sink, timeout=2.0)  # type: ignore[arg-type]
        counter.poll(timeout=1.0)  # type: ignore[union-attr]
        out.verdicts = sink.verdicts
        out.closed = {int(w["window_start_ns"]) for w in sink.windows}
        out.link_probes = counter.link_probes  # type: ignore[union-attr]
        out.unclosed = [ws for r in out.runs for ws in r.window_starts if ws not in out.closed]
        if split is not None:
            out.loop_log = list(split.loop.log)
        inv = lab.inventory
        return out, inv, size
    finally:
        with Cleanup("fabricscope bench accuracy", 30.0, on_abort=lambda: [kill_group(p) for p in procs]) as cleanup:
            cleanup.owe("lab", f"the lab in {lab_dir} (`fabricscope lab down --prefix {spec.prefix} --dir {lab_dir}`)")
            with contextlib.suppress(Exception):
                lab_faults.clear(None, lab_dir)
            down_if_ours(lab_dir)
            cleanup.done("lab")
            for p in procs:
                signal_group(p, signal.SIGTERM)
            for c in (collector, counter):
                if c is not None:
                    c.close()
            demo._stop(procs)
            cleanup.owe("topics", f"the run's topics {prefix}* (`fabricscope topics` lists them)")
            delete_topics(settings.kafka_bootstrap, prefix, conf)
            cleanup.done("topics")
            if tmp:
                tmp.cleanup()


def results_of(out: LabAccuracyRun, inv: Inventory, size: str) -> list[ScenarioResult]:
    """Every scenario of a lab run as :func:`bench.accuracy.score` takes them."""
    return [scenario_result(r, inv, size, out.verdicts, out.link_probes) for r in out.runs]


def describe(run: LabRun) -> str:
    """One line for a scenario: its faults (kind@target) or ``healthy``."""
    return ", ".join(f"{f.kind}@{'-'.join(v for _, v in f.target)}" for f in run.scenario.faults) or "healthy"

