"""InFlight, the probes a prober has in flight: each times out at its own deadline, whatever order the
deadlines came in, and a probe finished before its deadline is not finished again when it falls due."""

from __future__ import annotations

from producers.probe_protocol import InFlight, PendingProbe


def _inflight() -> tuple[InFlight, list[int]]:
    done: list[int] = []
    return InFlight("H1", "H1", lambda row: None, on_finished=lambda ps: done.extend(p.seq for p in ps)), done


def test_probes_expire_at_their_deadlines_in_deadline_order() -> None:
    f, done = _inflight()
    f.add_many([PendingProbe({}, seq, 0, deadline, False) for seq, deadline in ((1, 100), (2, 100), (3, 250))])
    f.add(PendingProbe({}, 4, 0, 300, False))
    assert f.expire(99) == 0 and done == []
    assert f.expire(100) == 2 and done == [1, 2]
    assert f.expire(299) == 1 and done == [1, 2, 3]
    assert f.expire(300) == 1 and done == [1, 2, 3, 4] and f.pending == {}


def test_a_deadline_earlier_than_the_last_one_is_kept_in_order() -> None:
    f, done = _inflight()
    for seq, deadline in ((1, 300), (2, 100), (3, 200)):  # a caller's own clock (the verbs prober's now_mono)
        f.add(PendingProbe({}, seq, 0, deadline, False))
    assert f.expire(150) == 1 and done == [2]
    assert f.expire(250) == 1 and done == [2, 3]
    assert f.expire(300) == 1 and done == [2, 3, 1]


def test_a_finished_probe_is_not_finished_again_at_its_deadline() -> None:
    f, done = _inflight()
    a, b = PendingProbe({}, 1, 0, 100, False), PendingProbe({}, 2, 0, 100, False)
    f.add_many([a, b])
    f.finish_many([a])
    assert done == [1] and list(f.pending) == [2]
    assert f.expire(100) == 1 and done == [1, 2]
