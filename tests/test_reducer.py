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


def test_a_batch_processed_again_after_a_crash_is_merged_once():
    from producers.sim import LinkDown, Simulator
    from producers.sim.fabrics import panel1
    from schemas.arrow_pa import table_from_columns
    from streams.pingmesh.links import PathIndex
    from streams.pingmesh.reducer import worker_messages
    from streams.pingmesh.rtt import decompose

    sim = Simulator(panel1(), seed=1, faults=[LinkDown("A", "S3")])
    rounds = [sim.upload_batches(T0 + k * 5 * S) for k in range(6)]

    def run(repeat: bool) -> list:
        r, paths, out = WindowReducer(partitions=1, clock=lambda: 0.0), PathIndex(), []
        offset = 0
        for batches in rounds:
            for _agent, probes, path_cols in batches:
                paths.update(table_from_columns("path.v1", path_cols))
                msgs = worker_messages(decompose(table_from_columns("probe.v1", probes), "t"), paths, 20 * S)
                for _ in range(2 if repeat else 1):  # a worker that crashed before committing sends it again
                    for mark, ws, blob in msgs:
                        out += r.add(mark, ws, blob, 0, source=offset)
                offset += 1
        return [(ws, res.verdicts.to_pylist()) for ws, res in out]

    once, twice = run(False), run(True)
    assert [ws for ws, _ in once] == [T0]
    assert twice == once
    assert once[0][1][0]["kind"] == "switch" and once[0][1][0]["location"] == "A->S3"
