"""Per-worker partial state of one window, and the reducer that merges it.

Workers partitioned over the probe topic each see part of a window. Each turns
its rows into a :class:`WindowPartial` (counts only: integer sums and maxima,
plus the failing-path groups), and one reducer per window merges them with
:func:`merge` (the reducer folds them as they arrive,
:class:`streams.pingmesh.partial_fold.PartialFold`, to the same result). Because every field is a sum or a
maximum of integers grouped by string keys, the merged partial — and so the verdict computed from it — does
not depend on how rows were split across workers or batches, nor on their
order (property-tested).

Latency values are kept as log-spaced histograms (``HIST_PER_OCTAVE`` buckets
per doubling, about 9 % wide), so quantiles merge exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import (
    Groups,
    Key,
    classes,
    column,
    group,
    key,
    of_groups,
    ranges,
    row_ids,
    run_starts,
    shared_keys,
    sort_order,
    sums,
    to_numpy,
)
from schemas.probe_rows.messages import ENCODED
from streams.pingmesh.links import probe_link_codes
from streams.pingmesh.path_index import PathIndex

HIST_PER_OCTAVE = 8
"""Half the store's 16 (schemas.probe_rows.minute_tier): a partial's bucket is the store bucket halved, so a worker step
takes both from one ``log2`` per latency (:func:`_bucket_rows`)."""

PAIR_KEYS = ["pinglist", "prober_host", "prober_rnic", "responder_host", "responder_rnic", "qpn"]
FAIL_KEYS = [*PAIR_KEYS, "job_id", "fwd_hops", "rev_hops"]
# ts_source is a key so the latency rule can hold software-timestamped flows to a larger excess
FLOW_KEYS = ["pinglist", "prober_rnic", "responder_rnic", "src_port", "fwd_hops", "rev_hops", "ts_source"]
SERVICE_KEYS = ["job_id", "prober_host", "prober_rnic", "responder_host", "responder_rnic", "src_port",
                "fwd_hops", "rev_hops"]
DELAY_KEYS = ["host", "role", "slot"]
SLOT_NS = 5_000_000_000
"""Sub-window slot of the delay histograms and host timeout counts: one agent upload period (5 s,
R-Pingmesh §5), so the analyzer can judge a host from the moment its failures start."""

SUM_KEYS = {
    "pairs": (PAIR_KEYS, ["n", "n_timeout"]),
    "failing": (FAIL_KEYS, ["n"]),
    "crossing": (["link"], ["n"]),
    "delays": ([*DELAY_KEYS, "bucket"], ["n"]),
    "slots": (["host", "slot"], ["n", "n_timeout"]),
    "flows": ([*FLOW_KEYS, "bucket"], ["n"]),
    "service": (SERVICE_KEYS, ["n", "n_timeout"]),
}
"""Key columns and summed count columns of each table of a :class:`WindowPartial` but ``uploads``."""

PartialKeys = Mapping[str, Mapping[str, Key]]
"""Keys of a merged :class:`WindowPartial`'s rows, known without hashing its columns: table name → key column →
:class:`~schemas.group_codes.Key` whose ``codes[i]`` codes row ``i`` of that table as
:func:`schemas.group_codes.key` would (order-preserving, equal exactly where the values are; the codes need not
be dense). :meth:`streams.pingmesh.partial_fold.PartialFold.coded_result` gives them; a table or column not
named is keyed from its values."""


def bucket_of(ns: np.ndarray) -> np.ndarray:
    """Histogram bucket (int64) of latencies in ns: ``floor(HIST_PER_OCTAVE * log2(ns))``."""
    v = np.maximum(np.asarray(ns, dtype=np.float64), 1.0)
    return np.floor(HIST_PER_OCTAVE * np.log2(v)).astype(np.int64)


def bucket_value(b: np.ndarray) -> np.ndarray:
    """Representative latency (ns, float64) of histogram buckets: the geometric middle."""
    return np.exp2((np.asarray(b, dtype=np.float64) + 0.5) / HIST_PER_OCTAVE)


def coded_quantile(gid: np.ndarray, n_groups: int, bucket: np.ndarray, n: np.ndarray, q: float,
                   min_tail: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """:func:`group_quantile` of histogram rows in any order whose groups are integer codes ``gid`` in
    ``[0, n_groups)``: the rows are put in (group, bucket) order by one int64 sort. Returns (the groups
    present, ascending; values in ns)."""
    bucket, n = np.asarray(bucket, np.int64), np.asarray(n, np.int64)
    lo, width = int(bucket.min()), int(bucket.max() - bucket.min()) + 1
    srt = sort_order(gid * width + (bucket - lo))[0] if n_groups * width < 2**62 else np.lexsort((bucket, gid))
    return group_quantile(gid[srt], bucket[srt], n[srt], q, min_tail)


def group_quantile(key: np.ndarray, bucket: np.ndarray, n: np.ndarray, q: float,
                    min_tail: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Quantile per group of sorted (key, bucket) histogram rows; returns (keys, values in ns).

    With ``min_tail`` > 0 a group of ``total`` samples uses ``min(q, 1 - min_tail/total)``: the
    highest quantile that still has ``min_tail`` samples above it (the P99 of 15 samples is
    their maximum, i.e. one outlier).
    """
    start = np.flatnonzero(run_starts(key))  # the rows are sorted by key: each group is one run, no sort needed
    uniq = key[start]
    end = np.append(start[1:], len(key))
    cum = np.cumsum(n)
    base = np.where(start > 0, cum[start - 1], 0)
    total = cum[end - 1] - base
    q_eff = np.minimum(q, 1.0 - min_tail / np.maximum(total, 1)) if min_tail else np.full(len(total), q)
    target = base + np.ceil(q_eff * total).astype(np.int64)
    pos = np.searchsorted(cum, target, side="left")
    pos = np.minimum(np.maximum(pos, start), end - 1)
    return uniq, bucket_value(bucket[pos])


