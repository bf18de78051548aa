"""Hostping: ``fabricscope hostping agent`` (the host agent on a real host) and ``fabricscope source
hostping-sim`` (Hostping sim hosts as a source: topology, bus readings, loopback).

The pipeline's ``source`` command (:mod:`fabricscope.cmd_pipeline`) dispatches on its KIND
argument; this module holds the ``hostping-sim`` kind: its options as Annotated types that
``source`` declares (``--pattern``, ``--rounds``, ``--round-interval``, ``--host-prefix``), and
:func:`hostping_source`, which runs it. An agent-only install, without the pipeline, gets the
``source`` of :data:`commands` instead, which knows only this kind.

    fabricscope source hostping-sim --pattern rnic_pcie_link_failure \\
        --pattern memory_channel_flapping --rounds 3 --no-realtime
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from fabricscope.settings import Settings, load
from fabricscope.stopping import stop_requested

console = Console(stderr=True)
KIND = "hostping-sim"
ROUND_NS = 5_000_000_000


def run_hostping_sim(
    s: Settings,
    patterns: list[str],
    rounds: int,
    interval_s: float,
    host_prefix: str,
    seed: int,
    realtime: bool,
    start_ns: int | None,
) -> int:
    """Publish each pattern's host topology, then ``rounds`` rounds of bus readings and loopback batches.

    Returns the number of messages published. Raises :class:`typer.BadParameter` for an unknown
    pattern and :class:`typer.Exit` (1) when the broker did not take every message within 30 s.
    """
    from producers.hostping.sim_source import PATTERNS, sim_uploads
    from producers.kafka_producer import AgentProducer
    from schemas.topics import ALL_TOPICS, topic_name

    unknown = [p for p in patterns if p not in PATTERNS]
    if unknown or not patterns:
        raise typer.BadParameter(f"unknown {unknown or 'no'} pattern; choose from: {', '.join(PATTERNS)}",
                                 param_hint="--pattern")
    if rounds < 1:
        raise typer.BadParameter(f"must be >= 1, got {rounds}", param_hint="--rounds")
    names = {t.name: topic_name(t, s.fabricscope_topic_prefix) for t in ALL_TOPICS}
    start = start_ns or (time.time_ns() // ROUND_NS) * ROUND_NS
    producer = AgentProducer(s.kafka_bootstrap, kafka_config=s.kafka_producer_config())
    stopping = stop_requested(signal.SIGTERM)
    sent, last_round = 0, -1
    for rnd, up in sim_uploads(patterns, rounds, start, int(interval_s * 1e9), host_prefix, seed):
        if stopping():
            break
        if realtime and rnd > last_round >= 0:
            producer.flush()
            time.sleep(interval_s)
        last_round = max(last_round, rnd)
        producer.publish(names[up.topic], up.payload, up.schema, key=up.key)
        sent += 1
    left = producer.flush()
    hosts = ", ".join(f"{host_prefix}-{p}" for p in patterns)
    console.print(f"hostping-sim: {sent} messages ({rounds} rounds) for {hosts}")
    if left:
        console.print(f"[red]{left} messages not delivered to {s.kafka_bootstrap}[/red]")
        raise typer.Exit(1)
    return sent


SOURCE_HELP = f"{KIND}: Hostping sim hosts (hosts.topology, hostmetrics.raw bus readings, loopback.raw)."
"""What the ``hostping-sim`` kind adds to the help of ``fabricscope source``."""

# The options of the hostping-sim kind, one Annotated type each: the pipeline's `source` and the
# agent-only `source` below declare them as parameters, so both show and parse them alike.
Patterns = Annotated[list[str] | None, typer.Option(
    "--pattern", help=f"{KIND}: Hostping pattern, repeatable, one sim host each "
                      "(rnic_pcie_link_failure, memory_channel_flapping, upi_overload, ...)")]
Rounds = Annotated[int, typer.Option("--rounds", help=f"{KIND}: loopback rounds per host")]
RoundInterval = Annotated[float, typer.Option("--round-interval",
                                              help=f"{KIND}: seconds of event time between rounds")]
HostPrefix = Annotated[str, typer.Option("--host-prefix", help=f"{KIND}: hosts are named PREFIX-PATTERN")]


def hostping_source(kind: str, patterns: list[str] | None, rounds: int, round_interval: float, host_prefix: str,
                    seed: int, realtime: bool, start_ns: int) -> bool:
    """The ``hostping-sim`` part of ``fabricscope source``: run it when ``kind`` is ``hostping-sim``.

    Returns True when it ran (the caller is done), False for another kind (settings not read).
    Raises :class:`typer.BadParameter` when ``--pattern`` is given to another kind, and what
    :func:`run_hostping_sim` raises.
    """
    if kind != KIND:
        if patterns:
            raise typer.BadParameter(f"only the {KIND} source takes it", param_hint="--pattern")
        return False
    run_hostping_sim(load(), list(patterns or ()), rounds, round_interval, host_prefix, seed, realtime,
                     start_ns or None)
    return True


commands = typer.Typer()
"""A ``source`` of its own (only ``hostping-sim``), for an agent-only install: ``fabricscope.cli``
adds it only where the pipeline's ``source`` (:mod:`fabricscope.cmd_pipeline`) cannot load."""


