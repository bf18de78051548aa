"""The verbs backend's logic around the device: GRH unpacking, ACK matching, clocks, timeouts.

The completions are fed by hand with known cycle counts, and the device layer (pyverbs) is
injected (a stand-in ``pyverbs`` package in ``sys.modules``), so every test means the same on a
host with an RNIC, with rxe/siw, or with neither.
"""

from __future__ import annotations

import ipaddress
import sys
import types

import pytest

from producers.udp_wire import ACK1, ACK2, PROBE, Packet
from producers.verbs_prober import (
    GRH_BYTES,
    DeviceClock,
    VerbsProtocol,
    VerbsUnavailable,
    list_devices,
    unpack_recv,
)

A_GID, B_GID = "::ffff:10.1.1.2", "::ffff:10.2.1.2"


def grh(src_gid: str, dst_gid: str, flow_label: int) -> bytes:
    """A RoCEv2 GRH: version 6, traffic class 0, flow label, then the GIDs (bytes 8..40)."""
    head = ((6 << 28) | flow_label).to_bytes(4, "big") + bytes(4)
    return head + ipaddress.IPv6Address(src_gid).packed + ipaddress.IPv6Address(dst_gid).packed


def test_device_clock_converts_cycles_exactly() -> None:
    cx6 = DeviceClock(156_250)  # ConnectX: 156.25 MHz core clock
    assert cx6.to_ns(156_250) == 1_000_000  # 156250 cycles = 1 ms
    assert cx6.to_ns(1) == 6  # 6.4 ns, floored
    assert DeviceClock(1_000_000).to_ns(123_456_789) == 123_456_789
    with pytest.raises(ValueError, match="no clock rate"):
        DeviceClock(0)


def test_grh_unpacking() -> None:
    g = grh(A_GID, B_GID, 0xABCDE)
    assert len(g) == GRH_BYTES
    gid, fl, pkt = unpack_recv(g + Packet(PROBE, 9, 77).encode())
    assert (gid, fl, pkt) == (A_GID, 0xABCDE, Packet(PROBE, 9, 77))
    assert unpack_recv(g) == ("", 0, None)


def test_probe_ack1_ack2_give_each_difference_on_one_device_clock() -> None:
    rows: list[dict] = []
    prober = VerbsProtocol("H1", "H1", "A1", DeviceClock(1_000_000), qpn=0x100, on_probe=rows.append)
    resp = VerbsProtocol("H3", "H3", "B1", DeviceClock(156_250), qpn=0x200, allowed_gids={A_GID})
    entry = {
        "prober_rnic": "A1",
        "responder_rnic": "B1",
        "dst_ip": "10.2.1.2",
        "src_ip": "10.1.1.2",
        "gid": B_GID,
        "qpn": 0x200,
        "flow_label": 0x1234,
    }
    send = prober.probe(entry)
    assert (send.gid, send.qpn, send.flow_label, send.packet.kind) == (B_GID, 0x200, 0x1234, PROBE)
    # Prober clock at 1 GHz: probe leaves at 1_000_000 cycles (1 ms).
    assert prober.on_send_cqe(send.ref, 1_000_000) == []
    # Responder clock at 156.25 MHz: probe in at 15_625_000 cycles (100 ms), ACK1 out 1 ms later.
    [ack1] = resp.on_recv_cqe(grh(A_GID, B_GID, 0x1234) + send.packet.encode(), 0x100, 15_625_000)
    assert (ack1.gid, ack1.qpn, ack1.flow_label, ack1.packet.kind) == (A_GID, 0x100, 0x1234, ACK1)
    [ack2] = resp.on_send_cqe(ack1.ref, 15_625_000 + 156_250)
    assert ack2.packet.kind == ACK2 and (ack2.packet.t3, ack2.packet.t4) == (100_000_000, 101_000_000)
    # ACK1 back at the prober 1.02 ms after the probe left: network RTT 20 µs.
    prober.on_recv_cqe(grh(B_GID, A_GID, 0x1234) + ack1.packet.encode(), 0x200, 2_020_000)
    assert rows == []  # waits for ACK2
    prober.on_recv_cqe(grh(B_GID, A_GID, 0x1234) + ack2.packet.encode(), 0x200, 2_030_000)
    [row] = rows
    assert row["status"] == "ok" and row["ts_source"] == "hardware"
    assert (row["t2"], row["t3"], row["t4"], row["t5"]) == (1_000_000, 100_000_000, 101_000_000, 2_020_000)
    assert (row["t5"] - row["t2"]) - (row["t4"] - row["t3"]) == 20_000
    assert row["t1"] <= row["t6"] and prober.pending == {}


