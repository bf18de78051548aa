"""Impact classes P0/P1/P2 and per-job coverage (R-Pingmesh §3.3 step 5, §5; digest §2).

A problem on the job's paths — the links, RNICs and hosts its service-tracing
probes cross — is **P0** when the job's metric crosses the threshold its team
set (fix at once), **P1** when it does not or no metric arrived (fix by cost and
benefit). Any other problem is **P2**: real, but not this job's cause.

Probe noise is graded ``noise``, not P0-P2: a ``stale_qpn`` verdict says the target's agent restarted
with new QPNs and the prober still used the old ones (its pinglist is stale); the timeouts are the
probe's, not the network's, and no job is hit by them (R-Pingmesh §5: "probe noise: drop the timeout").

Job metrics arrive as a table ``job_id`` (string), ``sample_ns`` (int64 ns),
``value`` (float64), e.g. training throughput samples; thresholds are per job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import key
from streams.pingmesh.links import probe_link_codes

NETWORK_KINDS = frozenset({"switch", "rnic", "switch_latency", "rnic_latency"})
"""Verdict kinds that blame the network (the others are host or probe problems)."""

PROBE_NOISE_KINDS = frozenset({"stale_qpn"})
"""Verdict kinds that are probe noise: the probe was wrong (a stale pinglist), neither network nor host."""

NOISE = "noise"
"""The impact of probe noise (:data:`PROBE_NOISE_KINDS`): no job's problem, nothing to repair in the fabric."""

NOISE_NOTE = "probe noise: the target's QPN changed (its agent restarted), the pinglist is stale, not the network"
"""What a person reads next to a probe-noise verdict."""


@dataclass(frozen=True)
class JobThreshold:
    """The job team's threshold: a window mean ``value`` below it (or above, if ``higher_is_worse``) is a breach."""

    value: float
    higher_is_worse: bool = False


@dataclass
class Footprint:
    """What a job's service-tracing probes crossed in a window."""

    links: set[str] = field(default_factory=set)
    rnics: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    flows: set[str] = field(default_factory=set)


def footprints(service: pa.Table) -> dict[str, Footprint]:
    """Per job: links, RNICs, hosts and flows of its ``service`` probes (a :class:`WindowPartial` table).

    Flows are ``prober_rnic|responder_rnic|src_port``. Each set is filled from one slice of values per
    job (rows ordered by the job's integer code), not one Python step per row or link crossed.
    """
    if service.num_rows == 0:
        return {}
    job = key(service["job_id"])
    pl = probe_link_codes(service["fwd_hops"], service["rev_hops"])
    both = np.concatenate([job.codes, job.codes])
    flows = pc.binary_join_element_wise(service["prober_rnic"], service["responder_rnic"],
                                        pc.cast(service["src_port"], pa.string()), "|")
    links = _sets_by_job(job.codes[pl.row], pl.names.take(pa.array(pl.link, pa.int64())).to_pylist(), job.card)
    rnics = _sets_by_job(both, service["prober_rnic"].to_pylist() + service["responder_rnic"].to_pylist(), job.card)
    hosts = _sets_by_job(both, service["prober_host"].to_pylist() + service["responder_host"].to_pylist(), job.card)
    flow_sets = _sets_by_job(job.codes, flows.to_pylist(), job.card)
    present = np.flatnonzero(np.bincount(job.codes, minlength=job.card))
    names = job.values(present).to_pylist()
    return {name: Footprint(links[j], rnics[j], hosts[j], flow_sets[j])
            for name, j in zip(names, present.tolist(), strict=True)}


def _sets_by_job(job: np.ndarray, values: list[object], n_jobs: int) -> list[set]:
    """``values[i]`` belongs to job code ``job[i]``: the set of each job's values, by code."""
    order = np.argsort(job, kind="stable")
    vals = np.empty(len(values), dtype=object)
    vals[:] = values
    vals = vals[order]
    bounds = np.searchsorted(job[order], np.arange(n_jobs + 1))
    return [set(vals[bounds[j]:bounds[j + 1]].tolist()) for j in range(n_jobs)]


