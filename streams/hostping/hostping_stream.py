"""Hostping on the stream: ``loopback.v1`` batches -> ``host_link.v1`` states and ``verdict.v1`` patterns.

The plain-Python core of the Faust agent in :mod:`streams.runtime.hostping_agents` (testable without
Kafka). It keeps one :class:`streams.hostping.hostlink_batch.HostLinkProcessor` (Algorithm 1 history per
host, Hostping §4.2) fed from three inputs:

- ``host_topology.v1`` (topic ``hosts.topology``, compacted): each host's intra-host topology,
  healthy baseline matrix and, when read, its RNIC registers (:mod:`schemas.host_topology`);
- ``hostmetric.v1`` rows with ``metric == "bus_util"`` (topic ``hostmetrics.raw``): the bus
  monitor's utilisation 0..1 per intra-host link (``device`` is the link ``a->b``), which tells
  congestion (> 90 %) from failure (Hostping §4.4);
- ``loopback.v1`` batches: one round per host present in the batch.

Each named pattern (:func:`streams.hostping.hostpatterns.name_patterns`) becomes one ``verdict.v1`` row:
``kind`` is the pattern, ``location`` is ``host:link`` (or ``host:rnic``, ``host:switches``; the
host alone for host-wide patterns), the cause and the pattern's evidence are in ``evidence``,
impact is P2 (one host's intra-host problem) unless configured otherwise. Times are event
time: the round is the newest ``upload_ns`` of the host's rows, the verdict's window is the
20 s window holding it and ``emitted_ns`` is the round, so a replay gives equal rows and equal
verdict ids.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.arrow_pa import arrow_schema
from schemas.host_topology import HostTopologyError, parse_record
from schemas.verdicts import WINDOW_NS, verdict_id
from streams.hostping.hostlink_batch import HostLinkProcessor
from streams.hostping.hostpatterns import PatternMatch

log = logging.getLogger("fabricscope.hostping")

BUS_UTIL_METRIC = "bus_util"
DEFAULT_IMPACT = "P2"


@dataclass
class HostpingResult:
    """What one ``loopback.v1`` batch produced.

    Attributes:
        host_links: ``host_link.v1`` rows (``None`` when no host could be analysed).
        verdicts: ``verdict.v1`` rows (``None`` when no pattern was named).
        skipped: host -> reason, for hosts whose rows could not be analysed (no topology yet).
    """

    host_links: pa.Table | None = None
    verdicts: pa.Table | None = None
    skipped: dict[str, str] = field(default_factory=dict)


def _location(host: str, where: str) -> str:
    return host if where == host else f"{host}:{where}"


def _jsonable(x: object) -> object:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    return str(x)


class HostpingStream:
    """Per-worker Hostping state: topologies, baselines, bus utilisation and Algorithm 1 history.

    Args:
        impact: impact class of every Hostping verdict (R-Pingmesh §5 grades fabric problems;
            an intra-host bottleneck slows only the jobs on that host: P2 by default).
    """

    def __init__(self, impact: str = DEFAULT_IMPACT) -> None:
        self.impact = impact
        self.processor = HostLinkProcessor({}, {})
        self.bad_topologies = 0

    @property
    def hosts(self) -> list[str]:
        """Hosts with a registered topology and baseline."""
        return sorted(self.processor.topologies)

    def on_topology(self, table: pa.Table) -> None:
        """Apply ``host_topology.v1`` rows in order (the last per host wins).

        A changed topology drops the host's Algorithm 1 history (gray streaks of links that may
        no longer exist); a malformed row is logged and counted, the previous one stays.
        """
        cols = table.select(["host", "topology", "baseline", "rnic_config"]).to_pydict()
        for host, topo_js, base_js, cfg_js in zip(
            cols["host"], cols["topology"], cols["baseline"], cols["rnic_config"], strict=True
        ):
            try:
                rec = parse_record(host, topo_js, base_js, cfg_js)
            except (HostTopologyError, ValueError) as err:
                self.bad_topologies += 1
                log.error("host_topology.v1 for %s ignored: %s", host, err)
                continue
            p = self.processor
            if p.topologies.get(host) != rec.topology:
                p.histories.pop(host, None)
            p.topologies[host] = rec.topology
            p.baselines[host] = np.array(rec.baseline, dtype=float)
            if rec.rnic_config is None:
                p.rnic_config.pop(host, None)
            else:
                p.rnic_config[host] = rec.rnic_config

    def on_hostmetrics(self, table: pa.Table) -> None:
        """Keep the newest ``bus_util`` reading per (host, link) from ``hostmetric.v1`` rows."""
        t = table.filter(pc.equal(table["metric"], BUS_UTIL_METRIC))
        if t.num_rows == 0:
            return
        t = t.sort_by([("sample_ns", "ascending")])
        util = self.processor.bus_util
        for host, link, value in zip(t["host"].to_pylist(), t["device"].to_pylist(), t["value"].to_pylist(),
                                     strict=True):  # only bus readings: one per intra-host link
            util.setdefault(host, {})[link] = float(value)

    def process(self, table: pa.Table) -> HostpingResult:
        """Run one Algorithm 1 round per host in the ``loopback.v1`` batch.

        Hosts without a registered topology are skipped and named in ``skipped`` (the batch's
        other hosts are still analysed).
        """
        out = HostpingResult()
        if table.num_rows == 0:
            return out
        links: list[dict[str, object]] = []
        verdicts: list[dict[str, object]] = []
        g = table.group_by("host").aggregate([("upload_ns", "max"), ("status", "count"),
                                              ("bandwidth_gbps", "count")])
        for host, round_ns, tests, measured in zip(g["host"].to_pylist(), g["upload_ns_max"].to_pylist(),
                                                   g["status_count"].to_pylist(),
                                                   g["bandwidth_gbps_count"].to_pylist(), strict=True):
            if host not in self.processor.topologies:
                out.skipped[host] = (f"loopback rows for host {host!r} but no host_topology.v1 record on "
                                     "hosts.topology: publish the host's topology and baseline first")
                continue
            rows, named = self.processor.process(table.filter(pc.equal(table["host"], host)), int(round_ns))
            links += rows
            verdicts += [self._verdict_row(host, int(round_ns), v, int(tests), int(tests) - int(measured))
                         for v in named]
        if links:
            out.host_links = pa.Table.from_pylist(links, schema=arrow_schema("host_link.v1"))
        if verdicts:
            out.verdicts = pa.Table.from_pylist(verdicts, schema=arrow_schema("verdict.v1"))
        return out

    def _verdict_row(self, host: str, round_ns: int, v: PatternMatch, tests: int, failed: int) -> dict[str, object]:
        """One ``verdict.v1`` row for a named pattern.

        ``votes`` is 0 (Algorithm 1, not tomography votes, decides); ``confidence`` is 1 except for
        an RNIC-wide configuration problem the matrix cannot pin down (1 / its candidates);
        ``total_probes``/``failed_probes`` count the host's loopback tests in the round and those
        that gave no bandwidth.
        """
        ws = round_ns // WINDOW_NS * WINDOW_NS
        location = _location(host, v.location)
        candidates = v.evidence.get("candidates")
        confidence = 1.0 / len(candidates) if isinstance(candidates, list) and candidates else 1.0
        evidence = {"host": host, "pattern": v.pattern, "cause": v.cause, "where": v.location,
                    "round_ns": round_ns, **v.evidence}
        return {
            "verdict_id": verdict_id(ws, v.pattern, location, None, None),
            "window_start_ns": ws,
            "window_end_ns": ws + WINDOW_NS,
            "kind": v.pattern,
            "location": location,
            "votes": 0.0,
            "confidence": confidence,
            "failed_probes": failed,
            "total_probes": tests,
            "impact": self.impact,
            "job_id": None,
            "revision_of": None,
            "evidence": json.dumps(evidence, sort_keys=True, default=_jsonable),
            "emitted_ns": round_ns,
        }
