"""Network interface counters from sysfs: ``/sys/class/net/<if>/statistics/*``.

One hardware source, read from a root (``--path.sysfs``). The kernel's generic counters
(``rx_bytes``, ``tx_bytes``, ``rx_dropped``, ``rx_errors``, ...) exist for every netdev, RDMA or
not (Linux ``Documentation/ABI/testing/sysfs-class-net-statistics``); all are cumulative, so the
monitor publishes deltas between two reads (:func:`producers.hostping.hw_counters.deltas`).
"""

from __future__ import annotations

from producers.hostping.sysfs import SysfsSnapshot

NET_ROOT = "/sys/class/net"
#: Counters the monitor publishes; the rest of ``statistics/`` is rarely non-zero on RoCE hosts.
COUNTERS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped", "rx_errors",
            "tx_errors", "rx_crc_errors", "rx_missed_errors", "collisions")


def netdevs(snap: SysfsSnapshot) -> list[str]:
    """Interfaces under ``class/net`` except loopback (``lo``)."""
    return [n for n in snap.listdir(NET_ROOT) if n != "lo"]


def read(snap: SysfsSnapshot, names: list[str] | None = None) -> dict[str, dict[str, int]]:
    """``{netdev: {counter: value}}`` for :data:`COUNTERS` each interface exposes."""
    out: dict[str, dict[str, int]] = {}
    for dev in netdevs(snap) if names is None else names:
        vals = {}
        for c in COUNTERS:
            v = snap.read(f"{NET_ROOT}/{dev}/statistics/{c}")
            if v is not None and v.isdigit():
                vals[c] = int(v)
        if vals:
            out[dev] = vals
    return out
