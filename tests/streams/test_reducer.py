"""The window reducer: per-partition watermarks, idleness, and hosts not heard from yet at start-up."""

from __future__ import annotations

import pyarrow as pa

from schemas.arrow_pa import arrow_schema
from streams.pingmesh.reducer import UploadMark, WindowReducer

S = 1_000_000_000
T0 = 1_000 * 20 * S


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _registry(hosts: list[str]) -> pa.Table:
    n = len(hosts)
    return pa.Table.from_pydict({
        "agent_id": hosts, "upload_ns": [T0] * n, "host": hosts, "rnic": [f"{h}-r0" for h in hosts],
        "tor": ["A"] * n, "ip": ["10.0.0.1"] * n, "gid": ["g"] * n, "gid_index": [3] * n, "qpn": [7] * n,
    }, schema=arrow_schema("registry.v1"))


def test_registered_host_not_heard_yet_counts_from_the_first_upload_seen():
    r = WindowReducer(partitions=1)
    r.on_registry(_registry(["H1", "H2"]))
    r.add(UploadMark("H1", T0 + 7 * S, "H1"), None, None)
    r.add(UploadMark("H1", T0 + 12 * S, "H1"), None, None)
    assert r.host_last_upload() == {"H1": T0 + 12 * S, "H2": T0 + 7 * S}


def test_a_lagging_partition_holds_the_watermark_until_it_catches_up_or_goes_idle():
    clock = Clock()
    r = WindowReducer(partitions=2, idle_s=30.0, clock=clock)
    r.open_windows.add(T0)
    # partition 0 races 60 s ahead (a replay); partition 1 has uploaded only to 5 s
    r.add(UploadMark("H1", T0 + 60 * S, "H1"), None, None, partition=0)
    r.add(UploadMark("H2", T0 + 5 * S, "H2"), None, None, partition=1)
    assert r.watermark() == T0 + 5 * S
    assert r.close_ready() == []
    r.add(UploadMark("H2", T0 + 25 * S, "H2"), None, None, partition=1)
    assert r.watermark() == T0 + 25 * S
    assert r.closed_before == T0 + 20 * S  # the window [T0, T0+20 s) closed (no partials: nothing analyzed)
    # an unseen partition holds everything back until idle_s of processing time has passed
    r2 = WindowReducer(partitions=2, idle_s=30.0, clock=clock)
    r2.add(UploadMark("H1", T0 + 60 * S, "H1"), None, None, partition=0)
    assert r2.watermark() is None
    clock.now += 31
    r2.add(UploadMark("H1", T0 + 61 * S, "H1"), None, None, partition=0)
    assert r2.watermark() == T0 + 61 * S  # partition 1 never spoke: it no longer holds the watermark


def test_a_step_holds_the_watermark_at_every_partition_it_covers():
    from streams.pingmesh.step_message import Step

    class Recording(WindowReducer):
        def close_ready(self) -> list:
            h2_then = self.host_last_upload().get("H2")
            out = super().close_ready()
            if self.closed_before == T0 + 20 * S and not hasattr(self, "h2_at_close"):
                self.h2_at_close = h2_then  # what the host-down rule saw when the window closed
            return out

    clock = Clock()
    r = Recording(partitions=2, idle_s=10.0, clock=clock)
    r.add(UploadMark("H1", T0 + 5 * S, "H1"), None, None, partition=0)
    r.add(UploadMark("H2", T0 + 10 * S, "H2"), None, None, partition=1)
    r.open_windows.add(T0)
    clock.now += 40  # nothing at all for 40 s (a worker restarting), then one step of both partitions
    r.apply_step(Step({0: (1, 9), 1: (1, 9)}, {}, [(0, UploadMark("H1", T0 + 25 * S, "H1")),
                                                    (1, UploadMark("H2", T0 + 30 * S, "H2"))]))
    # H1's mark comes first; partition 1 is in the same step, so it holds the window until H2's mark is in
    assert r.h2_at_close == T0 + 30 * S


