"""A timeout starts a retrace wave on its RNIC: the RNIC's other 5-tuples traced before it are traced again
at their next probe (a rehash moved them), once per window; other RNICs' tuples keep their trace interval.
The responder traces each flow's ACK path once per reverse interval (20 s)."""

from __future__ import annotations

import socket
import time

from producers.probe_protocol import PendingProbe
from producers.udp_agent import RETRACE_AFTER_TIMEOUT_S, REVERSE_TRACE_INTERVAL_S, Agent

from conftest import free_port

S = 1_000_000_000


def _agent() -> Agent:
    """A prober with RNICs A1 (127.0.0.1) and B1 (127.0.0.2), three tuples each, 1 probe/s per tuple."""
    port = free_port(kind=socket.SOCK_DGRAM)
    agent = Agent({"host": "H1", "role": "prober", "dst_port": port, "trace_interval_s": 60,
                   "rnics": [{"name": "A1", "ip": "127.0.0.1"}, {"name": "B1", "ip": "127.0.0.2"}]},
                  sink=lambda *a: None)
    agent.set_entries([{"prober_rnic": rnic, "dst_ip": "127.0.0.1", "dst_port": port, "qpn": 9, "rate_pps": 1,
                        "src_port": free_port(kind=socket.SOCK_DGRAM)} for rnic in ("A1", "B1") for _ in range(3)])
    return agent


def _key(e: dict) -> tuple[str, int, str, int]:
    ip = "127.0.0.1" if e["prober_rnic"] == "A1" else "127.0.0.2"
    return (ip, int(e["src_port"]), e["dst_ip"], int(e["dst_port"]))


def _time_out(agent: Agent, e: dict) -> None:
    """The agent's callback for a probe of ``e`` that got no answer (t3-t6 unset)."""
    row = dict(e, src_ip=_key(e)[0])
    agent._on_finished([PendingProbe(row, 1, 0, 0, False)])


def test_a_timeout_retraces_its_rnic_s_tuples_at_their_next_probe_once_per_window() -> None:
    agent = _agent()
    try:
        t0 = time.monotonic_ns()
        agent.run_due(t0 + 2 * S)  # every tuple's first probe: each traced once
        first = {_key(e): agent._traced[_key(e)] for e in agent.entries}
        assert len(first) == 6
        a1 = [e for e in agent.entries if e["prober_rnic"] == "A1"]
        _time_out(agent, a1[0])  # traced under 5 s ago: no retrace of its own, but a wave on A1
        agent.run_due(t0 + 10 * S)  # every tuple due again
        after = {_key(e): agent._traced[_key(e)] for e in agent.entries}
        retraced = {k for k in after if after[k] != first[k]}
        assert retraced == {_key(e) for e in a1}  # A1's three tuples; B1's keep their 60 s interval

        _time_out(agent, a1[1])  # the same window: no second wave
        agent.run_due(t0 + 20 * S)
        assert {_key(e): agent._traced[_key(e)] for e in agent.entries} == after

        # a window later, a timeout starts the next wave
        agent._retrace_since["A1"] -= int(RETRACE_AFTER_TIMEOUT_S * S) + 1
        _time_out(agent, a1[2])
        agent.run_due(t0 + 30 * S)
        again = {_key(e): agent._traced[_key(e)] for e in agent.entries}
        assert {k for k in again if again[k] != after[k]} == {_key(e) for e in a1}
    finally:
        agent.engine.close()


def test_the_responder_traces_each_ack_path_once_per_window() -> None:
    """The interval the agent hands the responder's reverse tracing is one analysis window (20 s), as its
    config says, unless ``reverse_trace_interval_s`` is set."""
    assert REVERSE_TRACE_INTERVAL_S == 20.0
    agent = _agent()
    calls: list[int] = []
    agent.role = "responder"
    agent.tracing = True
    agent.engine.trace_reverse_paths = lambda since, interval, now: calls.append(interval) or agent.stop() or 0
    try:
        agent.run(duration_s=10)
    finally:
        agent.engine.close()
    assert calls == [20 * S]
