"""Rule: RoCE runs on a priority without PFC, so congestion means loss and timeouts.

Field case 10: every byte on priority 0 (no other priority used, so RoCE is not on
the PFC-protected class), ``local_ack_timeout_err`` > 0 (retransmission timeouts)
and ``np_cnp_sent`` > 0 (DCQCN saw congestion). That is a QoS misconfiguration,
not an RNIC hardware fault. Hostping §2 ("bandwidth degradation"): in a lossy
network an intra-host or incast bottleneck shows as drops instead of Tx pause.
Counters are cumulative; a live monitor applies the rule to deltas.
"""

from __future__ import annotations

from producers.hostping.ethtool import EthtoolStats
from producers.hostping.findings import Finding
from producers.hostping.hw_counters import CONGESTION_COUNTERS, LOSS_COUNTERS, Port


def findings(stats: EthtoolStats | None, counters: dict[Port, dict[str, int]], line: str = "") -> list[Finding]:
    """``lossy_roce`` when one priority carries (nearly) all bytes, sees no PFC pause, and the RDMA
    counters show retransmission timeouts or sequence errors.

    Args:
        stats: ``ethtool -S`` counters of the RoCE netdev (``None`` if not captured).
        counters: hw_counters per (RDMA device, port); with several ports each is judged.
        line: source line for the finding.
    """
    if stats is None:
        return []
    loaded = stats.loaded_priorities()
    if len(loaded) != 1:
        return []
    prio = loaded[0]
    pc = stats.by_priority()[prio]
    pauses = {k: v for k, v in pc.items() if "pause" in k}
    if any(v > 0 for v in pauses.values()):
        return []
    out = []
    for (dev, port), c in sorted(counters.items()):
        loss = {k: c[k] for k in LOSS_COUNTERS if c.get(k, 0) > 0}
        cong = {k: c[k] for k in CONGESTION_COUNTERS if c.get(k, 0) > 0}
        if not loss:
            continue
        out.append(
            Finding(
                "lossy_roce",
                f"{stats.netdev} ({dev}/port{port})",
                "error",
                f"All traffic is on priority {prio} with no PFC pause frames, so RoCE is not on a lossless "
                f"(PFC-protected) class; {', '.join(f'{k}={v}' for k, v in loss.items())} are retransmission "
                "timeouts from drops"
                + (f" under congestion ({', '.join(f'{k}={v}' for k, v in cong.items())})" if cong else "")
                + ". Misconfiguration, not an RNIC fault: map RoCE to a PFC-enabled priority "
                "(DSCP/trust, mlnx_qos --pfc) on hosts and switches. Counters are cumulative: confirm with deltas.",
                {
                    "priority": prio,
                    "priority_counters": pc,
                    "pause_counters": pauses,
                    "loss": loss,
                    "congestion": cong,
                    "cumulative": True,
                },
                "config",
                line,
            )
        )
    return out
