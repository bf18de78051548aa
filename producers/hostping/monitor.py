"""Hardware monitor (Hostping §3.2, §5): anomaly metrics from counter deltas, host status, triggers.

Every 1 s the agent reads the RNIC counters (``ethtool -S``: bytes and per-priority pause
duration; RDMA ``hw_counters``) and turns two reads into rates; every 5 min it decides the
host status. Thresholds are the paper's: a host is idle when every RNIC's throughput is
below ``THP_LOW`` (5 %) of line rate, which triggers the full-mesh loopback; a Tx pause
duration ratio above ``PFC_HIGH`` (3 %, i.e. 30 ms of pause per second) triggers the
affinitive-only (busy) loopback.
"""

from __future__ import annotations

from dataclasses import dataclass

THP_LOW = 0.05
PFC_HIGH = 0.03
_BYTES = (("tx_bytes_phy", "rx_bytes_phy"), ("tx_bytes", "rx_bytes"))


@dataclass(frozen=True)
class RnicRates:
    """One RNIC over one interval: throughput (Gb/s), Tx pause duration ratio (0..1), drops/s."""

    rnic: str
    throughput_gbps: float
    tx_pause_ratio: float
    drops_per_s: float
    retrans_timeouts_per_s: float


def _delta(prev: dict[str, int], cur: dict[str, int], key: str) -> int:
    if key not in cur:
        return 0
    d = cur[key] - prev.get(key, cur[key])
    return d if d >= 0 else cur[key]  # counter reset: count from zero


def rates(rnic: str, prev: dict[str, int], cur: dict[str, int], dt_s: float) -> RnicRates:
    """Rates between two reads of the same RNIC's counters (ethtool -S and hw_counters merged).

    ``tx_prio<N>_pause_duration`` is in µs (mlx5); the ratio is the largest over priorities.

    Raises:
        ValueError: ``dt_s`` is not positive.
    """
    if dt_s <= 0:
        raise ValueError(f"{rnic}: interval between counter reads must be > 0 s, got {dt_s}")
    names = next((pair for pair in _BYTES if pair[0] in cur), _BYTES[1])
    byts = max(_delta(prev, cur, names[0]), _delta(prev, cur, names[1]))
    pause_us = max(
        (_delta(prev, cur, f"tx_prio{p}_pause_duration") for p in range(8)),
        default=0,
    )
    drops = _delta(prev, cur, "rx_discards_phy") + _delta(prev, cur, "rx_out_of_buffer")
    rto = _delta(prev, cur, "local_ack_timeout_err")
    return RnicRates(rnic, byts * 8 / dt_s / 1e9, pause_us / (dt_s * 1e6), drops / dt_s, rto / dt_s)


def host_status(r: list[RnicRates], line_rate_gbps: float, thp_low: float = THP_LOW) -> str:
    """``idle`` when every RNIC moves less than ``thp_low`` of line rate, else ``busy``."""
    return "idle" if all(x.throughput_gbps < thp_low * line_rate_gbps for x in r) else "busy"


def trigger(status: str, r: list[RnicRates], pfc_high: float = PFC_HIGH) -> str | None:
    """Which loopback to start: ``idle`` (full mesh) on an idle host, ``busy`` (affinitive only) when
    an RNIC's Tx pause ratio exceeds ``pfc_high``, else ``None``."""
    if status == "idle":
        return "idle"
    if any(x.tx_pause_ratio > pfc_high for x in r):
        return "busy"
    return None


def metric_rows(host: str, r: RnicRates, agent_id: str, sample_ns: int) -> list[dict]:
    """``hostmetric.v1`` rows (schemas.records.HOSTMETRIC_V1) for one RNIC's rates."""
    values = (
        ("throughput", r.throughput_gbps, "Gb/s"),
        ("tx_pause_ratio", r.tx_pause_ratio, "ratio"),
        ("drops", r.drops_per_s, "1/s"),
        ("local_ack_timeout_err", r.retrans_timeouts_per_s, "1/s"),
    )
    return [
        {
            "agent_id": agent_id,
            "upload_ns": sample_ns,
            "host": host,
            "device": r.rnic,
            "metric": m,
            "value": float(v),
            "unit": u,
            "sample_ns": sample_ns,
        }
        for m, v, u in values
    ]
