"""Faults the simulator can inject, each with its ground-truth label.

A fault is active on ``[start_ns, end_ns)``; ``None`` means from the beginning / for ever.
Links are named by their two end nodes in either order (``("A", "S3")``); an RNIC–ToR
cable is a link too (``("A3", "A")``), which is how a flapping RNIC port or a bad cable
is modelled. A link fault hits packets crossing the link in either direction.

``label()`` gives the truth record the scorer compares verdicts with (the analyzer never
reads it): ``kind`` is the verdict the analyzer should reach (``switch``, ``rnic``,
``host_down``, ``stale_qpn``, ``busy_host``, ``switch_latency``, ``rnic_latency``),
``location`` is an RNIC id, a host name or a link ``"a->b"`` (lower tier first), and
``fault`` the injected fault's own name.
"""

from __future__ import annotations

from dataclasses import dataclass

FOREVER = 2**62


@dataclass(frozen=True, kw_only=True)
class _Timed:
    start_ns: int | None = None
    end_ns: int | None = None

    @property
    def start(self) -> int:
        return -FOREVER if self.start_ns is None else self.start_ns

    @property
    def end(self) -> int:
        return FOREVER if self.end_ns is None else self.end_ns


@dataclass(frozen=True)
class _LinkFault(_Timed):
    a: str = ""
    b: str = ""


@dataclass(frozen=True)
class LinkDown(_LinkFault):
    """Every packet crossing the link ``a``–``b`` is dropped (a dead or blackholing port)."""

    fault = "link_down"


@dataclass(frozen=True)
class LossyLink(_LinkFault):
    """Each packet crossing the link is dropped with probability ``rate`` (aged fiber, corruption)."""

    rate: float = 0.05
    fault = "lossy_link"


@dataclass(frozen=True)
class PartialTupleLoss(_LinkFault):
    """A ``fraction`` of the 5-tuples crossing the link lose every packet; the rest none.

    Models a bad ECMP member or TCAM/ACL fault that only some hashes hit (why the paper
    replaces 20 % of the inter-ToR tuples every hour).
    """

    fraction: float = 0.25
    fault = "partial_5tuple_loss"


@dataclass(frozen=True)
class FlappingLink(_LinkFault):
    """The link is down for ``down_s`` seconds at the start of every ``period_s`` (a flapping port)."""

    period_s: float = 10.0
    down_s: float = 3.0
    fault = "flapping_link"


@dataclass(frozen=True)
class LatencyLink(_LinkFault):
    """No loss, but a packet crossing the link waits ``extra_us`` (exponential mean) with probability
    ``prob``: a congested or PFC-paused port that raises the RTT tail."""

    extra_us: float = 300.0
    prob: float = 0.3
    fault = "latency_link"


@dataclass(frozen=True)
class RnicDown(_Timed):
    """The RNIC sends and receives nothing; its agent keeps uploading for the host's other RNICs."""

    rnic: str = ""
    fault = "rnic_down"


@dataclass(frozen=True)
class HostDown(_Timed):
    """The host is off: its agent uploads nothing and its RNICs answer nothing."""

    host: str = ""
    fault = "host_down"


@dataclass(frozen=True)
class HostRestart(_Timed):
    """The host restarts at ``start_ns``: silent for ``downtime_s``, then back with new QPNs.

    Probers keep addressing the old QPNs for ``refresh_s`` more seconds (until their pinglist
    refresh), and those probes time out: ``stale_qpn`` noise (R-Pingmesh §5). ``end_ns`` is
    ignored.
    """

    host: str = ""
    downtime_s: float = 5.0
    refresh_s: float = 30.0
    fault = "host_restart"


@dataclass(frozen=True)
class BusyHost(_Timed):
    """CPU contention on a host (R-Pingmesh §6: 30 of the 50 RNIC reports).

    Its agent's responder and prober threads run late: every probe gets a delay of median
    ``delay_us`` (lognormal), and the threads stall outright, once every ``1 / stall_hz``
    seconds at a random moment, for ``stall_s`` seconds, during which ACKs and completions
    wait until the stall ends; a wait beyond 500 ms makes the probe a timeout. The defaults
    time out about 15 % of the probes to the host's RNICs ((1.0 - 0.5) s of every 3.3 s),
    together and briefly.
    """

    host: str = ""
    delay_us: float = 800.0
    stall_hz: float = 0.3
    stall_s: float = 1.0
    fault = "busy_host"


Fault = (
    LinkDown | LossyLink | PartialTupleLoss | FlappingLink | LatencyLink | RnicDown | HostDown | HostRestart | BusyHost
)
LINK_FAULTS = (LinkDown, LossyLink, PartialTupleLoss, FlappingLink, LatencyLink)
