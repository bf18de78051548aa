"""Verdicts and stored tiers do not depend on how messages are grouped into worker steps or store inserts.

The same simulated uploads (Panel 1 with a dead link and a lossy link, 60 s, two raw partitions) go
through :func:`streams.runtime.probe_step.process_step` in different step groupings, the reducer as the
Faust agent feeds it, and the store writer's block logic over the same raw messages (:mod:`sinks.blocks`,
:mod:`sinks.raw_rows`) into real chdb with different block cuts. One run also replays what a crashed
worker had not committed (re-grouped; the worker skips what a step already carried to the reducer, and a
zombie sends a step twice) and crashes the writer between a block's state row and its inserts. Verdicts,
``probes`` and every tier must come out identical, each probe counted once.
"""

from __future__ import annotations

import random
import time

import pyarrow as pa
import pytest

from producers.sim.fabrics import panel1
from schemas.arrow_pa import table_from_columns
from schemas.codec import encode
from sinks.blocks import Entry, PartitionState, load_states, writer_block_inserts
from sinks.clickhouse import ChdbStore, migrate
from sinks.raw_rows import RawJudge, form_raw_block, raw_entry
from streams.pingmesh.path_index import PathIndex
from streams.pingmesh.reducer import WindowReducer
from streams.pingmesh.step_message import encode_step
from streams.pingmesh.windows import WINDOW_NS
from streams.runtime.probe_step import RawMessage, StepOutput, process_step, reducer_step

sim = pytest.importorskip("producers.sim")

