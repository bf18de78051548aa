"""Row checks of probe batches: which rows are bad, and why.

A bad row never stops its batch: the workers send it to the dead-letter topic
with its reason and let the good rows flow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import column
from schemas.records import PINGLISTS, PROBE_STATUS, TS_SOURCES, lookup

# A round trip longer than this cannot be a probe answer (the timeout is 500 ms):
# a bigger difference means a clock jump or a counter wrap.
MAX_SPAN_NS = 10_000_000_000


@dataclass(frozen=True)
class Split:
    """A batch split into the rows that pass and the rows that fail, with one reason per bad row."""

    good: pa.Table
    bad: pa.Table
    reasons: list[str]
    bad_index: list[int]


def _not_in(col: pa.Array | pa.ChunkedArray, values: tuple[str, ...] | list[str]) -> pa.Array:
    """Per row: the value is not one of ``values`` (a null is not), as ``invert(is_in(col, values))``; for a
    dictionary-encoded column checked over its dictionary only, then looked up per row (no string hashed)."""
    if not pa.types.is_dictionary(col.type):
        return pc.invert(pc.is_in(col, pa.array(values, pa.string())))
    bad = ~np.asarray(pc.is_in(col.dictionary, pa.array(values, pa.string())).to_numpy(zero_copy_only=False), bool)
    if not bad.any() and not col.indices.null_count:  # every value allowed: no lookup per row
        return pa.repeat(pa.scalar(False), len(col))
    idx = np.asarray(pc.fill_null(col.indices, len(bad)).to_numpy(zero_copy_only=False))
    return pa.array(np.append(bad, True)[idx])


def _status_not_in(status: pa.ChunkedArray | pa.Array, ok: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """``invert(is_in(status, PROBE_STATUS))`` (a null is not in it) from the ``ok`` mask the rules compute anyway
    and one more comparison per other status: two string comparisons cost less than a hash lookup."""
    seen = ok
    for value in PROBE_STATUS:
        if value != "ok":
            seen = pc.or_(seen, pc.equal(status, value))
    return pc.invert(pc.fill_null(seen, False))


def _rule_masks(t: pa.Table, encoded: Mapping[str, pa.DictionaryArray] | None) -> list[tuple[str, pa.Array]]:
    ok = pc.equal(t["status"], "ok")
    rules: list[tuple[str, pa.Array]] = []
    for f in lookup("probe.v1").fields:
        if not f.nullable and t[f.name].null_count:  # null counts are known without a pass over the rows
            rules.append((f"{f.name} is null (the field is required)", pc.is_null(t[f.name])))
    rules += [
        (f"status is not one of {PROBE_STATUS}", _status_not_in(t["status"], ok)),
        (f"pinglist is not one of {PINGLISTS}", _not_in(column(t, "pinglist", encoded), PINGLISTS)),
        (f"ts_source is not one of {TS_SOURCES}", _not_in(column(t, "ts_source", encoded), TS_SOURCES)),
    ]
    for name in ("t1", "t2", "t3", "t4", "t5", "t6"):
        if t[name].null_count:
            rules.append((f"status ok but {name} is null", pc.and_(ok, pc.is_null(t[name]))))
    if _spans_fine(t, ok):  # the common case: no row breaks a rule below, so none would be reported
        return rules
    for a, b, clock in (("t2", "t5", "prober RNIC"), ("t3", "t4", "responder RNIC"), ("t1", "t6", "prober host")):
        span = pc.subtract(t[b], t[a])
        rules.append((f"negative {b}-{a} on the {clock} clock", pc.and_(ok, pc.less(span, 0))))
        rules.append(
            (f"{b}-{a} over {MAX_SPAN_NS} ns on the {clock} clock (clock jump or counter wrap)",
             pc.and_(ok, pc.greater(span, MAX_SPAN_NS)))
        )
    rules.append(
        ("responder delay t4-t3 exceeds the prober span t5-t2 (clocks mixed?)",
         pc.and_(ok, pc.greater(pc.subtract(t["t4"], t["t3"]), pc.subtract(t["t5"], t["t2"]))))
    )
    return rules


def _spans_fine(t: pa.Table, ok: pa.Array | pa.ChunkedArray) -> bool:
    """Whether no ``ok`` row breaks a span rule of :func:`_rule_masks` (negative or over :data:`MAX_SPAN_NS` on a
    clock, responder delay over the prober span): one numpy pass per clock (``0 <= span <= MAX`` is one unsigned
    comparison), wrapping like Arrow's ``subtract``. A null reading counts as 0 here, so a row with one may fail
    this check without breaking a rule: the caller then evaluates the rules one by one (exact either way)."""
    def ns(name: str) -> np.ndarray:
        col = pc.fill_null(t[name], 0) if t[name].null_count else t[name]
        return np.asarray(col.to_numpy() if isinstance(col, pa.Array) else col.to_numpy(), dtype=np.int64)

    v = {name: ns(name) for name in ("t1", "t2", "t3", "t4", "t5", "t6")}
    bad = np.zeros(t.num_rows, dtype=bool)
    for a, b in (("t2", "t5"), ("t3", "t4"), ("t1", "t6")):
        bad |= (v[b] - v[a]).view(np.uint64) > np.uint64(MAX_SPAN_NS)
    bad |= (v["t4"] - v["t3"]) > (v["t5"] - v["t2"])
    return not (bad & np.asarray(pc.fill_null(ok, False).to_numpy(zero_copy_only=False), dtype=bool)).any()


def broken_rules(t: pa.Table, known_rnics: set[str] | None = None, batch: np.ndarray | None = None,
                 encoded: Mapping[str, pa.DictionaryArray] | None = None) -> tuple[np.ndarray, list[str]]:
    """The first rule each row of a ``probe.v1`` table breaks (the rules of :func:`split_probes`).

    Args:
        t: ``probe.v1`` rows, maybe of several source batches.
        known_rnics: the registry's RNICs, or None (no RNIC rule).
        batch: per row, the source batch it came from (any integers; None: one batch). Repeats of
            ``(agent_id, seq)`` count only inside one batch, so rows of many messages are checked in one
            pass with the same outcome as message by message.
        encoded: optional dictionary-encoded columns of ``t`` (:func:`schemas.group_codes.dictionaries`):
            the enumeration and registry rules then check each distinct value once. Same result.

    Returns:
        ``(rule, texts)``: int32 per row, an index into ``texts`` (0: no rule broken, ``texts[0]`` is '').
    """
    n = t.num_rows
    # the first rule each row breaks, as an index into ``texts`` (0: none): integer arrays, no per-row objects
    texts: list[str] = [""]
    rule = np.zeros(n, dtype=np.int32)
    for text, mask in _rule_masks(t, encoded):
        if not pc.any(mask).as_py():  # most rules break on no row: skip the numpy pass
            continue
        m = np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)
        texts.append(text)
        rule[m & (rule == 0)] = len(texts) - 1
    if known_rnics is not None:
        known = sorted(known_rnics)
        for col in ("prober_rnic", "responder_rnic"):
            m = np.asarray(pc.fill_null(_not_in(column(t, col, encoded), known), False), dtype=bool)
            bad_names = t[col]
            for i in np.nonzero(m & (rule == 0))[0]:  # only over the (rare) bad rows
                texts.append(f"unknown RNIC {bad_names[int(i)].as_py()!r} in {col} (not in the registry)")
                rule[i] = len(texts) - 1
    if n:
        repeat = _repeats(t, batch, column(t, "agent_id", encoded))
        if repeat is not None:
            texts.append("duplicate (agent_id, seq) in the batch")
            rule[repeat & (rule == 0)] = len(texts) - 1
    return rule, texts


def _repeats(t: pa.Table, batch: np.ndarray | None, agent_id: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """Rows whose (batch, agent_id, seq) an earlier row has (the first occurrence stays good); None if none.

    Integer keys (dictionary id of the agent, seq), no per-row strings. Commonest case first: an agent numbers
    its probes in order, so each (batch, agent) is one run of rows with increasing seq (:func:`_increasing_runs`,
    no sort). Else batch, agent and seq packed into one int64 and sorted (numpy's plain sort, no argsort) finds
    no two equal; only when it does (or the values do not fit) are the repeats found by a stable sort of the rows.
    """
    n = t.num_rows
    ids = agent_id.combine_chunks() if isinstance(agent_id, pa.ChunkedArray) else agent_id
    if ids.null_count or not pa.types.is_dictionary(ids.type):  # a null agent counts as ''
        ids = pc.fill_null(ids.cast(pa.string()) if pa.types.is_dictionary(ids.type) else ids, "").dictionary_encode()
    agent = ids.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    seq = np.asarray(pc.fill_null(t["seq"], 0).to_numpy(zero_copy_only=False), dtype=np.uint64)
    group = agent if batch is None else (np.asarray(batch, dtype=np.int64) - int(np.min(batch))) * (
        int(agent.max()) + 1) + agent
    if _increasing_runs(group, seq):
        return None
    seq_bits = max(int(seq.max()), 1).bit_length()
    if seq_bits + max(int(group.max()), 1).bit_length() <= 63:
        packed = (group << seq_bits) | seq.astype(np.int64)
        packed.sort()
        if not (packed[1:] == packed[:-1]).any():
            return None
    order = np.lexsort((seq, group))
    repeat = np.zeros(n, dtype=bool)
    repeat[order[1:]] = (group[order[1:]] == group[order[:-1]]) & (seq[order[1:]] == seq[order[:-1]])
    return repeat if repeat.any() else None


def _increasing_runs(group: np.ndarray, seq: np.ndarray) -> bool:
    """True when every group's rows are one contiguous run with strictly increasing ``seq``: then no (group, seq)
    repeats. Three passes over the rows and a check that no group starts two runs; False (undecided) else."""
    n = len(group)
    if n < 2:
        return True
    same = group[1:] == group[:-1]
    if not (seq[1:][same] > seq[:-1][same]).all():
        return False
    heads = group[np.flatnonzero(np.r_[True, ~same])]
    return len(np.unique(heads)) == len(heads)


def split_probes(t: pa.Table, known_rnics: set[str] | None = None) -> Split:
    """Split a ``probe.v1`` table into good and bad rows.

    Rules: required fields present; enumerations valid; for ``ok`` rows all of
    t1..t6 present, no negative or absurd (> 10 s) span on any clock, and
    t4−t3 ≤ t5−t2; prober and responder RNIC in ``known_rnics`` when given;
    no repeated (agent_id, seq) inside the batch.

    Returns:
        :class:`Split`; ``reasons[i]`` explains ``bad`` row i (the first rule it broke).
    """
    rule, texts = broken_rules(t, known_rnics)
    return split_by_rule(t, rule, texts)


def split_by_rule(t: pa.Table, rule: np.ndarray, texts: list[str]) -> Split:
    """:class:`Split` of ``t`` by the first broken rule of each row (:func:`broken_rules`)."""
    n = t.num_rows
    bad_mask = rule != 0
    if not bad_mask.any():
        return Split(t, t.slice(0, 0), [], [])
    bad_idx = np.nonzero(bad_mask)[0]
    good_idx = np.nonzero(~bad_mask)[0]
    reason = np.asarray(texts, dtype=object)[rule[bad_idx]]
    return Split(
        t if len(good_idx) == n else t.take(pa.array(good_idx, pa.int64())),
        t.take(pa.array(bad_idx, pa.int64())),
        [str(r) for r in reason],
        [int(i) for i in bad_idx],
    )