def test_a_partition_silent_while_others_go_on_is_idle():
    clock = Clock()
    r3 = WindowReducer(partitions=2, idle_s=10.0, clock=clock)
    r3.add(UploadMark("H1", T0 + 5 * S, "H1"), None, None, partition=0)
    r3.add(UploadMark("H2", T0 + 5 * S, "H2"), None, None, partition=1)
    for k in range(1, 4):  # partition 0 goes on every 4 s; partition 1 is silent for 12 s: idle
        clock.now += 4
        r3.add(UploadMark("H1", T0 + (5 + 5 * k) * S, "H1"), None, None, partition=0)
    assert r3.watermark() == T0 + 20 * S


def test_when_all_input_ended_a_partition_whose_agents_died_holds_nothing():
    clock = Clock()
    r = WindowReducer(partitions=2, idle_s=10.0, clock=clock)
    r.open_windows.update({T0, T0 + 20 * S, T0 + 40 * S})
    r.add(UploadMark("H5", T0 + 35 * S, "H5"), None, None, partition=1)  # its only agent, then it died
    r.add(UploadMark("H1", T0 + 55 * S, "H1"), None, None, partition=0)
    r.add(UploadMark("H3", T0 + 60 * S, "H3"), None, None, partition=0)
    assert r.watermark() == T0 + 35 * S and r.closed_before == T0 + 20 * S  # both partitions active
    clock.now += 10  # then no input at all: partition 1 (35 s) is over 20 s behind the newest (60 s)
    assert r.watermark() == T0 + 55 * S
    assert [ws for ws, _ in r.close_ready()] == [] and r.closed_before == T0 + 40 * S  # no partials: none analyzed
    r2 = WindowReducer(partitions=2, idle_s=10.0, clock=clock)
    r2.add(UploadMark("H5", T0 + 45 * S, "H5"), None, None, partition=1)  # 15 s behind: maybe lagging
    r2.add(UploadMark("H1", T0 + 60 * S, "H1"), None, None, partition=0)
    clock.now += 10
    assert r2.watermark() == T0 + 45 * S


def _sim_steps(rounds: int) -> list[list[tuple[list, bytes]]]:
    """The ``window.partials`` messages of Panel 1 with a dead switch link: one step per agent upload, raw
    partition 0, offsets 0, 1, 2, ... (what a worker taking one message per step sends)."""
    from producers.sim import LinkDown, Simulator
    from producers.sim.fabrics import panel1
    from schemas.arrow_pa import table_from_columns
    from schemas.probe_rows.decompose import decompose
    from streams.pingmesh.path_index import PathIndex
    from streams.pingmesh.reducer import worker_messages

    sim, paths, steps = Simulator(panel1(), seed=1, faults=[LinkDown("A", "S3")]), PathIndex(), []
    for k in range(rounds):
        for _agent, probes, path_cols in sim.upload_batches(T0 + k * 5 * S):
            paths.update(table_from_columns("path.v1", path_cols))
            enriched = decompose(table_from_columns("probe.v1", probes), f"probes.raw/0/{len(steps)}")
            steps.append(worker_messages(enriched, paths, 20 * S, {0: (len(steps), len(steps))}))
    return steps


STEPS = _sim_steps(10)  # 6 agents: 60 steps, the first two windows close


def _feed(r: WindowReducer, msgs: list[tuple[list, bytes]]) -> list:
    out = []
    for headers, value in msgs:
        out += r.receive(dict(headers), value)
    return out


