"""The Hostping sim source: named bottleneck patterns on Figure 2 sim hosts, as agent uploads.

What ``fabricscope source hostping-sim`` publishes (agent side: nanoarrow, never pyarrow):

1. per host, one ``host_topology.v1`` record (topology, healthy baseline, RNIC registers when
   the pattern is one that reading them resolves) to ``hosts.topology``;
2. per round and host, the bus monitor's utilisation per link as ``hostmetric.v1`` rows
   (``metric = "bus_util"``) to ``hostmetrics.raw``, then the round's ``loopback.v1`` batch
   (:func:`producers.hostping.loopback.measure` over :class:`SimBackend`, Eq. 1-3) to
   ``loopback.raw``.

Each pattern runs on its own host ``<prefix>-<pattern>``. The injected bottleneck never
travels: the worker sees only the matrix, the baseline, the topology and the bus utilisation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from producers.hostping import loopback
from producers.hostping.simhost import Bottleneck, SimBackend, SimHost
from schemas.arrow_nano import encode_columns
from schemas.host_topology import record_columns
from schemas.intrahost import figure2_topology


@dataclass(frozen=True)
class Pattern:
    """A sim scenario: bottlenecks of one Figure 2 host, the loopback mode, and whether the agent
    read the RNIC registers (``mlxreg`` ROCE_ACCL) so the worker can name slow start vs TX window."""

    bottlenecks: tuple[Bottleneck, ...]
    mode: str = "idle"
    config_read: bool = False


#: Pattern name (the verdict kind the worker should name) -> scenario (Hostping §6, Figures 8-10).
PATTERNS: dict[str, Pattern] = {
    "healthy": Pattern(()),
    "rnic_pcie_link_failure": Pattern((Bottleneck("cap", "sw2->rnic2", 67.0),)),
    "gpu_pcie_link_failure": Pattern((Bottleneck("cap", "sw2->gpu4", 50.0),)),
    "memory_channel_failure": Pattern((Bottleneck("scale", "cpu0->mem0", 0.4),)),
    "upi_failure": Pattern((Bottleneck("cap", "cpu0->cpu1", 60.0),)),
    "cpu_root_port_failure": Pattern((Bottleneck("cap", "cpu0->sw0", 80.0),)),
    "memory_channel_flapping": Pattern((Bottleneck("flap", "cpu0->mem0", 0.4),)),
    "acs_enabled": Pattern(tuple(Bottleneck("acs", f"sw{i}") for i in range(4))),
    "ats_disabled": Pattern((Bottleneck("ats_off", value=1.5),)),
    "rnic_config": Pattern((Bottleneck("slow_start", "rnic1", 0.6),)),
    "rnic_slow_start": Pattern((Bottleneck("slow_start", "rnic1", 0.6),), config_read=True),
    "rnic_small_tx_window": Pattern((Bottleneck("tx_window", "rnic1", 0.5),), config_read=True),
    "upi_overload": Pattern((Bottleneck("congest", "cpu0->cpu1", 0.5, util=0.95),), mode="busy"),
    "memory_channel_overload": Pattern((Bottleneck("congest", "cpu0->mem0", 0.5, util=0.97),), mode="busy"),
}


@dataclass(frozen=True)
class Upload:
    """One message to publish: topic (unprefixed name), schema key, Kafka key and Arrow IPC bytes."""

    topic: str
    schema: str
    key: str
    payload: bytes


def sim_host(pattern: str, host: str, seed: int = 1) -> SimHost:
    """The sim host of ``pattern`` named ``host``.

    Raises:
        ValueError: unknown pattern (the message lists the known ones).
    """
    if pattern not in PATTERNS:
        raise ValueError(f"unknown Hostping pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    return SimHost(figure2_topology(host), list(PATTERNS[pattern].bottlenecks), seed=seed)


def topology_upload(sim: SimHost, pattern: str, agent_id: str, upload_ns: int) -> Upload:
    """The host's ``host_topology.v1`` record (RNIC registers included when the pattern reads them)."""
    cfg = sim.rnic_config() if PATTERNS[pattern].config_read else None
    cols = record_columns(agent_id, upload_ns, sim.topo, sim.baseline().tolist(), cfg)
    return Upload("hosts.topology", "host_topology.v1", sim.topo.host, encode_columns("host_topology.v1", cols))


def bus_util_upload(sim: SimHost, agent_id: str, sample_ns: int) -> Upload:
    """The bus monitor's reading: one ``hostmetric.v1`` row per intra-host link (utilisation 0..1)."""
    util = sim.bus_util()
    links = sorted(util)
    n = len(links)
    cols: dict[str, list[object]] = {
        "agent_id": [agent_id] * n,
        "upload_ns": [sample_ns] * n,
        "host": [sim.topo.host] * n,
        "device": links,
        "metric": ["bus_util"] * n,
        "value": [float(util[k]) for k in links],
        "unit": ["ratio"] * n,
        "sample_ns": [sample_ns] * n,
    }
    return Upload("hostmetrics.raw", "hostmetric.v1", sim.topo.host, encode_columns("hostmetric.v1", cols))


def loopback_upload(sim: SimHost, pattern: str, agent_id: str, round_no: int, upload_ns: int) -> Upload:
    """One round of loopback tests (idle: full mesh; busy: affinitive) as a ``loopback.v1`` batch."""
    mode = PATTERNS[pattern].mode
    tests = loopback.plan(sim.topo, mode)
    if mode == "busy":  # the engine measures what the sim host's busy matrix says (service traffic included)
        bw = sim.matrix(round_no, mode="busy")
        eps, rnics = sim.endpoints, sim.rnics
        rows = [
            {
                "agent_id": agent_id,
                "upload_ns": upload_ns,
                "host": sim.topo.host,
                "rnic": t.rnic,
                "src_endpoint": t.src,
                "dst_endpoint": t.dst,
                "msg_bytes": loopback.LARGE_BYTES,
                "latency_ns": round(sim.lat_host_us(t.rnic, t.dst) * 1000),
                "bandwidth_gbps": float(bw[rnics.index(t.rnic), eps.index(t.dst)]),
                "mode": mode,
                "status": "ok",
            }
            for t in tests
        ]
    else:
        results = loopback.measure(SimBackend(sim, round_no=round_no), tests)
        rows = loopback.to_rows(results, agent_id, sim.topo.host, mode, upload_ns)
    cols = {name: [r[name] for r in rows] for name in rows[0]}
    return Upload("loopback.raw", "loopback.v1", sim.topo.host, encode_columns("loopback.v1", cols))


def sim_uploads(
    patterns: list[str], rounds: int, start_ns: int, interval_ns: int, host_prefix: str = "sim", seed: int = 1
) -> Iterator[tuple[int, Upload]]:
    """Every upload of a run, in publish order, as ``(round, upload)``; round ``-1`` is the topology.

    Round ``k`` happens at event time ``start_ns + k * interval_ns``; the bus reading of a round is
    published before its loopback batch, so the worker has it when the batch arrives.

    Raises:
        ValueError: an unknown pattern, or ``rounds`` < 1.
    """
    if rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {rounds}")
    sims = [(p, sim_host(p, f"{host_prefix}-{p}", seed + i)) for i, p in enumerate(patterns)]
    for p, sim in sims:
        yield -1, topology_upload(sim, p, f"agent-{sim.topo.host}", start_ns)
    for k in range(rounds):
        t = start_ns + k * interval_ns
        for p, sim in sims:
            agent = f"agent-{sim.topo.host}"
            yield k, bus_util_upload(sim, agent, t)
            yield k, loopback_upload(sim, p, agent, k, t)
