"""JSON form of a host's intra-host topology, healthy baseline and RNIC registers (``host_topology.v1``).

A host agent publishes one ``host_topology.v1`` record per host to the compacted
``hosts.topology`` topic (:data:`schemas.topics.HOSTS_TOPOLOGY`); the host-link worker
(:mod:`streams.hostping.hostping_stream`) reads them back with these functions. Stdlib only, like the
rest of :mod:`schemas`: the baseline is a list of rows, not a numpy array.

Formats (stable, versioned by the record key)::

    topology    {"host": "h1", "kinds": {"cpu0": "cpu", ...}, "parent": {"sw0": "cpu0", ...},
                 "upi": [["cpu0", "cpu1"]]}
    baseline    {"rnics": ["rnic0", ...], "endpoints": ["gpu0", ..., "mem0"],
                 "gbps": [[195.0, ...], ...]}      # rows: rnics, columns: endpoints (Gb/s)
    rnic_config {"rnic0": {"slow_start": false, "tx_window": true}, ...}   # or null: not read
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.intrahost import IntraHostTopology

RECORD = "host_topology.v1"


class HostTopologyError(ValueError):
    """A ``host_topology.v1`` record is malformed; the message names the host and the field."""


def topology_to_dict(topo: IntraHostTopology) -> dict[str, object]:
    """The JSON-ready form of ``topo`` (see module docstring)."""
    return {
        "host": topo.host,
        "kinds": dict(sorted(topo.kinds.items())),
        "parent": dict(sorted(topo.parent.items())),
        "upi": [list(pair) for pair in topo.upi],
    }


def topology_from_dict(d: dict[str, object]) -> IntraHostTopology:
    """Rebuild an :class:`IntraHostTopology` from :func:`topology_to_dict` output.

    Raises:
        HostTopologyError: a key is missing or of the wrong type.
        ValueError: the topology itself is inconsistent (from ``IntraHostTopology``).
    """
    try:
        host = str(d["host"])
        kinds = {str(k): str(v) for k, v in dict(d["kinds"]).items()}  # type: ignore[call-overload]
        parent = {str(k): str(v) for k, v in dict(d["parent"]).items()}  # type: ignore[call-overload]
        upi = tuple((str(a), str(b)) for a, b in d.get("upi", []))  # type: ignore[attr-defined]
    except (KeyError, TypeError, ValueError) as err:
        raise HostTopologyError(
            f"topology JSON needs host, kinds, parent (and optional upi pairs): {type(err).__name__}: {err}"
        ) from None
    return IntraHostTopology(host, kinds, parent, upi)


@dataclass(frozen=True)
class HostTopologyRecord:
    """One decoded ``host_topology.v1`` row.

    Attributes:
        topology: the host's intra-host topology.
        baseline: healthy bandwidth (Gb/s), rows in ``topology.rnics`` order, columns in
            ``topology.endpoints`` order (reordered from the record's own labels).
        rnic_config: rnic -> ``{"slow_start": bool, "tx_window": bool}``, or ``None`` when not read.
    """

    topology: IntraHostTopology
    baseline: list[list[float]]
    rnic_config: dict[str, dict[str, bool]] | None = None


def record_columns(
    agent_id: str,
    upload_ns: int,
    topo: IntraHostTopology,
    baseline: Sequence[Sequence[float]],
    rnic_config: dict[str, dict[str, bool]] | None = None,
) -> dict[str, list[object]]:
    """Columns of one ``host_topology.v1`` row for :func:`schemas.arrow_nano.encode_columns`.

    ``baseline`` rows follow ``topo.rnics`` and columns ``topo.endpoints``.

    Raises:
        HostTopologyError: the baseline's shape does not match the topology.
    """
    rnics, endpoints = topo.rnics, topo.endpoints
    rows = [[float(x) for x in row] for row in baseline]
    if len(rows) != len(rnics) or any(len(r) != len(endpoints) for r in rows):
        raise HostTopologyError(
            f"{topo.host}: baseline must be {len(rnics)} rows (RNICs) x {len(endpoints)} columns (endpoints)"
        )
    return {
        "agent_id": [agent_id],
        "upload_ns": [upload_ns],
        "host": [topo.host],
        "topology": [json.dumps(topology_to_dict(topo), sort_keys=True)],
        "baseline": [json.dumps({"rnics": rnics, "endpoints": endpoints, "gbps": rows})],
        "rnic_config": [None if rnic_config is None else json.dumps(rnic_config, sort_keys=True)],
    }


def parse_record(host: str, topology: str, baseline: str, rnic_config: str | None) -> HostTopologyRecord:
    """Decode one ``host_topology.v1`` row's JSON columns.

    Raises:
        HostTopologyError: bad JSON, a topology of another host, or a baseline that misses an
            RNIC/endpoint of the topology or holds a non-positive value.
    """
    try:
        topo = topology_from_dict(json.loads(topology))
        base = json.loads(baseline)
        cfg = None if rnic_config is None else json.loads(rnic_config)
    except json.JSONDecodeError as err:
        raise HostTopologyError(f"{host}: host_topology.v1 holds invalid JSON: {err}") from None
    if topo.host != host:
        raise HostTopologyError(f"record keyed {host!r} carries the topology of {topo.host!r}")
    try:
        ri = {r: i for i, r in enumerate(base["rnics"])}
        ei = {e: j for j, e in enumerate(base["endpoints"])}
        gbps = base["gbps"]
        rows = [[float(gbps[ri[r]][ei[e]]) for e in topo.endpoints] for r in topo.rnics]
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise HostTopologyError(
            f"{host}: baseline must give Gb/s for every RNIC x endpoint of the topology; missing or bad: {err}"
        ) from None
    if any(not math.isfinite(x) or x <= 0 for row in rows for x in row):
        raise HostTopologyError(f"{host}: baseline bandwidths must be finite and > 0 Gb/s")
    return HostTopologyRecord(topo, rows, cfg)
