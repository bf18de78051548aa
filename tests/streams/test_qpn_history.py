"""The registry over event time: a window judges its probes' QPNs against the registrations of its own time."""

from __future__ import annotations

from streams.pingmesh.qpn_history import QpnHistory

S = 1_000_000_000


def test_a_window_before_a_restart_keeps_the_old_qpn() -> None:
    h = QpnHistory()
    h.update([("A1", 100, 0), ("A2", 200, 0)])
    h.update([("A1", 101, 24 * S)])  # A1's host restarted at 24 s
    assert h.at(20 * S) == {"A1": 100, "A2": 200}
    assert h.at(40 * S) == {"A1": 101, "A2": 200}
    assert h.latest == {"A1": 101, "A2": 200}


def test_rows_out_of_order_and_repeated() -> None:
    h = QpnHistory()
    h.update([("A1", 101, 24 * S), ("A1", 100, 0), ("A1", 101, 30 * S)])
    assert h.latest == {"A1": 101}
    assert h.at(10 * S) == {"A1": 100}
    assert h.at(25 * S) == {"A1": 101}


def test_only_the_newest_known_before_it_was_registered() -> None:
    h = QpnHistory()
    h.update([("A1", 101, 24 * S)])  # replayed from the compacted topic: the newest QPN only
    assert h.at(10 * S) == {"A1": 101}


def test_superseded_qpns_are_forgotten_after_keep_ns() -> None:
    h = QpnHistory(keep_ns=60 * S)
    h.update([("A1", 100, 0), ("A1", 101, 10 * S)])
    assert h.at(5 * S) == {"A1": 100}
    h.update([("A1", 102, 100 * S)])  # 101 superseded at 100 s; 100 long before
    assert h.at(50 * S) == {"A1": 101}
    assert h.at(5 * S) == {"A1": 101}  # 100 forgotten: the oldest known stands in
    h.update([("A1", 103, 200 * S)])
    assert h._history == {"A1": [(100 * S, 102), (200 * S, 103)]}
