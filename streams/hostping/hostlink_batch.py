"""Host-link worker logic over Arrow batches: ``loopback.v1`` -> bandwidth matrix -> ``host_link.v1``.

What a Faust agent on the ``loopback.raw`` topic calls per batch (the app wiring lives in
:mod:`streams.runtime.app`). Per host it keeps the Algorithm 1 history (consecutive gray rounds,
abnormal counts) so flapping is found across rounds. Rows are placed into the matrix with
vectorised Arrow/numpy indexing, never a per-row Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.intrahost import IntraHostTopology
from streams.hostping.hostlink import BandwidthMatrix, LinkHistory, algorithm1, busy_path_states, idle_path_states
from streams.hostping.hostpatterns import PatternMatch, host_link_rows, name_patterns


def matrix_from_loopback(table: pa.Table, topo: IntraHostTopology) -> BandwidthMatrix:
    """The bandwidth matrix of ``topo.host`` from ``loopback.v1`` rows with ``status == 'ok'``.

    Rows naming an RNIC or endpoint missing from the topology are ignored; a pair measured twice
    keeps its last value; untested pairs are NaN.
    """
    rnics, endpoints = tuple(topo.rnics), tuple(topo.endpoints)
    t = table.filter(pc.and_(pc.equal(table["host"], topo.host), pc.equal(table["status"], "ok")))
    ri = pc.index_in(t["rnic"], value_set=pa.array(rnics, pa.string())).to_numpy(zero_copy_only=False)
    ei = pc.index_in(t["dst_endpoint"], value_set=pa.array(endpoints, pa.string())).to_numpy(zero_copy_only=False)
    bw = t["bandwidth_gbps"].to_numpy(zero_copy_only=False).astype(float)
    ok = ~(np.isnan(ri.astype(float)) | np.isnan(ei.astype(float)) | np.isnan(bw))
    gbps = np.full((len(rnics), len(endpoints)), np.nan)
    gbps[ri[ok].astype(int), ei[ok].astype(int)] = bw[ok]
    return BandwidthMatrix(rnics, endpoints, gbps)


@dataclass
class HostLinkProcessor:
    """Per-host state between rounds; ``baselines[host]`` is the healthy matrix of that host model (Gb/s)."""

    topologies: dict[str, IntraHostTopology]
    baselines: dict[str, np.ndarray]
    bus_util: dict[str, dict[str, float]] = field(default_factory=dict)
    rnic_config: dict[str, dict[str, dict[str, bool]]] = field(default_factory=dict)
    histories: dict[str, LinkHistory] = field(default_factory=dict)

    def process(self, table: pa.Table, round_ns: int) -> tuple[list[dict[str, object]], list[PatternMatch]]:
        """One round per host present in the batch: ``host_link.v1`` rows and the named patterns.

        Raises:
            KeyError: a host in the batch has no topology or baseline (the message names it).
        """
        rows: list[dict[str, object]] = []
        verdicts: list[PatternMatch] = []
        for host in pc.unique(table["host"]).to_pylist():
            if host not in self.topologies or host not in self.baselines:
                raise KeyError(f"loopback rows for host {host!r} but no intra-host topology/baseline registered")
            topo, base = self.topologies[host], self.baselines[host]
            m = matrix_from_loopback(table, topo)
            modes = pc.unique(table.filter(pc.equal(table["host"], host))["mode"]).to_pylist()
            states = busy_path_states(m, base) if "busy" in modes else idle_path_states(m, base)
            rnd = algorithm1(topo, m, states, self.histories.get(host))
            self.histories[host] = rnd.history
            v = name_patterns(topo, m, base, rnd, self.bus_util.get(host), self.rnic_config.get(host))
            rows += host_link_rows(topo, rnd, v, round_ns)
            verdicts += v
        return rows, verdicts
