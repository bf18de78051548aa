"""The topic registry: every Kafka topic of the pipeline, in one visible place.

Partition counts are fixed here because Faust tables over a topic need a
changelog with the same count, so topics are created explicitly, never auto-created.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Topic:
    """A Kafka topic: name, partitions, what keys its messages, which schema they carry, and its config."""

    name: str
    partitions: int
    key: str
    schema: str
    config: dict[str, str] = field(default_factory=dict)
    doc: str = ""


_DAY_MS = 24 * 3600 * 1000
# One message is one agent upload (a host's 5 s batch: 8 RNICs x 150 probes/s = 6,000 rows, ~1 MB as
# Arrow). Kafka's 1 MiB default would refuse it: every client and topic
# of the pipeline allows this much instead.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

_RETAIN_7D = {"retention.ms": str(7 * _DAY_MS)}
_COMPACTED = {"cleanup.policy": "compact"}

PROBES_RAW = Topic("probes.raw", 4, "agent_id", "probe.v1", _RETAIN_7D,
                   "agent uploads, one batch each 5 s; read by the stream workers and by the store writer")
PATHS_TRACED = Topic("paths.traced", 4, "agent_id", "path.v1", _RETAIN_7D, "forward and ACK path traces")
LOOPBACK_RAW = Topic("loopback.raw", 1, "host", "loopback.v1", _RETAIN_7D, "Hostping loopback results")
HOSTMETRICS_RAW = Topic(
    "hostmetrics.raw", 1, "host", "hostmetric.v2", _RETAIN_7D,
    "hardware monitor samples (v2 names each reading's source; the sim source still sends v1)",
)
REGISTRY = Topic("registry", 1, "rnic", "registry.v1", _COMPACTED, "RNIC registry: GID, QPN per RNIC")
# 16 partitions: an agent reads only its host's partition (CRC-32 of the key, librdkafka's default partitioner),
# a sixteenth of every agent's lists rather than all of them (producers.pinglist_feed)
PINGLISTS = Topic("pinglists", 16, "agent_id", "pinglist.v1", _COMPACTED, "controller pinglists per agent")
WINDOW_PARTIALS = Topic(
    "window.partials", 1, "step", "window_step.v1", _RETAIN_7D,
    "one message per worker step: its window partials (link counts, failing paths), upload marks and raw "
    "offset ranges, to the one reducer (streams.pingmesh.step_message)",
)
WINDOWS_CLOSED = Topic(
    "windows.closed", 1, "window_start_ns", "json", _RETAIN_7D,
    "one JSON summary per analyzed window: timeouts by triage step, verdict count",
)
COVERAGE = Topic("coverage", 1, "job_id", "coverage.v1", {"retention.ms": str(30 * _DAY_MS)}, "blame coverage")
IDENTIFIABILITY = Topic(
    "identifiability", 1, "fabric", "identifiability.v1", {"retention.ms": str(30 * _DAY_MS)},
    "per window: links the probe plan in force can name (the closed loop's service)",
)
VERDICTS = Topic("verdicts", 1, "location", "verdict.v1", {"retention.ms": str(30 * _DAY_MS)})
HOST_LINKS = Topic("host_links", 1, "host", "host_link.v1", {"retention.ms": str(30 * _DAY_MS)})
JOB_METRICS = Topic(
    "jobs.metrics", 1, "job_id", "jobmetric.v1", _RETAIN_7D, "job throughput samples for impact grading"
)
HOSTS_TOPOLOGY = Topic(
    "hosts.topology", 1, "host", "host_topology.v1", _COMPACTED,
    "Hostping: each host's intra-host topology and healthy loopback baseline (last per host wins)",
)
LATENCY_BASELINES = Topic(
    "latency.baselines", 1, "", "flow_baseline.v1",
    # a whole snapshot every window (tens of MB at 10,000 RNICs) and readers want only the newest: keep an hour
    {"retention.ms": str(3600 * 1000), "segment.ms": str(600 * 1000)},
    "the reducer's per-flow P99 network RTT baselines, one whole snapshot after each window "
    "(raw retention `anomalies` reads the newest)",
)
HOSTS_INVENTORY = Topic(
    "hosts.inventory", 1, "host", "pci_function.v1", _COMPACTED,
    "Hostping: every PCI function each host agent found (one batch per host, last per host wins)",
)
DEADLETTER = Topic("deadletter", 1, "source_topic", "deadletter.v1", {"retention.ms": str(30 * _DAY_MS)})

ALL_TOPICS: tuple[Topic, ...] = (
    PROBES_RAW,
    PATHS_TRACED,
    LOOPBACK_RAW,
    HOSTMETRICS_RAW,
    REGISTRY,
    PINGLISTS,
    WINDOW_PARTIALS,
    VERDICTS,
    COVERAGE,
    IDENTIFIABILITY,
    WINDOWS_CLOSED,
    HOST_LINKS,
    JOB_METRICS,
    DEADLETTER,
    HOSTS_TOPOLOGY,
    LATENCY_BASELINES,
    HOSTS_INVENTORY,
)


def topic_name(topic: Topic, prefix: str = "") -> str:
    """The broker-side name: ``prefix`` lets tests and demos run side by side on one broker."""
    return f"{prefix}{topic.name}"