@dataclass
class WindowPartial:
    """Mergeable counts of one window from one worker (all Arrow tables, integer counts).

    Attributes:
        window_start_ns: the window (ns since the epoch, 20 s aligned).
        pairs: probes and timeouts per (pinglist, prober, responder, QPN).
        failing: timed-out probes per (pair, QPN, job, forward hops, ACK hops) — the failing-path set.
        crossing: probes (any status) whose forward or ACK path crosses each physical link.
        delays: histograms of responder delay (role ``responder``) and prober delay (role
            ``prober``) of successful probes per host and 5 s slot of the window (``slot`` 0-3).
        flows: histograms of network RTT of successful probes per flow (pair, source port, paths).
        service: probes and timeouts of ``service`` probes per job connection.
        uploads: newest ``upload_ns`` per prober host.
        slots: probes and timeouts per host (as prober and as responder, each probe counted for
            both) and 5 s slot: when a host's failures started.
    """

    window_start_ns: int
    pairs: pa.Table
    failing: pa.Table
    crossing: pa.Table
    delays: pa.Table
    flows: pa.Table
    service: pa.Table
    uploads: pa.Table
    slots: pa.Table


def _group_sum(t: pa.Table, keys: list[str], vals: list[str]) -> pa.Table:
    if t.num_rows == 0:
        return _plain(t.select([*keys, *vals]))
    g = t.group_by(keys).aggregate([(v, "sum") for v in vals])
    g = _plain(g.select([*keys, *[f"{v}_sum" for v in vals]]).rename_columns([*keys, *vals]))
    return g.sort_by([(k, "ascending") for k in keys])


def _plain(t: pa.Table) -> pa.Table:
    """Dictionary-encoded key columns back to their value type (on the small grouped result)."""
    for i, f in enumerate(t.schema):
        if pa.types.is_dictionary(f.type):
            t = t.set_column(i, f.name, pc.cast(t[f.name], f.type.value_type))
    return t


