"""Node actions on verdicts, bounded by a blast-radius guard: drain the node a verdict blames, resume the
nodes fabricscope drained once their problem has been clear for a while, and nothing past the guard.

The rules (docs/scheduler.md: node actions are dry-run by default and bounded):

* Only a P0/P1 verdict of kind ``rnic``, ``host_down`` or ``busy_host`` is a node action: the node is the
  verdict's host (an RNIC's host through the inventory), named in the scheduler through the node map.
  A switch-link verdict is never a node action (draining every node behind a link would take the rack
  down for one cable); it is reported as ``skip`` for chat to carry.
* A drain's reason is ``fabricscope: <kind> <location> verdict <id>``; only nodes whose reason starts
  with ``fabricscope:`` are ever resumed, so an operator's drain is never undone here.
* The guard, checked before every drain: at most ``max_fraction`` of any partition the node is in
  drained by fabricscope at once (default 0.5, NVIDIA NVSentinel's breaker: never cordon more than
  half), at most ``max_nodes`` such nodes in all, at most ``max_per_hour`` drains in the last hour.
  The current count comes from the scheduler itself (nodes whose reason is ours), the hourly count from
  the action log in the store, so a restart resets neither. Past the guard the action is ``refused``
  and the run says so (the command exits non-zero for an alert to pick up).
* A resume: a node fabricscope drained, with no qualifying verdict on it for ``clear_ns``, or whose
  verdict an operator rejected (``fabricscope verdict reject ID``).

:func:`plan` is pure (verdicts, node states, history in; actions out); :func:`apply` runs the actions on
a :class:`Scheduler` unless ``dry_run``; every action, dry or not, is a row of
``schemas/ddl/051_node_actions.sql`` (:func:`action_rows`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from schemas.inventory import Inventory

REASON_PREFIX = "fabricscope:"
NODE_KINDS = frozenset({"rnic", "host_down", "busy_host"})
"""Verdict kinds that blame one node (R-Pingmesh §3.3: RNIC and host problems)."""
ACTION_IMPACTS = frozenset({"P0", "P1"})
HOUR_NS = 3_600_000_000_000


class Scheduler(Protocol):
    """What :func:`apply` needs from a scheduler backend (:class:`producers.scheduler.slurm.SlurmClient`)."""

    def drain(self, node: str, reason: str) -> None: ...

    def resume(self, node: str) -> None: ...


class NodeView(Protocol):
    """A node as the scheduler reports it (:class:`producers.scheduler.slurm.NodeState`)."""

    name: str
    drain: bool
    reason: str
    partitions: tuple[str, ...]


@dataclass(frozen=True)
class GuardConfig:
    """The blast-radius guard and the resume delay.

    Attributes:
        max_fraction: share of a partition's nodes fabricscope may hold drained at once (0.5, NVSentinel's).
        max_nodes: nodes fabricscope may hold drained at once in all (None: no cap beyond the fraction).
        max_per_hour: drains in any trailing hour (10).
        clear_ns: a drained node is resumed after this long with no qualifying verdict on it (30 min).
    """

    max_fraction: float = 0.5
    max_nodes: int | None = None
    max_per_hour: int = 10
    clear_ns: int = 30 * 60 * 1_000_000_000

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_fraction <= 1.0:
            raise ValueError(f"max_fraction {self.max_fraction}: give a share between 0 and 1 (0.5 = half)")
        if self.max_nodes is not None and self.max_nodes < 0:
            raise ValueError(f"max_nodes {self.max_nodes}: give 0 or more")
        if self.max_per_hour < 0:
            raise ValueError(f"max_per_hour {self.max_per_hour}: give 0 or more")


@dataclass
class Action:
    """One decision. ``action``: ``drain`` | ``resume`` | ``refused`` | ``skip``; ``outcome`` after
    :func:`apply`: ``dry-run`` | ``done`` | ``failed: ...`` | ``refused`` | ``skipped``."""

    action: str
    node: str
    host: str
    verdict_id: str
    kind: str
    location: str
    reason: str
    why: str
    outcome: str = ""

    def key(self) -> str:
        return f"{self.action}|{self.node}|{self.verdict_id}"


def drain_reason(kind: str, location: str, verdict_id: str) -> str:
    """The Slurm reason of a fabricscope drain (what :func:`plan` later recognises as its own)."""
    return f"{REASON_PREFIX} {kind} {location} verdict {verdict_id}"


def _host_of(kind: str, location: str, inv: Inventory) -> str | None:
    if kind == "rnic":
        return inv.rnics[location].host if location in inv.rnics else None
    return location if location in inv.hosts else None


@dataclass
class History:
    """What the store remembers: drains applied (``at_ns``) and verdict ids operators rejected."""

    drains_ns: list[int] = field(default_factory=list)
    rejected: set[str] = field(default_factory=set)


def plan(verdicts: Iterable[Mapping], nodes: Sequence[NodeView], inv: Inventory, host_node: Mapping[str, str],
         history: History, now_ns: int, cfg: GuardConfig | None = None) -> list[Action]:
    """The actions for the current verdicts, in order: resumes first (they free room), then drains
    (P0 before P1, then by node name), each checked against the guard as it is planned.

    Args:
        verdicts: ``verdict.v1`` rows of the last ``cfg.clear_ns`` (dicts; revised ones already dropped).
        nodes: every node of the scheduler with its DRAIN flag, reason and partitions.
        host_node: inventory host -> scheduler node name (hosts missing here get ``skip``).
        history: drains applied so far (the hourly budget) and rejected verdict ids.
        now_ns: the decision time, ns since the epoch.

    Returns:
        :class:`Action` list; ``refused`` rows name the guard limit they hit.
    """
    cfg = cfg or GuardConfig()
    by_name = {n.name: n for n in nodes}
    ours = {n.name for n in nodes if n.drain and n.reason.startswith(REASON_PREFIX)}
    bad: dict[str, Mapping] = {}  # node -> the newest qualifying verdict on it
    actions: list[Action] = []
    for v in sorted(verdicts, key=lambda r: (r["window_start_ns"], r["verdict_id"])):
        kind, loc, vid = v["kind"], v["location"], v["verdict_id"]
        if v.get("impact") not in ACTION_IMPACTS or vid in history.rejected:
            continue
        if v["window_end_ns"] < now_ns - cfg.clear_ns:
            continue
        if kind not in NODE_KINDS:
            if kind in ("switch", "switch_latency"):
                actions.append(Action("skip", "", "", vid, kind, loc, "",
                                      "a switch-link verdict is never a node action; it goes to chat"))
            continue
        host = _host_of(kind, loc, inv)
        node = host_node.get(host) if host else None
        if node is None or node not in by_name:
            actions.append(Action("skip", node or "", host or "", vid, kind, loc, "",
                                  f"no scheduler node for {'host ' + host if host else loc}; check the node map"))
            continue
        bad[node] = v
    for name in sorted(ours - set(bad)):
        n = by_name[name]
        vid = n.reason.rsplit("verdict ", 1)[-1] if "verdict " in n.reason else ""
        why = (f"operator rejected verdict {vid}" if vid in history.rejected
               else f"no P0/P1 node verdict on it for {cfg.clear_ns / 60e9:.0f} min")
        actions.append(Action("resume", name, "", vid, "", "", n.reason, why))
    held = set(ours) - {a.node for a in actions if a.action == "resume"}
    hour = sum(1 for t in history.drains_ns if t >= now_ns - HOUR_NS)
    part_size: dict[str, int] = {}
    for n in nodes:
        for p in n.partitions:
            part_size[p] = part_size.get(p, 0) + 1
    for node, v in sorted(bad.items(), key=lambda nv: (nv[1]["impact"], nv[0])):  # P0 first
        n = by_name[node]
        if node in held or n.drain:
            continue  # already drained (by us: nothing to do; by an operator: not ours to touch)
        host = _host_of(v["kind"], v["location"], inv) or ""
        a = Action("drain", node, host, v["verdict_id"], v["kind"], v["location"],
                   drain_reason(v["kind"], v["location"], v["verdict_id"]),
                   f"{v['impact']} {v['kind']} at {v['location']}")
        limit = _guard(node, n.partitions, held, by_name, part_size, hour, cfg)
        if limit:
            a.action, a.why = "refused", f"{a.why}; blast-radius guard: {limit}"
        else:
            held.add(node)
            hour += 1
        actions.append(a)
    return actions


def _guard(node: str, partitions: Sequence[str], held: set[str], by_name: Mapping[str, NodeView],
           part_size: Mapping[str, int], hour: int, cfg: GuardConfig) -> str:
    """Empty when draining ``node`` keeps every limit; else the limit it would break."""
    if hour + 1 > cfg.max_per_hour:
        return f"{hour} drains in the last hour already (max_per_hour {cfg.max_per_hour})"
    if cfg.max_nodes is not None and len(held) + 1 > cfg.max_nodes:
        return f"{len(held)} nodes drained by fabricscope already (max_nodes {cfg.max_nodes})"
    for p in partitions:
        mine = sum(1 for h in held if p in by_name[h].partitions) + 1
        if mine > cfg.max_fraction * part_size[p]:
            return (f"would hold {mine} of partition {p}'s {part_size[p]} nodes drained "
                    f"(max_fraction {cfg.max_fraction:g})")
    return ""


def apply(actions: list[Action], scheduler: Scheduler, dry_run: bool = True) -> list[Action]:
    """Run the drains and resumes on ``scheduler`` (nothing when ``dry_run``); fills each ``outcome``.

    A failing command is that action's ``failed: <error>`` outcome; the others still run.
    """
    for a in actions:
        if a.action not in ("drain", "resume"):
            a.outcome = "refused" if a.action == "refused" else "skipped"
            continue
        if dry_run:
            a.outcome = "dry-run"
            continue
        try:
            if a.action == "drain":
                scheduler.drain(a.node, a.reason)
            else:
                scheduler.resume(a.node)
            a.outcome = "done"
        except Exception as e:  # one node's failure must not stop the others; it is logged with the error
            a.outcome = f"failed: {e}"[:500]
    return actions


ACTION_COLUMNS = ("action_id", "at_ns", "action", "node", "host", "verdict_id", "kind", "location", "reason",
                  "why", "outcome", "dry_run")


def action_rows(actions: Sequence[Action], at_ns: int, dry_run: bool) -> list[dict]:
    """Rows of table ``node_actions`` (:data:`ACTION_COLUMNS`); ``action_id`` is stable per action and time."""
    out = []
    for a in actions:
        aid = hashlib.sha1(f"{at_ns}|{a.key()}".encode()).hexdigest()[:16]
        out.append({"action_id": aid, "at_ns": int(at_ns), **{k: v for k, v in asdict(a).items()},
                    "dry_run": bool(dry_run)})
    return out


def summary(actions: Sequence[Action]) -> str:
    """One JSON line: counts by action and outcome."""
    counts: dict[str, int] = {}
    for a in actions:
        k = f"{a.action}:{a.outcome or '-'}"
        counts[k] = counts.get(k, 0) + 1
    return json.dumps(counts, sort_keys=True)