def test_a_replayed_step_and_a_zombies_resend_are_merged_once():
    def run(replay: bool) -> tuple[list, WindowReducer]:
        r, out = WindowReducer(partitions=1, clock=lambda: 0.0), []
        for i, msgs in enumerate(STEPS):
            out += _feed(r, msgs)
            if replay and i == 9:  # a restarted worker re-sends steps 8 and 9 (a new step id, same ranges)
                from streams.pingmesh.step_message import decode_body, encode_step, part_of

                for old in STEPS[8:10]:
                    part = part_of(dict(old[0][0]))
                    out += _feed(r, encode_step(decode_body(part.ranges, b"".join(v for _, v in old))))
            if replay and i == 20:  # a zombie worker's late send of step 3, byte for byte
                out += _feed(r, STEPS[3])
        return [(ws, res.verdicts.to_pylist()) for ws, res in out], r

    (once, r1), (twice, r2) = run(False), run(True)
    assert [ws for ws, _ in once] == [T0, T0 + 20 * S]
    assert twice == once
    v = once[0][1][0]
    assert (v["kind"], v["location"]) == ("switch", "A->S3")
    assert r1.dropped_steps == {"replay": 0, "overlap": 0}
    assert r2.dropped_steps == {"replay": 3, "overlap": 0}
    assert r2.raw_merged == r1.raw_merged == {0: len(STEPS) - 1}


def test_a_step_that_overlaps_merged_offsets_is_dropped_and_counted():
    from streams.pingmesh.step_message import Step

    r = WindowReducer(partitions=2, clock=lambda: 0.0)
    mark = UploadMark("H1", T0 + 5 * S, "H1")
    assert r.apply_step(Step({0: (0, 4), 1: (0, 2)}, {}, [(0, mark)])) == []
    assert r.raw_merged == {0: 4, 1: 2}
    r.apply_step(Step({0: (3, 8)}, {}, [(0, mark)]))  # a zombie's step straddling what is merged
    r.apply_step(Step({0: (5, 8), 1: (1, 2)}, {}, [(0, mark)]))  # new on 0, but 1 overlaps: the whole step
    r.apply_step(Step({0: (2, 4), 1: (0, 2)}, {}, [(0, mark)]))  # all merged before
    assert r.dropped_steps == {"replay": 1, "overlap": 2}
    assert r.raw_merged == {0: 4, 1: 2}
    r.apply_step(Step({0: (5, 8)}, {}, [(0, mark)]))
    r.apply_step(Step({1: (3, 3)}, {}, [(1, mark)]))
    assert r.raw_merged == {0: 8, 1: 3} and r.dropped_steps == {"replay": 1, "overlap": 2}


def test_a_step_in_parts_is_applied_once_all_parts_are_in():
    from streams.pingmesh.step_message import decode_body, encode_step, part_of

    k = 26  # an upload at 25 s: rows of the second window
    part = part_of(dict(STEPS[k][0][0]))
    step = decode_body(part.ranges, b"".join(v for _, v in STEPS[k]))
    assert step.partials and step.marks
    parts = encode_step(step, max_bytes=4_000)
    assert len(parts) >= 3 and all(len(v) <= 4_000 for _, v in parts)

    def verdicts(out: list) -> list:
        return [(ws, res.verdicts.to_pylist()) for ws, res in out]

    ref, r = WindowReducer(partitions=1, clock=lambda: 0.0), WindowReducer(partitions=1, clock=lambda: 0.0)
    want, got = [], []
    for msgs in STEPS[:k]:
        want += _feed(ref, msgs)
        got += _feed(r, msgs)
    got += _feed(r, encode_step(step, max_bytes=4_000)[:2])  # a worker died after two parts of its step
    assert len(r.assembling) == 1 and r.raw_merged == {0: k - 1}
    got += _feed(r, parts[:-1])
    got += _feed(r, STEPS[0])  # another worker's (here a zombie's) message between the parts: dropped
    assert r.raw_merged == {0: k - 1} and len(r.assembling) == 2  # nothing of the step applied yet
    got += _feed(r, parts[-1:])
    assert r.raw_merged == {0: k}
    assert not r.assembling  # the dead worker's incomplete step now covers merged offsets: dropped
    for msgs in STEPS[k:]:
        want += _feed(ref, msgs)
    for msgs in STEPS[k + 1:]:
        got += _feed(r, msgs)
    assert [ws for ws, _ in want] == [T0, T0 + 20 * S]
    assert verdicts(got) == verdicts(want)
    assert r.dropped_steps == {"replay": 1, "overlap": 0}
