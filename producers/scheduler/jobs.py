"""The scheduler's jobs as fabricscope sees them: id, name, user, nodes, time span, state; their hosts
and RNICs through the inventory; and a bounded sample of their node pairs for the service pinglist.

A :class:`Job` is backend-neutral (Slurm now; Kubernetes pods' node placement later): ``nodes`` are the
scheduler's node names, mapped to inventory hosts by a :class:`NodeMap` (identity by default, a YAML
``{node: host}`` file where the names differ). Stdlib and PyYAML only.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from schemas.inventory import Inventory

ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING"})
"""Slurm job states whose end time is not known yet (``end_ns`` is None)."""

_JOB_ID = re.compile(r"^(\d+)(?:_(\d+|\[[0-9,\-%]+\]))?(?:\+(\d+))?(?:\.(\w+))?$")

DEFAULT_MAX_PAIRS = 64
"""Node pairs per job on the service pinglist: all pairs of an N-node job grow as N^2 (a 512-node job has
130,816), so a job gets a fixed-size sample; every node appears in it while 2*pairs >= N."""


class JobIdError(ValueError):
    """A job id that is not Slurm's ``1234``, ``1234_7`` (array task), ``1234+1`` (heterogeneous
    component) or ``1234.0``/``1234.batch`` (step); the message names the forms."""


def base_job_id(job_id: str) -> str:
    """The job a Slurm id belongs to, as ``blame`` and the jobs table name it.

    ``"1234.0"`` and ``"1234.batch"`` (steps) -> ``"1234"``; ``"1234_7"`` (array task) and ``"1234+1"``
    (heterogeneous component) stay as they are (each is its own allocation).

    Raises:
        JobIdError: not one of Slurm's forms.
    """
    m = _JOB_ID.match(job_id.strip())
    if not m:
        raise JobIdError(f"job id {job_id!r}: give Slurm's 1234, 1234_7 (array task), 1234+1 "
                         "(heterogeneous component) or 1234.0 (step)")
    out = m.group(1)
    if m.group(2):
        out += f"_{m.group(2)}"
    if m.group(3):
        out += f"+{m.group(3)}"
    return out


@dataclass(frozen=True)
class Job:
    """One allocation of the scheduler.

    Attributes:
        job_id: Slurm's display id: ``"1234"``, ``"1234_7"`` (array task), ``"1234+1"`` (het component).
        parent_id: the array or heterogeneous job it belongs to (``"1234"``), else equal to ``job_id``.
        name, user, partition: as the scheduler reports them.
        state: Slurm's state (``RUNNING``, ``COMPLETED``, ``CANCELLED``, ``FAILED``, ``TIMEOUT``, ...).
        nodes: node names (hostlist expanded), in the scheduler's order.
        submit_ns, start_ns: ns since the epoch; ``start_ns`` is 0 while pending.
        end_ns: ns since the epoch, None while the job is active (:data:`ACTIVE_STATES`).
        source: the backend (``"slurm"``).
    """

    job_id: str
    parent_id: str
    name: str
    user: str
    partition: str
    state: str
    nodes: tuple[str, ...]
    submit_ns: int
    start_ns: int
    end_ns: int | None
    source: str = "slurm"

    def running_at(self, at_ns: int) -> bool:
        """Whether the job held its nodes at ``at_ns`` (start <= at < end; an active job has no end)."""
        return self.start_ns > 0 and self.start_ns <= at_ns and (self.end_ns is None or at_ns < self.end_ns)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"] = list(self.nodes)
        return d


def matches(job: Job, wanted: str) -> bool:
    """Whether ``job`` is what a user means by ``wanted``: its own id, its array/het parent, or a step of it."""
    want = base_job_id(wanted)
    return job.job_id == want or job.parent_id == want


@dataclass
class NodeMap:
    """Scheduler node name -> inventory host: ``explicit`` entries first, then the name itself.

    Attributes:
        explicit: ``{node: host}`` (from a YAML file, see :func:`load_node_map`).
        source: where the mapping came from, for messages.
    """

    explicit: dict[str, str] = field(default_factory=dict)
    source: str = "identity"

    def host(self, node: str, inv: Inventory) -> str | None:
        """The inventory host of ``node``, or None when neither the map nor the inventory knows it."""
        h = self.explicit.get(node, node)
        return h if h in inv.hosts else None


def load_node_map(path: str | Path) -> NodeMap:
    """A YAML mapping ``{slurm_node: inventory_host}`` (e.g. ``gpu017: H17``).

    Raises:
        ValueError: the file is not a mapping of names to names (the message names the file and entry).
    """
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"node map {p}: cannot read it ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"node map {p}: expected a mapping 'slurm_node: inventory_host', got {type(data).__name__}")
    out = {}
    for k, v in data.items():
        if not isinstance(k, str | int) or not isinstance(v, str | int):
            raise ValueError(f"node map {p}: entry {k!r}: {v!r} is not 'node: host'")
        out[str(k)] = str(v)
    return NodeMap(out, str(p))


@dataclass(frozen=True)
class Placement:
    """A job's nodes in the inventory's terms.

    Attributes:
        hosts: inventory hosts of its nodes (scheduler order).
        rnics: every RNIC of those hosts.
        unmapped: nodes neither the node map nor the inventory knows (reported, never dropped silently).
    """

    job: Job
    hosts: tuple[str, ...]
    rnics: tuple[str, ...]
    unmapped: tuple[str, ...]


def place(job: Job, inv: Inventory, node_map: NodeMap | None = None) -> Placement:
    """Map ``job.nodes`` to hosts and RNICs (``inv.rnics_of_host``)."""
    nm = node_map or NodeMap()
    hosts, unmapped = [], []
    for n in job.nodes:
        h = nm.host(n, inv)
        (hosts if h else unmapped).append(h or n)
    rnics = [r for h in hosts for r in inv.rnics_of_host(h)]
    return Placement(job, tuple(hosts), tuple(rnics), tuple(unmapped))


def sample_pairs(hosts: tuple[str, ...] | list[str], max_pairs: int = DEFAULT_MAX_PAIRS,
                 salt: str = "") -> list[tuple[str, str]]:
    """A deterministic sample of at most ``max_pairs`` unordered host pairs of a job.

    All pairs when they fit; else a ring (host i with host i+k for k = 1, 2, ...) over an order shuffled
    by ``salt`` (the job id), so every host is in the sample while ``2*max_pairs >= len(hosts)`` and
    the same job gets the same pairs on every refresh.

    Returns:
        ``[(a, b)]`` with ``a < b`` in the shuffled order; ``[]`` for fewer than two hosts.
    """
    hs = list(dict.fromkeys(hosts))
    n = len(hs)
    if n < 2 or max_pairs <= 0:
        return []
    if n * (n - 1) // 2 <= max_pairs:
        return list(itertools.combinations(hs, 2))
    hs.sort(key=lambda h: hashlib.sha1(f"{salt}|{h}".encode()).digest())
    out: list[tuple[str, str]] = []
    for k in range(1, n // 2 + 1):
        for i in range(n):
            if len(out) >= max_pairs:
                return out
            j = (i + k) % n
            if k * 2 == n and i >= j:  # the opposite pairs of an even ring, once each
                continue
            out.append((hs[i], hs[j]))
    return out


def job_connections(p: Placement, inv: Inventory, max_pairs: int = DEFAULT_MAX_PAIRS) -> list[dict[str, Any]]:
    """Service-pinglist connections of a running job (:func:`producers.controller.service` input).

    For each sampled host pair, RNIC ``i`` of one host talks to RNIC ``i`` of the other (rail-aligned,
    as NCCL's rings and trees use them), in both directions; the flow label is stable per connection.
    Used when the tracer does not see the job's own 5-tuples.
    """
    out = []
    for a, b in sample_pairs(p.hosts, max_pairs, p.job.job_id):
        for i, (ra, rb) in enumerate(zip(inv.rnics_of_host(a), inv.rnics_of_host(b), strict=False)):
            for src, dst in ((ra, rb), (rb, ra)):
                fl = int.from_bytes(hashlib.sha1(f"{p.job.job_id}|{src}|{dst}|{i}".encode()).digest()[:2], "big")
                out.append({"job_id": p.job.job_id, "src_rnic": src, "dst_rnic": dst, "flow_label": fl & 0xFFFFF})
    return out


def running_connections(jobs: list[Job], inv: Inventory, node_map: NodeMap | None = None,
                        max_pairs: int = DEFAULT_MAX_PAIRS) -> list[dict[str, Any]]:
    """Service-pinglist connections of every ``RUNNING`` job of ``jobs`` (what ``up`` hands the controller:
    ``lab.refresh_pinglists(connections=running_connections(SlurmClient().jobs(), inv))``)."""
    return [c for j in jobs if j.state == "RUNNING" for c in job_connections(place(j, inv, node_map), inv, max_pairs)]
