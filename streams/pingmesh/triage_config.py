"""The triage's thresholds (R-Pingmesh §5), one frozen dataclass every step of :mod:`streams.pingmesh.triage`
reads; :class:`streams.pingmesh.analyzer.AnalyzerConfig` holds one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TriageConfig:
    """Thresholds of the triage; defaults are the paper's (§5) where it gives one.

    Attributes:
        host_down_ns: an agent silent longer than this is down (20 s).
        rnic_loss_ratio: share of ToR-mesh probes to an RNIC that must time out (0.10).
        rnic_min_probers: distinct non-suspect probers that must see the loss (2).
        rnic_charge_ns: how long an RNIC's timeouts stay charged to it (60 s).
        busy_host_veto: apply the busy-host veto (on).
        busy_delay_factor: host delay p50 over baseline that makes a host busy (10x).
        busy_min_delay_ns: and at least this p50 host delay (200 µs).
        busy_min_rnics: flagged RNICs of one host needed ("several": 2, or all if fewer).
        host_silent_ns: an agent that stopped uploading inside the window and has been silent
            this long (two missed 5 s uploads) is down when its RNICs time out too (10 s).
        min_failed: timeouts to a host's RNICs that make such a silent host down (2).
        host_share: share of a host's RNICs flagged together that makes the claim one about the
            host (``host_unreachable``), never one ``rnic`` verdict per RNIC (0.5).
        background_floor: per-probe background timeout rate assumed at least (1e-3; a healthy
            link loses 1e-5..1e-4 of packets and a probe crosses up to 8 links each way): the triage's
            tests and the window's leftovers; the vote's per-link test learns the rate from the window's
            probes, down to ``VoteConfig.test_floor``.
    """

    host_down_ns: int = 20_000_000_000
    rnic_loss_ratio: float = 0.10
    rnic_min_probers: int = 2
    rnic_charge_ns: int = 60_000_000_000
    busy_host_veto: bool = True
    busy_delay_factor: float = 10.0
    busy_min_delay_ns: int = 200_000
    busy_min_rnics: int = 2
    host_silent_ns: int = 10_000_000_000
    min_failed: int = 2
    host_share: float = 0.5
    background_floor: float = 1e-3