def link_counts(groups: pa.Table) -> pa.Table:
    """Sum ``n`` per physical link over groups with ``fwd_hops``, ``rev_hops`` and ``n`` columns.

    Each group's probes count once per distinct link of their forward and ACK paths.

    Returns:
        Table ``link`` (string), ``n`` (int64), one row per link crossed, sorted by link; summed over
        the integer link codes of :func:`streams.pingmesh.links.probe_link_codes`, not per string.
    """
    pl = probe_link_codes(groups["fwd_hops"], groups["rev_hops"])
    n = to_numpy(groups["n"]).astype(np.int64) if groups.num_rows else np.zeros(0, np.int64)
    n_links = len(pl.names)
    total = np.bincount(pl.link, weights=n[pl.row], minlength=n_links).round().astype(np.int64)
    seen = np.flatnonzero(np.bincount(pl.link, minlength=n_links))
    return pa.table({"link": pl.names.take(pa.array(seen, pa.int64())), "n": pa.array(total[seen], pa.int64())})




def summarize(window_start_ns: int, probes: pa.Table, paths: pa.Table | PathIndex | None,
              encoded: Mapping[str, pa.DictionaryArray] | None = None,
              buckets: Mapping[str, np.ndarray] | None = None) -> WindowPartial:
    """Turn one worker's rows of one window into a :class:`WindowPartial`.

    Every key column is encoded once to integer codes (:mod:`schemas.group_codes`) and shared by the
    group-bys; paths are hop-string ids from the index (:meth:`PathIndex.hop_ids`), and a probe's links
    are expanded once per distinct (forward path, ACK path), not per probe. Equal, table for table, to
    Arrow group-bys over the string columns sorted by their keys.

    Args:
        window_start_ns: start of the window the rows belong to (ns).
        probes: ``probe_enriched.v1`` rows of that window (``t1`` inside it).
        paths: the traces known to the worker (forward and reverse): a
            :class:`streams.pingmesh.path_index.PathIndex` (build once, update per path batch), or raw
            ``path.v1`` rows, or None.
        encoded: optional ``{column: dictionary array}`` of the same rows for some of :data:`ENCODED` (the
            step's encodings, :func:`schemas.group_codes.dictionaries`); the partial does not change.
        buckets: optional store buckets (16 per octave) of the latency columns of the same rows
            (:func:`schemas.probe_rows.minute_tier.latency_buckets`, the step's): halved, they are this partial's.

    Returns:
        The partial; vectorised over rows (numpy over integer codes), no per-row Python.
    """
    n = probes.num_rows
    index = paths if isinstance(paths, PathIndex) else (
        PathIndex(paths) if paths is not None and paths.num_rows else None)
    status = pc.equal(probes["status"], "timeout")
    timeout = to_numpy(pc.fill_null(status, False)).astype(bool)
    ok = to_numpy(pc.fill_null(pc.invert(status), False)).astype(bool)

    cols = {c: column(probes, c, encoded) for c in (*ENCODED, "qpn", "src_port", "src_ip", "dst_ip", "dst_port")}
    cols["src_ip"], cols["dst_ip"] = (probes[c].combine_chunks() for c in ("src_ip", "dst_ip"))  # compared, taken
    # A window holds each 5-tuple many times (240,000 probes, ~33,000 tuples on the profile fabric) and every
    # key but the RTT buckets and slots is a function of the tuple: the path lookup and the group-bys run
    # over these classes of rows (each weighted by its probes), not over every row (exact for any rows,
    # schemas.group_codes.classes), and the keys are ranked on one row per class only.
    ids = {name: row_ids(col) for name, col in cols.items() if name not in ("src_ip", "dst_ip")}
    c = classes([ids["prober_rnic"], ids["responder_rnic"], ids["src_port"]],
                [ids[k] for k in ("pinglist", "prober_host", "responder_host", "qpn", "ts_source", "dst_port")],
                [cols["src_ip"], cols["dst_ip"]])  # the addresses compared per class, not hashed
    first = pa.array(c.first, pa.int64())
    if index is not None:  # the forward and ACK path of each class (its rows share the 5-tuple)
        at = pc.max(probes["upload_ns"]).as_py() if n else None
        fwd_id, rev_id = index.hop_ids(pa.table({k: cols[k].take(first) for k in ("src_ip", "dst_ip", "src_port",
                                                                                  "dst_port")}), at)
    else:
        fwd_id = rev_id = np.zeros(c.n, dtype=np.int64)
    fwd, rev, hop_of_rank = _hop_keys(index, fwd_id, rev_id)
    pinglist, prober_rnic, responder_rnic, qpn, src_port, ts_source = (
        key(cols[k].take(first)) for k in ("pinglist", "prober_rnic", "responder_rnic", "qpn", "src_port", "ts_source"))
    prober_host, responder_host = shared_keys(cols["prober_host"].take(first), cols["responder_host"].take(first))
    per_class = np.bincount(c.cls, minlength=c.n)
    timed_out = np.flatnonzero(timeout)  # few rows: counted by index, not by a weight on every row
    timeouts = np.bincount(c.cls[timed_out], minlength=c.n)
    # one key for the (forward, ACK) path pair, numbered in (forward, ACK) order: shared by the links
    # crossed, failing, flows and service; the ACK path column is output from it (dependent)
    path_pairs = group([fwd, rev])  # over classes
    fwd_codes, fwd_values = path_pairs.codes[0], fwd.values
    fwd = Key(path_pairs.gid, path_pairs.n_groups, lambda x: fwd_values(fwd_codes[x]))
    rev = Key(rev.codes, rev.card, rev.values, dependent=True)
    pair = [pinglist, prober_host, prober_rnic, responder_host, responder_rnic, qpn]
    pairs = sums(PAIR_KEYS, pair, {"n": per_class, "n_timeout": timeouts})

    rows = timed_out
    job = key(probes["job_id"].take(pa.array(rows)))
    of_rows = c.cls[rows]
    failing = sums(FAIL_KEYS, [*(k.take(of_rows) for k in pair), job, fwd.take(of_rows), rev.take(of_rows)],
                   {"n": None})

    crossing = _crossing(index, path_pairs, hop_of_rank, np.bincount(path_pairs.gid, weights=per_class,
                                                                     minlength=path_pairs.n_groups))

    t1 = pc.coalesce(probes["t1"], probes["upload_ns"]) if n else pa.array([], pa.int64())
    slot = np.clip((to_numpy(t1).astype(np.int64) - window_start_ns) // SLOT_NS, 0, None)
    prober_host, responder_host = (Key(h.codes[c.cls], h.card, h.values) for h in (prober_host, responder_host))
    slots = _host_slots(prober_host, responder_host, slot, timeout)

    delays = _delays(probes, ok, prober_host, responder_host, slot, buckets)

    rows = np.flatnonzero(ok & to_numpy(pc.is_valid(probes["network_rtt_ns"])))
    flow = [pinglist, prober_rnic, responder_rnic, src_port, fwd, rev, ts_source]
    flow_groups = group(flow)  # flows over classes; each row's flow is its class's
    rtt_bucket = key(pa.array(_bucket_rows(probes, "network_rtt_ns", rows, buckets), pa.int64()))
    flows = sums([*FLOW_KEYS, "bucket"], [*of_groups(flow_groups, flow, flow_groups.gid[c.cls[rows]]), rtt_bucket],
                 {"n": None})

    rows = np.flatnonzero(to_numpy(pc.fill_null(pc.and_(pc.equal(probes["pinglist"], "service"),
                                                         pc.is_valid(probes["job_id"])), False)))
    of_rows = c.cls[rows]
    svc = [key(probes["job_id"].take(pa.array(rows))), prober_host.take(rows), prober_rnic.take(of_rows),
           responder_host.take(rows), *(k.take(of_rows) for k in (responder_rnic, src_port, fwd, rev))]
    service = sums(SERVICE_KEYS, svc, {"n": None, "n_timeout": timeout[rows]})

    newest = np.full(prober_host.card, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(newest, prober_host.codes, to_numpy(probes["upload_ns"]).astype(np.int64))
    seen = np.flatnonzero(np.bincount(prober_host.codes, minlength=prober_host.card))
    uploads = pa.table({"host": prober_host.values(seen), "upload_ns": pa.array(newest[seen], pa.int64())})
    pairs, failing, flows, service = (_like(x, probes.schema) for x in (pairs, failing, flows, service))
    if index is not None:
        index.sweep()  # done with the hop ids: the index may evict (and renumber) now
    return WindowPartial(window_start_ns, pairs, failing, crossing, delays, flows, service, uploads, slots)


def _like(t: pa.Table, source: pa.Schema) -> pa.Table:
    """The schema a group-by over the source table gives: integer key columns keep the source field's
    nullability, and an empty result keeps the source's metadata (the partial's bytes do not change)."""
    fs = [f.with_nullable(source.field(f.name).nullable)
          if f.name in source.names and not pa.types.is_string(f.type) else f for f in t.schema]
    return pa.Table.from_arrays(t.columns, schema=pa.schema(fs, metadata=None if t.num_rows else source.metadata))


def _hop_keys(index: PathIndex | None, fwd_id: np.ndarray, rev_id: np.ndarray) -> tuple[Key, Key, np.ndarray]:
    """Keys of the forward and ACK paths (hop strings, one code space), from hop-string ids; and the
    hop-string id of each code."""
    if index is None:
        empty = pa.array([""], pa.string())
        return (Key(fwd_id, 1, lambda c: empty.take(pa.array(c, pa.int64()))),
                Key(rev_id, 1, lambda c: empty.take(pa.array(c, pa.int64()))), np.zeros(1, np.int64))
    used = np.flatnonzero(np.bincount(np.concatenate([fwd_id, rev_id, [0]])))
    strs = index.hop_strings().take(pa.array(used))
    order = to_numpy(pc.sort_indices(strs)).astype(np.int64)
    rank = np.zeros(used[-1] + 1, dtype=np.int64)
    rank[used[order]] = np.arange(len(used), dtype=np.int64)
    values = strs.take(pa.array(order))
    return (Key(rank[fwd_id], len(used), lambda c: values.take(pa.array(c, pa.int64()))),
            Key(rank[rev_id], len(used), lambda c: values.take(pa.array(c, pa.int64()))), used[order])


_ROLES = pa.array(["prober", "responder"], pa.string())


def _bucket_rows(probes: pa.Table, col: str, rows: np.ndarray, buckets: Mapping[str, np.ndarray] | None
                 ) -> np.ndarray:
    """:func:`bucket_of` the latencies of ``col`` at ``rows`` (non-null there), int64; from the step's store
    buckets (twice as fine: halved) when given."""
    if buckets is not None and col in buckets:
        return (buckets[col][rows] >> 1).astype(np.int64)
    return bucket_of(to_numpy(probes[col].take(pa.array(rows))))


def _delays(probes: pa.Table, ok: np.ndarray, prober_host: Key, responder_host: Key, slot: np.ndarray,
            buckets: Mapping[str, np.ndarray] | None) -> pa.Table:
    """The ``delays`` table: histograms of the responder delay (role ``responder``, at the responder host)
    and the prober delay (role ``prober``, at the prober host) of successful probes per slot.

    The rows are counted straight into (host, role, slot, bucket), coded in the table's key order: a dense count
    over every row (the rows without a delay counted into one spare entry) when that space is small against the
    rows, else one sort of the rows with a delay; the present entries are the table, sorted by its keys."""
    n = len(slot)
    parts = []
    for role, host_key, val_col in ((1, responder_host, "responder_delay_ns"), (0, prober_host, "prober_delay_ns")):
        v = ok & to_numpy(pc.is_valid(probes[val_col]))
        if buckets is not None and val_col in buckets:
            b = (buckets[val_col] >> 1).astype(np.int64)  # every row's; meaningless where ``v`` is False
        else:
            b = np.zeros(n, dtype=np.int64)
            b[v] = _bucket_rows(probes, val_col, np.flatnonzero(v), None)
        parts.append((role, host_key.codes, v, b))
    # the bucket range over every row (a row without a delay has bucket 0 or its delay's): it holds the rows with one
    lo = min((int(b.min()) for *_, b in parts if len(b)), default=0)
    n_buckets = max((int(b.max()) for *_, b in parts if len(b)), default=lo) - lo + 1
    n_slots = int(slot.max()) + 1 if n else 1
    # one code per (host, role, slot, bucket), in the order of the table's keys (host codes rank the host names)
    space = prober_host.card * 2 * n_slots * n_buckets
    comps = [(((h * 2 + role) * n_slots + slot) * n_buckets + (b - lo), v) for role, h, v, b in parts]
    if space <= 8 * n + 4096:
        count = sum(np.bincount(np.where(v, comp, space), minlength=space + 1)[:space] for comp, v in comps)
        at = np.flatnonzero(count)
        count = count[at]
    else:
        at, count = np.unique(np.concatenate([comp[v] for comp, v in comps]), return_counts=True)
    rest, bucket = np.divmod(at, n_buckets)
    rest, slot_of = np.divmod(rest, n_slots)
    host, role_of = np.divmod(rest, 2)
    return pa.Table.from_arrays([prober_host.values(host), _ROLES.take(pa.array(role_of, pa.int64())),
                                 pa.array(slot_of, pa.int64()), pa.array(bucket + lo, pa.int64()),
                                 pa.array(np.asarray(count, dtype=np.int64))], names=[*DELAY_KEYS, "bucket", "n"])


def _host_slots(prober_host: Key, responder_host: Key, slot: np.ndarray, timeout: np.ndarray) -> pa.Table:
    """The ``slots`` table: probes and timeouts per host (as prober and as responder) and slot, counted straight
    into (host, slot) (hosts x 4 slots: a dense count per role over the rows), then summed per present entry."""
    n_slots = int(slot.max()) + 1 if len(slot) else 1
    space = prober_host.card * n_slots
    if space > 4 * len(slot) + 4096:  # slots far apart (rows far outside the window): per row
        host = Key(np.concatenate([prober_host.codes, responder_host.codes]), prober_host.card, prober_host.values)
        return sums(["host", "slot"], [host, key(pa.array(np.concatenate([slot, slot])))],
                    {"n": None, "n_timeout": np.concatenate([timeout, timeout])})
    probes = np.zeros(space, dtype=np.int64)
    timeouts = np.zeros(space, dtype=np.int64)
    timed_out = np.flatnonzero(timeout)
    for h in (prober_host, responder_host):
        hs = h.codes * n_slots + slot
        probes += np.bincount(hs, minlength=space)
        timeouts += np.bincount(hs[timed_out], minlength=space)
    at = np.flatnonzero(probes)
    return sums(["host", "slot"], [Key(at // n_slots, prober_host.card, prober_host.values),
                                   key(pa.array(at % n_slots, pa.int64()))],
                {"n": probes[at], "n_timeout": timeouts[at]})


def _crossing(index: PathIndex | None, g: Groups, hop_of_rank: np.ndarray, probes: np.ndarray) -> pa.Table:
    """Probes per physical link: each distinct (forward path, ACK path) group ``g`` (``probes[i]`` probes in
    group ``i``) expands to the union of their links once, weighted by its probes (what :func:`link_counts`
    computes from hop strings)."""
    if index is None or len(g.gid) == 0:
        return pa.table({"link": pa.array([], pa.string()), "n": pa.array([], pa.int64())})
    off, ids, names = index.hop_links()
    n_links = max(len(names), 1)
    gl = []  # per path side: group * n_links + link, ascending (groups ascending, each hop's links ascending)
    for codes in g.codes:
        hop = hop_of_rank[codes]
        lengths = off[hop + 1] - off[hop]
        gl.append(np.repeat(np.arange(g.n_groups, dtype=np.int64) * n_links, lengths) +
                  ids[ranges(off[hop], lengths)])
    fwd, rev = gl
    if len(fwd):  # a link on both paths of a group counts once: drop the ACK side's copy (sorted lookup)
        at = np.minimum(np.searchsorted(fwd, rev), len(fwd) - 1)
        rev = rev[fwd[at] != rev]
    pl = np.concatenate([fwd, rev])
    link = pl % n_links
    total = np.bincount(link, weights=probes[pl // n_links], minlength=n_links).astype(np.int64)
    seen = np.flatnonzero(np.bincount(link, minlength=n_links))
    out = pa.table({"link": names.take(pa.array(seen)), "n": pa.array(total[seen], pa.int64())})
    return out.sort_by("link")


def to_bytes(p: WindowPartial) -> bytes:
    """Serialise a partial for the worker → reducer hop: one Arrow IPC stream per table.

    Layout: 8-byte big-endian window start, then for each table (in field order) an
    8-byte length and the IPC stream bytes.
    """
    out = [int(p.window_start_ns).to_bytes(8, "big", signed=True)]
    for f in fields(WindowPartial):
        if f.name == "window_start_ns":
            continue
        t: pa.Table = getattr(p, f.name)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        buf = sink.getvalue().to_pybytes()
        out += [len(buf).to_bytes(8, "big"), buf]
    return b"".join(out)


def from_bytes(data: bytes) -> WindowPartial:
    """Inverse of :func:`to_bytes`.

    Raises:
        ValueError: the bytes are truncated or not a serialised partial.
    """
    try:
        pos = 8
        vals: dict[str, object] = {"window_start_ns": int.from_bytes(data[:8], "big", signed=True)}
        for f in fields(WindowPartial):
            if f.name == "window_start_ns":
                continue
            n = int.from_bytes(data[pos:pos + 8], "big")
            vals[f.name] = pa.ipc.open_stream(data[pos + 8:pos + 8 + n]).read_all()
            pos += 8 + n
    except (pa.ArrowInvalid, IndexError) as e:
        raise ValueError(
            f"not a serialised WindowPartial ({e}); was it written by streams.pingmesh.partial.to_bytes?"
        ) from e
    return WindowPartial(**vals)  # type: ignore[arg-type]


def merge(partials: list[WindowPartial]) -> WindowPartial:
    """Merge partials of one window (the reducer): sums of counts, maxima of upload times.

    Raises:
        ValueError: the list is empty or mixes windows.
    """
    if not partials:
        raise ValueError("merge needs at least one WindowPartial")
    starts = {p.window_start_ns for p in partials}
    if len(starts) != 1:
        raise ValueError(f"merge got partials of several windows: {sorted(starts)}")
    out: dict[str, object] = {"window_start_ns": starts.pop()}
    for f in fields(WindowPartial):
        if f.name != "window_start_ns":
            out[f.name] = merge_table(f.name, [getattr(p, f.name) for p in partials])
    return WindowPartial(**out)  # type: ignore[arg-type]


def merge_table(name: str, tables: list[pa.Table]) -> pa.Table:
    """One table of :func:`merge` (``name`` a :class:`WindowPartial` field other than ``window_start_ns``):
    the tables concatenated (schemas promoted), counts summed per key and sorted by the keys; ``uploads``
    the newest upload per host."""
    t = pa.concat_tables(tables, promote_options="permissive")
    if name == "uploads":
        if t.num_rows:
            g = t.group_by(["host"]).aggregate([("upload_ns", "max")])
            t = g.select(["host", "upload_ns_max"]).rename_columns(["host", "upload_ns"]).sort_by("host")
        return t
    keys, vals = SUM_KEYS[name]
    return _sum_by(t, keys, vals)


def _sum_by(t: pa.Table, keys: list[str], vals: list[str]) -> pa.Table:
    """:func:`_group_sum` on integer codes (:mod:`schemas.group_codes`): the same table (key fields keep
    the input's nullability, as Acero's group-by does), without hashing strings once per group-by."""
    if t.num_rows == 0:
        return _group_sum(t, keys, vals)
    g = sums(keys, [key(t[k]) for k in keys],
             {v: to_numpy(pc.fill_null(t[v], 0)).astype(np.int64) for v in vals})
    fs = [f.with_nullable(t.schema.field(f.name).nullable) if f.name in keys else f for f in g.schema]
    return pa.Table.from_arrays(g.columns, schema=pa.schema(fs))