def breaches(job_metrics: pa.Table | None, start_ns: int, end_ns: int,
             thresholds: Mapping[str, JobThreshold]) -> dict[str, tuple[float | None, bool]]:
    """Per job with a threshold: (window mean of its metric or None, whether it crossed the threshold)."""
    out: dict[str, tuple[float | None, bool]] = {j: (None, False) for j in thresholds}
    if job_metrics is None or job_metrics.num_rows == 0:
        return out
    m = job_metrics.filter(pc.and_(pc.greater_equal(job_metrics["sample_ns"], start_ns),
                                   pc.less(job_metrics["sample_ns"], end_ns)))
    if m.num_rows == 0:
        return out
    g = m.group_by(["job_id"]).aggregate([("value", "mean")])
    for j, v in zip(g["job_id"].to_pylist(), g["value_mean"].to_pylist(), strict=True):
        th = thresholds.get(j)
        if th is not None:
            out[j] = (float(v), bool(v > th.value if th.higher_is_worse else v < th.value))
    return out


def on_path(kind: str, location: str, fp: Footprint, rnic_host: Mapping[str, str]) -> bool:
    """Whether a problem at ``location`` lies on the job's paths (link, RNIC or host)."""
    if "->" in location:
        return location in fp.links
    if location in fp.rnics:
        return True
    return location in fp.hosts or rnic_host.get(location) in fp.hosts and kind in ("busy_host", "host_down")


def grade(kind: str, location: str, fps: Mapping[str, Footprint],
          breach: Mapping[str, tuple[float | None, bool]],
          rnic_host: Mapping[str, str]) -> list[tuple[str, str | None, float | None]]:
    """Impact of one problem: ``[(impact, job_id, metric)]``, one per job it lies on, else ``[("P2", None, None)]``.

    Probe noise (``kind`` in :data:`PROBE_NOISE_KINDS`) is ``[("noise", None, None)]`` even on a job's paths:
    the job's own queue pairs are not the stale ones the probes used.
    """
    if kind in PROBE_NOISE_KINDS:
        return [(NOISE, None, None)]
    out = []
    for job in sorted(fps):
        if on_path(kind, location, fps[job], rnic_host):
            value, crossed = breach.get(job, (None, False))
            out.append(("P0" if crossed else "P1", job, value))
    return out or [("P2", None, None)]


@dataclass(frozen=True)
class CoverageConfig:
    """What makes a job's window covered enough to call the network innocent.

    Attributes:
        min_connection_share: share of the job's known connections probed in the window (0.8).
        min_link_share: share of the job's links crossed by at least ``min_link_probes`` probes (0.8).
        min_link_probes: probes a link needs in the window to count as covered (10).
        job_retention_ns: a job no service probe has named for this long (event time) has ended: its
            known connections are forgotten and it gets no more coverage rows (2 h: two inter-ToR rotation
            periods, as long as the worker's path index keeps an unprobed 5-tuple).
    """

    min_connection_share: float = 0.8
    min_link_share: float = 0.8
    min_link_probes: int = 10
    job_retention_ns: int = 2 * 3_600_000_000_000


def coverage_row(job: str, fp: Footprint, known_flows: set[str], crossing: Mapping[str, int],
                 down: set[str], cfg: CoverageConfig) -> dict[str, object]:
    """Coverage of one job in one window (the columns of :data:`streams.pingmesh.blame.COVERAGE_SCHEMA`)."""
    expected = len(known_flows | fp.flows)
    probed = len(fp.flows)
    links = sorted(fp.links)
    covered = int(np.sum([crossing.get(lk, 0) >= cfg.min_link_probes for lk in links])) if links else 0
    silent = sorted(down & fp.hosts)
    ok = (expected > 0 and probed / expected >= cfg.min_connection_share
          and bool(links) and covered / len(links) >= cfg.min_link_share and not silent)
    return {"job_id": job, "connections_expected": expected, "connections_probed": probed,
            "links_total": len(links), "links_covered": covered, "agents_silent": ",".join(silent),
            "sufficient": ok}