@commands.command("source", help=f"Publish agent uploads from a source. {SOURCE_HELP}")
def source(kind: str = typer.Argument(KIND, help=f"only {KIND} here"), seed: int = 1, realtime: bool = True,
           start_ns: int = 0, pattern: Patterns = None, rounds: Rounds = 3, round_interval: RoundInterval = 30.0,
           host_prefix: HostPrefix = "sim") -> None:
    """``fabricscope source hostping-sim`` without the pipeline; any other KIND is a usage error (exit 2)."""
    if kind != KIND:
        raise typer.BadParameter(f"unknown source {kind!r}; available: {KIND}", param_hint="KIND")
    try:
        import numpy  # noqa: F401 - the simulated hosts are numpy; an agent host has no need of it
    except ModuleNotFoundError:
        console.print(f"fabricscope source {KIND}: the simulated hosts need numpy, which this install lacks "
                      "(pip install 'fabricscope[pipeline]'); a real host runs `fabricscope hostping agent`",
                      highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(1) from None
    hostping_source(kind, pattern, rounds, round_interval, host_prefix, seed, realtime, start_ns)


def _capacities(specs: list[str]) -> dict[str, float]:
    out = {}
    for spec in specs:
        link, sep, val = spec.rpartition("=")
        try:
            gbps = float(val)
        except ValueError:
            gbps = -1.0
        if not sep or "->" not in link or gbps <= 0:
            raise typer.BadParameter(f"{spec!r}: expected LINK=GBPS with LINK like cpu0->mem0 and GBPS > 0",
                                     param_hint="--bus-capacity")
        out[link] = gbps
    return out


def run_agent(s: Settings, cfg: object, once: bool, as_json: bool, duration: float) -> None:
    """``fabricscope hostping agent``: ``--once`` prints one cycle; otherwise publish until SIGTERM/SIGINT
    (or ``duration`` seconds)."""
    import json

    from producers.hostping.agent import AgentConfig, HostAgent

    assert isinstance(cfg, AgentConfig)
    try:
        agent = HostAgent(cfg)
    except (FileNotFoundError, ValueError) as err:
        console.print(f"[red]hostping agent:[/red] {err}")
        raise typer.Exit(2) from None
    try:
        if agent.loopback_reason:
            console.print(f"hostping agent on {agent.disc.host}: {agent.loopback_reason}")
        if once:
            out = agent.once()
            if as_json:
                print(json.dumps(out, indent=1, default=str))
            else:
                d = out["discovery"]
                console.print(f"{agent.disc.host}: {len(d['pci_functions'])} PCI functions, "  # type: ignore[index]
                              f"{len(d['rnics'])} RNICs, {len(d['gpus_nvml'])} GPUs (NVML), "  # type: ignore[index]
                              f"{len(out['publish']['hostmetrics.raw'])} monitor rows; --json for all of it")  # type: ignore[index]
            return
        from producers.kafka_producer import AgentProducer
        from schemas.topics import ALL_TOPICS, topic_name

        names = {t.name: topic_name(t, s.fabricscope_topic_prefix) for t in ALL_TOPICS}
        producer = AgentProducer(s.kafka_bootstrap, kafka_config=s.kafka_client_config())
        stopping = stop_requested(signal.SIGTERM, signal.SIGINT)
        t_end = time.monotonic() + duration if duration else None
        cycles = agent.run(lambda topic, schema, key, payload: producer.publish(names[topic], payload, schema,
                                                                               key=key),
                           lambda: stopping() or (t_end is not None and time.monotonic() >= t_end))
        # stops within 2 s when asked: what the broker has not taken in 1.5 s is dropped and counted (the next
        # agent republishes inventory and topology at its start; monitor rows are per-second samples)
        left = producer.close(timeout=EXIT_FLUSH_S)
        console.print(f"hostping agent: {cycles} monitor cycles published for {agent.disc.host}")
        if left:
            console.print(f"[red]{left} messages not delivered to {s.kafka_bootstrap}[/red]")
            raise typer.Exit(1)
    finally:
        agent.close()


EXIT_FLUSH_S = 1.5
"""Seconds the agent waits at exit for the broker to take what it queued."""

hostping_app = typer.Typer(
    name="hostping", help="Hostping on a real host: the host agent (discovery, hardware monitor, loopback)."
)


@hostping_app.command("agent")
def agent(
    sysfs: str = typer.Option("/sys", "--path.sysfs", help="sysfs root (a captured tree works too)"),
    procfs: str = typer.Option("/proc", "--path.procfs", help="procfs root"),
    host: str = typer.Option(None, "--host", help="host name (default: the kernel's)"),
    once: bool = typer.Option(False, "--once", help="read one cycle, print it, publish nothing"),
    as_json: bool = typer.Option(False, "--json", help="with --once: everything one cycle would publish"),
    interval: float = typer.Option(1.0, help="hardware monitor period (s)"),
    status_interval: float = typer.Option(300.0, help="host status period (s): idle/busy by RNIC throughput"),
    bus_capacity: list[str] = typer.Option([], "--bus-capacity",
                                           help="LINK=GBPS capacity of a memory channel or UPI link for "
                                                "bus_util, e.g. cpu0->mem0=1228; repeatable"),
    baseline: str = typer.Option(None, "--baseline", help="healthy bandwidth matrix JSON {rnics, endpoints, "
                                                          "gbps}; default: the first idle round"),
    nvml: bool = typer.Option(True, help="read GPUs through NVML where present"),
    use_ethtool: bool = typer.Option(True, "--ethtool/--no-ethtool", help="read `ethtool -S` counters"),
    use_loopback: bool = typer.Option(True, "--loopback/--no-loopback", help="run loopback rounds (RNIC)"),
    duration: float = typer.Option(0, help="stop after this many seconds (0 = until SIGTERM)"),
) -> None:
    """Discover this host, publish its inventory and topology once, monitor it every second."""
    from producers.hostping.agent import AgentConfig

    if interval <= 0 or status_interval <= 0:
        raise typer.BadParameter("must be > 0", param_hint="--interval/--status-interval")
    cfg = AgentConfig(sysfs=Path(sysfs), procfs=Path(procfs), host=host, interval_s=interval,
                      status_interval_s=status_interval, bus_capacity_gbps=_capacities(bus_capacity),
                      use_nvml=nvml, use_ethtool=use_ethtool, use_loopback=use_loopback,
                      baseline_file=Path(baseline) if baseline else None)
    run_agent(load(), cfg, once, as_json, duration)
