"""Record schemas of fabricscope, defined once as plain data.

Every record type has a name and an integer version (``probe.v1``). The field
lists here are the single source of truth: :mod:`schemas.arrow_pa` builds
pyarrow schemas from them (workers, sinks) and :mod:`schemas.arrow_nano`
builds nanoarrow schemas and batches from them (host agents, which never import
pyarrow; docs/design.md "Probe backends").

Type names are Arrow's: ``int64``, ``uint32``, ``string``, ``bool``,
``float64``. All timestamps are integer nanoseconds (``*_ns``) since the Unix
epoch on the clock named by the field's comment; differences are only taken
between readings of one clock (R-Pingmesh §4.2.1).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    """One column: Arrow type name, nullability and a one-line meaning."""

    name: str
    type: str
    nullable: bool = False
    doc: str = ""


@dataclass(frozen=True)
class RecordSchema:
    """A named, versioned list of fields; ``key`` is ``"probe.v1"``."""

    name: str
    version: int
    fields: tuple[Field, ...]

    @property
    def key(self) -> str:
        return f"{self.name}.v{self.version}"

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.key} has no field {name!r}; fields are {', '.join(self.names)}")


PINGLISTS = ("tor_mesh", "inter_tor", "service")
PROBE_STATUS = ("ok", "timeout")
TS_SOURCES = ("hardware", "software")

# Columns every agent upload carries, whatever the record.
_UPLOAD = (
    Field("agent_id", "string", doc="agent that uploaded the batch (one per host)"),
    Field("upload_ns", "int64", doc="prober host clock: when the batch was built"),
)

PROBE_V1 = RecordSchema(
    "probe",
    1,
    _UPLOAD
    + (
        Field("seq", "uint64", doc="per-agent probe sequence number"),
        Field("pinglist", "string", doc="tor_mesh | inter_tor | service"),
        Field("prober_host", "string"),
        Field("prober_rnic", "string"),
        Field("responder_host", "string"),
        Field("responder_rnic", "string"),
        Field("src_ip", "string"),
        Field("dst_ip", "string"),
        Field("src_port", "uint16", doc="UDP source port (RoCEv2: derived from the flow label)"),
        Field("dst_port", "uint16", doc="UDP destination port (RoCEv2: 4791)"),
        Field("flow_label", "uint32"),
        Field("traffic_class", "uint8", doc="DSCP of the job's queue"),
        Field("priority", "uint8", doc="PFC priority of the job's queue"),
        Field("qpn", "uint32", doc="responder QPN the probe was addressed to"),
        Field("gid_index", "uint16"),
        Field("job_id", "string", nullable=True, doc="service pinglist: the job whose 5-tuple is copied"),
        Field("t1", "int64", nullable=True, doc="prober host clock: probe posted"),
        Field("t2", "int64", nullable=True, doc="prober RNIC clock: probe sent"),
        Field("t3", "int64", nullable=True, doc="responder RNIC clock: probe received"),
        Field("t4", "int64", nullable=True, doc="responder RNIC clock: ACK1 sent"),
        Field("t5", "int64", nullable=True, doc="prober RNIC clock: ACK1 received"),
        Field("t6", "int64", nullable=True, doc="prober host clock: ACK1 polled"),
        Field("ts_source", "string", doc="hardware | software: the clock of t2..t5"),
        Field("status", "string", doc="ok | timeout (500 ms)"),
    ),
)

# probe.v1 plus the decomposition (R-Pingmesh §4.2.1), what workers send to sinks.
PROBE_ENRICHED_V1 = RecordSchema(
    "probe_enriched",
    1,
    PROBE_V1.fields
    + (
        Field("network_rtt_ns", "int64", nullable=True, doc="(t5-t2)-(t4-t3)"),
        Field("responder_delay_ns", "int64", nullable=True, doc="t4-t3"),
        Field("prober_delay_ns", "int64", nullable=True, doc="(t6-t1)-(t5-t2)"),
        Field("batch_id", "string", doc="identity of the source batch: topic/partition/offset"),
    ),
)

# The minute tier as the worker computes it (docs/design.md "Storage": the stream computes the minute tier).
# One row per (source batch, minute, pinglist, prober RNIC, responder RNIC): rows are keyed by the raw
# message they came from, so a worker replaying that message re-sends the same rows under the same
# identity and the store writer drops them (docs/storage.md "Exactly-once rows"). Histograms are the store's
# sparse log-scale buckets, floor(16 * log2(ns)) -> count (schemas/ddl/005_history.sql).
PROBE_MINUTE_V1 = RecordSchema(
    "probe_minute",
    1,
    (
        Field("minute", "int64", doc="start of the minute, s since the epoch (event time: t1, else upload_ns)"),
        Field("pinglist", "string"),
        Field("prober_rnic", "string"),
        Field("responder_rnic", "string"),
        Field("probes", "uint64", doc="probes of any status"),
        Field("timeouts", "uint64"),
        Field("rtt_hist", "map<uint16,uint64>", doc="network RTT histogram of the successful probes"),
        Field("responder_hist", "map<uint16,uint64>", doc="responder delay histogram"),
        Field("prober_hist", "map<uint16,uint64>", doc="prober delay histogram"),
        Field("batch_id", "string", doc="identity of the source batch: topic/partition/offset (not stored)"),
    ),
)

# The latency rule's per-flow baseline (streams.pingmesh.latency.update_baseline), as the reducer publishes it.
FLOW_BASELINE_V1 = RecordSchema(
    "flow_baseline",
    1,
    (
        Field("flow", "string", doc="pinglist|prober RNIC|responder RNIC|source port"),
        Field("baseline_ns", "float64", nullable=True, doc="EWMA of the flow's window P99 network RTT (ns)"),
        Field("windows", "int64", doc="windows that built the baseline"),
    ),
)

NO_ANSWER = "*"
"""A ``path.v1`` hop that did not answer (traceroute's mark): the agents write it, the path index reads it;
at the end of an incomplete trace it names the unknown next hop (``X,*``: link ``X->*``)."""

PATH_V1 = RecordSchema(
    "path",
    1,
    _UPLOAD
    + (
        Field("trace_ns", "int64", doc="tracer host clock: when the trace finished"),
        Field("direction", "string", doc="forward (probe path) | reverse (ACK path, traced by the responder)"),
        Field("src_rnic", "string"),
        Field("dst_rnic", "string"),
        Field("src_ip", "string"),
        Field("dst_ip", "string"),
        Field("src_port", "uint16"),
        Field("dst_port", "uint16"),
        Field("hops", "string", doc="comma-separated node names from source RNIC to destination RNIC; `*` for a "
              "hop that did not answer"),
        Field("complete", "bool", doc="every hop answered"),
    ),
)

VERDICT_V1 = RecordSchema(
    "verdict",
    1,
    (
        Field("verdict_id", "string"),
        Field("window_start_ns", "int64"),
        Field("window_end_ns", "int64"),
        Field("kind", "string", doc="host_down | stale_qpn | rnic | busy_host | switch | *_latency | undetermined"),
        Field("location", "string", doc="RNIC id, host id or link 'a->b'"),
        Field("votes", "float64", doc="tomography votes (normalised) or failing probes"),
        Field("confidence", "float64", doc="calibrated probability that the verdict is right"),
        Field("failed_probes", "int64"),
        Field("total_probes", "int64"),
        Field("impact", "string", doc="P0 | P1 | P2 | noise (probe noise: stale_qpn)"),
        Field("job_id", "string", nullable=True),
        Field("revision_of", "string", nullable=True, doc="verdict_id this record replaces"),
        Field("evidence", "string", doc="JSON object of counts behind the verdict"),
        Field("emitted_ns", "int64"),
    ),
)

# Per job and window: the coverage behind a `blame` answer (R-Pingmesh §5: no answer without coverage).
COVERAGE_V1 = RecordSchema(
    "coverage",
    1,
    (
        Field("window_start_ns", "int64"),
        Field("window_end_ns", "int64"),
        Field("job_id", "string"),
        Field("connections_expected", "int64", doc="the job's connections known so far"),
        Field("connections_probed", "int64", doc="of those, probed in this window"),
        Field("links_total", "int64", doc="links on the job's paths"),
        Field("links_covered", "int64", doc="of those, crossed by enough probes"),
        Field("agents_silent", "string", doc="comma-separated agents silent in the window"),
        Field("sufficient", "bool", doc="enough coverage to call the network innocent"),
    ),
)

# Per window: what the probe plan in force could name (fabricscope/loop_service.py; deTector's
# identifiability of a probe matrix): the fabric's, not a job's.
IDENTIFIABILITY_V1 = RecordSchema(
    "identifiability",
    1,
    (
        Field("window_start_ns", "int64"),
        Field("links", "int64", doc="switch links of the fabric"),
        Field("probed_tuples", "int64", doc="5-tuples of the plan in force (Eq. 1, builder, loop)"),
        Field("identifiable", "int64", doc="links covered and alone in their group"),
        Field("uncovered", "string", doc="comma-separated links no probe crosses"),
        Field("ambiguous_groups", "string", doc="groups of links no probe separates, ';'-separated, members '|'"),
        Field("structural_groups", "string", doc="of those, the groups no RNIC-to-RNIC 5-tuple can split"),
        Field("loop_entries", "int64", doc="entries of the closed loop in force"),
        Field("emitted_ns", "int64"),
    ),
)

# Job metric samples for impact grading (R-Pingmesh §5): e.g. training throughput.
JOBMETRIC_V1 = RecordSchema(
    "jobmetric",
    1,
    (
        Field("job_id", "string"),
        Field("sample_ns", "int64", doc="when the job measured it (ns)"),
        Field("value", "float64", doc="the job team's metric, e.g. samples/s"),
    ),
)

LOOPBACK_V1 = RecordSchema(
    "loopback",
    1,
    _UPLOAD
    + (
        Field("host", "string"),
        Field("rnic", "string"),
        Field("src_endpoint", "string", doc="memory region source: numa0, gpu3, ..."),
        Field("dst_endpoint", "string"),
        Field("msg_bytes", "uint32"),
        Field("latency_ns", "int64", nullable=True, doc="T_proc + Lat_host (Hostping Eq. 1)"),
        Field("bandwidth_gbps", "float64", nullable=True, doc="BW_host in Gb/s (Hostping Eq. 3)"),
        Field("mode", "string", doc="idle | busy"),
        Field("status", "string", doc="ok | error"),
    ),
)

HOSTMETRIC_V1 = RecordSchema(
    "hostmetric",
    1,
    _UPLOAD
    + (
        Field("host", "string"),
        Field("device", "string", doc="RNIC, PCI address, GPU or bus name"),
        Field("metric", "string", doc="e.g. tx_bytes, tx_pause_duration, pcie_link_speed_gtps"),
        Field("value", "float64"),
        Field("unit", "string"),
        Field("sample_ns", "int64"),
    ),
)

# hostmetric.v1 plus the reading's source, so a reader can tell a perf uncore counter from an NVML
# throughput or a sysfs link file (Hostping §3.4: vendor-independent bus monitor, sources named).
HOSTMETRIC_V2 = RecordSchema(
    "hostmetric",
    2,
    HOSTMETRIC_V1.fields
    + (
        Field("source", "string",
              doc="where the value was read: sysfs:<file>, perf:<pmu>/<event>, nvml:<call>, ethtool -S, derived"),
    ),
)

# One PCI function as the host agent found it under /sys/bus/pci/devices (the inventory behind the
# intra-host topology); a host's whole set is one batch on the compacted ``hosts.inventory`` topic.
PCI_FUNCTION_V1 = RecordSchema(
    "pci_function",
    1,
    _UPLOAD
    + (
        Field("host", "string"),
        Field("bdf", "string", doc="domain:bus:device.function, lower case (0000:3b:00.0)"),
        Field("class_code", "string", doc="PCI class code as sysfs prints it (0x020000)"),
        Field("kind", "string", doc="gpu | rnic | nic | bridge | nvme | other: from the class and RDMA presence"),
        Field("vendor_id", "string", doc="0x15b3 (Mellanox), 0x10de (NVIDIA), ..."),
        Field("device_id", "string"),
        Field("driver", "string", doc="bound kernel driver, '' if none"),
        Field("numa_node", "int32", doc="-1 when the platform reports none"),
        Field("parent_bdf", "string", doc="upstream bridge (switch or root port), '' at the root complex"),
        Field("path_to_root", "string", doc="comma-separated BDFs from the root port down to the parent"),
        Field("current_link_speed_gtps", "float64", nullable=True, doc="null: no link files (virtual function)"),
        Field("current_link_width", "int32", nullable=True),
        Field("max_link_speed_gtps", "float64", nullable=True),
        Field("max_link_width", "int32", nullable=True),
        Field("netdevs", "string", doc="comma-separated network interfaces of the function"),
        Field("rdma_devices", "string", doc="comma-separated RDMA devices (mlx5_0)"),
        Field("aer", "bool", doc="the function exposes aer_dev_* counters"),
    ),
)

HOST_LINK_V1 = RecordSchema(
    "host_link",
    1,
    (
        Field("host", "string"),
        Field("link", "string", doc="intra-host link 'a->b' (PCIe, memory channel, UPI)"),
        Field("state", "string", doc="normal | abnormal | gray | flapping"),
        Field("cause", "string",
              doc="failure | congestion | config | unknown (no bus counters on this host) | ''"),
        Field("round_ns", "int64"),
        Field("evidence", "string", doc="JSON"),
    ),
)

REGISTRY_V1 = RecordSchema(
    "registry",
    1,
    _UPLOAD
    + (
        Field("host", "string"),
        Field("rnic", "string"),
        Field("tor", "string"),
        Field("ip", "string"),
        Field("gid", "string"),
        Field("gid_index", "uint16"),
        Field("qpn", "uint32"),
    ),
)

# One host's intra-host topology and healthy loopback baseline (Hostping §4.1), published by its agent
# to a compacted topic keyed by host: the last record per host is the one the host-link worker uses.
HOST_TOPOLOGY_V1 = RecordSchema(
    "host_topology",
    1,
    _UPLOAD
    + (
        Field("host", "string"),
        Field("topology", "string", doc="JSON of schemas.intrahost.IntraHostTopology (schemas.host_topology)"),
        Field("baseline", "string", doc="JSON {rnics, endpoints, gbps}: the healthy bandwidth matrix (Gb/s)"),
        Field("rnic_config", "string", nullable=True,
              doc="JSON rnic -> {slow_start, tx_window} when the RNIC registers were read; null otherwise"),
    ),
)

# The controller's pinglists, one batch per agent on a compacted topic (R-Pingmesh §3.2, §4.1).
PINGLIST_V1 = RecordSchema(
    "pinglist",
    1,
    _UPLOAD
    + (
        Field("pinglist", "string", doc="tor_mesh | inter_tor | service"),
        Field("prober_host", "string"),
        Field("prober_rnic", "string"),
        Field("responder_host", "string"),
        Field("responder_rnic", "string"),
        Field("src_ip", "string"),
        Field("dst_ip", "string"),
        Field("src_port", "uint16", doc="UDP source port (from the flow label on RoCEv2)"),
        Field("dst_port", "uint16"),
        Field("flow_label", "uint32"),
        Field("traffic_class", "uint8", doc="DSCP of the job's queue: probes share its switch queues"),
        Field("priority", "uint8"),
        Field("qpn", "uint32", doc="the responder's current QPN"),
        Field("gid", "string"),
        Field("gid_index", "uint16"),
        Field("job_id", "string", nullable=True),
        Field("rate_pps", "float64", doc="probes per second of this entry"),
        Field("bounce_path", "string", nullable=True,
              doc="a bounced probe's climb (switches from its ToR up to where it turns, e.g. T1,P0S1,X2); "
                  "null for a probe to another RNIC"),
    ),
)

# Dead letters keep the record's reason next to the original payload.
DEADLETTER_V1 = RecordSchema(
    "deadletter",
    1,
    (
        Field("source_topic", "string"),
        Field("source_partition", "int32"),
        Field("source_offset", "int64"),
        Field("schema", "string", doc="schema key claimed by the message, '' if unreadable"),
        Field("reason", "string"),
        Field("row", "int64", nullable=True, doc="row index in the batch; null for the whole message"),
        Field("payload", "binary", nullable=True, doc="the bad rows as an Arrow IPC stream, or the raw bytes"),
        Field("received_ns", "int64"),
    ),
)

SCHEMAS: dict[str, RecordSchema] = {
    s.key: s
    for s in (
        PROBE_V1,
        PROBE_ENRICHED_V1,
        PROBE_MINUTE_V1,
        FLOW_BASELINE_V1,
        PATH_V1,
        VERDICT_V1,
        COVERAGE_V1,
        IDENTIFIABILITY_V1,
        JOBMETRIC_V1,
        LOOPBACK_V1,
        HOSTMETRIC_V1,
        HOSTMETRIC_V2,
        PCI_FUNCTION_V1,
        HOST_LINK_V1,
        REGISTRY_V1,
        PINGLIST_V1,
        DEADLETTER_V1,
        HOST_TOPOLOGY_V1,
    )
}


class UnknownSchemaError(ValueError):
    """A message names a schema or version this build does not know."""


def lookup(key: str) -> RecordSchema:
    """Return the schema registered as ``key`` (``"probe.v1"``).

    Raises:
        UnknownSchemaError: ``key`` is not registered; the message lists the known keys.
    """
    try:
        return SCHEMAS[key]
    except KeyError:
        raise UnknownSchemaError(
            f"unknown schema {key!r}; this build knows {', '.join(sorted(SCHEMAS))}"
        ) from None