def test_timeouts_stale_qpn_unregistered_and_foreign_acks() -> None:
    rows: list[dict] = []
    prober = VerbsProtocol("H1", "H1", "A1", DeviceClock(1_000_000), qpn=0x100, on_probe=rows.append)
    resp = VerbsProtocol("H3", "H3", "B1", DeviceClock(1_000_000), qpn=0x200, allowed_gids={A_GID})
    entry = {"prober_rnic": "A1", "dst_ip": "10.2.1.2", "src_ip": "10.1.1.2", "gid": B_GID, "qpn": 0x1FF}
    send = prober.probe(entry, now_mono=0)
    prober.on_send_cqe(send.ref, 5)
    # Addressed to the responder's old QPN: silently dropped, as a UD QP that no longer exists.
    assert resp.on_recv_cqe(grh(A_GID, B_GID, 0) + send.packet.encode(), 0x100, 10) == []
    assert resp.counters["dropped_stale_qpn"] == 1
    # An unregistered source is never answered (no reflection at third parties).
    assert resp.on_recv_cqe(grh("::ffff:192.0.2.1", B_GID, 0) + send.packet.encode(), 0x100, 10) == []
    assert resp.counters["dropped_unregistered"] == 1
    # An ACK1 from another GID with the same seq does not complete the probe.
    forged = Packet(ACK1, send.packet.seq, 0x1FF, 0x100)
    prober.on_recv_cqe(grh("::ffff:10.3.1.2", A_GID, 0) + forged.encode(), 0x300, 20)
    assert prober.expire(now_mono=499_999_999) == 0
    assert prober.expire(now_mono=500_000_000) == 1
    [row] = rows
    assert row["status"] == "timeout" and row["t2"] == 5 and row["t5"] is None and row["t3"] is None


class _RdmaError(Exception):
    pass


def _inject_pyverbs(monkeypatch: pytest.MonkeyPatch, devices: object) -> None:
    """Install a stand-in ``pyverbs``: ``None`` = not installed; an exception = the device query
    fails with it; else the device list (objects with a ``name``) ``get_device_list`` returns."""
    if devices is None:
        monkeypatch.setitem(sys.modules, "pyverbs", None)  # import fails as when not installed
        return
    pkg = types.ModuleType("pyverbs")
    pkg.__path__ = []  # a package
    dev = types.ModuleType("pyverbs.device")
    err = types.ModuleType("pyverbs.pyverbs_error")
    err.PyverbsRDMAError = _RdmaError

    def get_device_list() -> list:
        if isinstance(devices, Exception):
            raise devices
        return list(devices)  # type: ignore[call-overload]

    dev.get_device_list = get_device_list
    pkg.device, pkg.pyverbs_error = dev, err
    for name, mod in (("pyverbs", pkg), ("pyverbs.device", dev), ("pyverbs.pyverbs_error", err)):
        monkeypatch.setitem(sys.modules, name, mod)


@pytest.mark.parametrize(("devices", "message"), [
    (None, "python3-pyverbs"),
    ([], "no RDMA device on this host; use --source udp"),
    (_RdmaError("Failed to get devices list"), r"no RDMA device on this host \(Failed to get devices list\)"),
], ids=["no pyverbs", "no device", "query fails"])
def test_without_a_device_the_device_layer_says_what_to_do(monkeypatch, devices, message) -> None:
    _inject_pyverbs(monkeypatch, devices)
    with pytest.raises(VerbsUnavailable, match=message):
        list_devices()


def test_device_names_come_from_the_device_layer(monkeypatch) -> None:
    _inject_pyverbs(monkeypatch, [types.SimpleNamespace(name=b"mlx5_0"), types.SimpleNamespace(name="rxe0")])
    assert list_devices() == ["mlx5_0", "rxe0"]


@pytest.mark.parametrize("devices", [None, []], ids=["no pyverbs", "no device"])
def test_agent_with_verbs_backend_refuses_without_a_device(monkeypatch, devices) -> None:
    from producers.udp_agent import Agent

    _inject_pyverbs(monkeypatch, devices)
    cfg = {"host": "H1", "backend": "verbs", "rnics": [{"name": "A1", "ip": "10.1.1.2", "ibdev": "mlx5_0"}]}
    with pytest.raises(VerbsUnavailable, match="--source udp|pyverbs"):
        Agent(cfg)