S = 1_000_000_000
T0 = (time.time_ns() // (3600 * S) - 2) * 3600 * S  # recent: the tables' TTLs drop old rows at insert
RAW = "probes.raw"
JUDGE = RawJudge()
TIERS = {
    "probes_1m": "minute, pinglist, prober_rnic, responder_rnic",
    "probes_1h_rnic": "hour, prober_rnic, responder_rnic",
    "probes_1h_tor": "hour, prober_tor, responder_tor, pinglist",
}


def _uploads() -> tuple[list[RawMessage], PathIndex, dict[str, int]]:
    inv = panel1()
    s = sim.Simulator(inv, seed=3, faults=[sim.LinkDown(a="A", b="S3"), sim.LossyLink(a="C", b="S1", rate=0.2)],
                      inter_tor="even")
    msgs, index, offsets, part_of = [], PathIndex(), [0, 0], {}
    for k in range(13):
        for agent, probe_cols, path_cols in s.upload_batches(T0 + k * 5 * S):
            index.update(table_from_columns("path.v1", path_cols))
            part = part_of.setdefault(agent, len(part_of) % 2)  # keyed by agent, as the agents' producer does
            payload = encode(table_from_columns("probe.v1", probe_cols))
            msgs.append(RawMessage(payload, "probe.v1", RAW, part, offsets[part]))
            offsets[part] += 1
    return msgs, index, {r: s.qpn_at(r, T0) for r in inv.rnics}


MSGS, PATHS, REGISTRY = _uploads()
TOR_OF = {r.id: r.tor for r in panel1().rnics.values()}  # what the writer reads from rnic_inventory


def _steps(rng: random.Random | None, msgs: list[RawMessage]) -> list[list[RawMessage]]:
    """Cut ``msgs`` into steps: one message each (rng None), or random sizes 1..40."""
    if rng is None:
        return [[m] for m in msgs]
    out, i = [], 0
    while i < len(msgs):
        n = rng.randint(1, 40)
        out.append(msgs[i:i + n])
        i += n
    return out


def _reduce(red: WindowReducer, out: StepOutput, emitted: dict[int, int], verdicts: list, resend: bool) -> None:
    """What the Faust agents do with a step: one message to the reducer (``resend``: a zombie worker sends it
    again after the new owner went on); ``emitted`` learns the raw offsets it covers, as the tail of
    ``window.partials`` would tell a restarted worker."""
    step = reducer_step(out)
    if step is None:
        return
    msgs = encode_step(step, max_bytes=50_000)  # small parts: the reducer must join them
    for headers, value in msgs + (msgs if resend else []):
        verdicts += red.receive(dict(headers), value)
    emitted.update({p: b for p, (_, b) in step.ranges.items()})


def _write(store: ChdbStore, log: dict[int, list[Entry]], rng: random.Random, crash: bool) -> int:
    """The store writer's block logic over each raw partition's log, random block cuts; with ``crash``,
    one block dies after its state row and first insert and the writer restarts from an earlier offset.
    Returns the rows a block left out as stored before."""
    dropped = 0
    for part, entries in sorted(log.items()):
        st, i, crashed = PartitionState(), 0, not crash
        while i < len(entries):
            n = rng.randint(1, 25)
            block = form_raw_block(RAW, {part: (entries[i:i + n], st.hwm)}, JUDGE)
            stmts = writer_block_inserts(RAW, block, now_ns=i, tor_of=TOR_OF)
            if not crashed and i > 0:
                for table, data, token in stmts[:2]:  # state row, then the tier: then kill -9
                    store.insert_arrow(table, data, dedup_token=token)
                crashed = True
                st = load_states(store, RAW)[part]
                i = max(0, i - rng.randint(0, 3))  # the committed offset may lag the recorded blocks
                for e in entries[i:]:
                    st.accept(e, 0.0)
                    if (b := st.take_block(10**9, 10**9, 0.0)) is not None:  # the recorded block, re-formed
                        redo = form_raw_block(RAW, {part: (b, st.hwm)}, JUDGE)
                        for table, data, token in writer_block_inserts(RAW, redo, now_ns=i + 1, tor_of=TOR_OF):
                            store.insert_arrow(table, data, dedup_token=token)
                        st.hwm = redo.parts[part].hwm_after
                        dropped += redo.dropped_rows
                        i = redo.parts[part].last + 1
                        break
                continue
            for table, data, token in stmts:
                store.insert_arrow(table, data, dedup_token=token)
            st.hwm = block.parts[part].hwm_after
            dropped += block.dropped_rows
            i += n
    return dropped


def _write_across(store: ChdbStore, log: dict[int, list[Entry]], rng: random.Random, crash: bool) -> int:
    """The store writer's writer blocks: each takes a random number of messages (maybe none) of every
    partition, one insert per table for all of them; with ``crash``, one block dies after its state rows and
    first insert, and the restarted writer re-forms it from the ranges every partition's state row records
    (as it re-reads them from Kafka), then goes on from each partition's committed offset. Returns the rows
    a block left out as stored before."""
    dropped, hwm, nxt, crashed = 0, {p: {} for p in log}, dict.fromkeys(log, 0), not crash
    while any(nxt[p] < len(log[p]) for p in log):
        parts = {p: (log[p][nxt[p]:nxt[p] + rng.randint(0, 25)], hwm[p]) for p in log}
        parts = {p: v for p, v in parts.items() if v[0]}
        if not parts:
            continue
        block = form_raw_block(RAW, parts, JUDGE)
        stmts = writer_block_inserts(RAW, block, now_ns=sum(nxt.values()), tor_of=TOR_OF)
        if not crashed and len(parts) > 1:
            for table, data, token in stmts[:2]:  # state rows, then the first tier: then kill -9
                store.insert_arrow(table, data, dedup_token=token)
            crashed = True
            states = load_states(store, RAW)
            ranges = states[min(parts)].multi_redo
            assert ranges == block.ranges and all(states[p].multi_redo == ranges for p in parts)
            redo = form_raw_block(RAW, {p: (log[p][f:last + 1], states[p].hwm) for p, (f, last) in ranges.items()},
                                  JUDGE)
            assert redo.token(RAW) == block.token(RAW)
            for table, data, token in writer_block_inserts(RAW, redo, now_ns=-1, tor_of=TOR_OF):
                store.insert_arrow(table, data, dedup_token=token)
            block = redo
            hwm = {p: dict(states[p].redo_hwm_after) for p in log}
        else:
            for table, data, token in stmts:
                store.insert_arrow(table, data, dedup_token=token)
            hwm.update({p: b.hwm_after for p, b in block.parts.items()})
        dropped += block.dropped_rows
        nxt.update({p: last + 1 for p, (_, last) in block.ranges.items()})
    return dropped


def _run(tmp_path, seed: int | None, replay: bool = False, across: bool = False) -> tuple[list, dict]:
    rng = random.Random(seed)
    red = WindowReducer(partitions=2, clock=lambda: 0.0)
    red.registry.update(REGISTRY)
    verdicts: list = []
    emitted: dict[int, int] = {}
    log: dict[int, list[Entry]] = {p: [raw_entry(m.offset, m.payload, m.schema, "") for m in MSGS if m.partition == p]
                                   for p in (0, 1)}  # what the store writer reads: the raw uploads themselves
    steps = _steps(None if seed is None else rng, MSGS)
    for j, step in enumerate(steps):
        batches = [step]
        if replay and j == len(steps) // 2:  # a worker died after sending, before committing: re-read, re-grouped
            batches.append(step[len(step) // 2:] + steps[j + 1][:3])  # the next step re-reads those 3 again
        for b in batches:
            out = process_step(b, PATHS, WINDOW_NS, emitted=emitted)  # skips what a step already carried
            _reduce(red, out, emitted, verdicts, resend=replay and j == 0)
    store = ChdbStore(tmp_path / f"ch-{seed}-{replay}-{across}")
    try:
        migrate(store)
        dropped = (_write_across if across else _write)(store, log, rng, crash=replay)
        assert dropped == 0, dropped  # the worker's replay never reaches the store
        tiers = {t: store.query_arrow(
            f"SELECT {k}, sum(probes) AS probes, sum(timeouts) AS timeouts, mapSort(sumMap(rtt_hist)) AS rtt, "
            f"mapSort(sumMap(responder_hist)) AS resp, mapSort(sumMap(prober_hist)) AS prob FROM {t} "
            f"GROUP BY {k} ORDER BY {k}").to_pylist() for t, k in TIERS.items()}
        tiers["probes"] = store.query_arrow(
            "SELECT count() AS n, uniqExact(agent_id, seq) AS u FROM probes").to_pylist()
    finally:
        store.close()
    # the zombie's resend was dropped whole; the re-read never overlapped a merged step (the worker's skip)
    assert red.dropped_steps == {"replay": int(replay), "overlap": 0}, red.dropped_steps
    return [(ws, sorted(res.verdicts.to_pylist(), key=lambda v: v["verdict_id"])) for ws, res in verdicts], tiers


def test_verdicts_and_tiers_do_not_depend_on_step_or_block_grouping(tmp_path):
    rows = sum(pa.ipc.open_stream(m.payload).read_all().num_rows for m in MSGS)
    base_verdicts, base_tiers = _run(tmp_path, None)
    assert {v["kind"] for _, vs in base_verdicts for v in vs} >= {"switch"}, "the faults must give verdicts"
    assert len(base_verdicts) >= 2
    assert base_tiers["probes"] == [{"n": rows, "u": rows}]
    for t in TIERS:
        assert sum(r["probes"] for r in base_tiers[t]) == rows, t
    assert {r["prober_tor"] for r in base_tiers["probes_1h_tor"]} == {"A", "B", "C"}
    for seed, replay, across in ((1, False, False), (2, True, False), (3, True, False), (4, False, True),
                                 (5, True, True)):
        verdicts, tiers = _run(tmp_path, seed, replay, across)
        assert verdicts == base_verdicts, f"seed {seed}"
        assert tiers == base_tiers, f"seed {seed}, replay {replay}, blocks across partitions {across}"
