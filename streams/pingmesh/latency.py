"""Latency anomalies without loss (R-Pingmesh §5 and Table 2: PFC storms, ECMP congestion).

On a lossless RoCE fabric a PFC storm or an ECMP collision raises the network
RTT tail without a single timeout. Each flow (pinglist, prober RNIC, responder
RNIC, source port) keeps a baseline of its P99 network RTT; a flow whose window
P99 exceeds ``factor`` × baseline (and the baseline by at least
``min_excess_ns``) is *slow*. Slow flows vote over their forward and ACK paths
exactly like failing probes (:func:`streams.pingmesh.tomography.greedy_cover`, counted
per flow): a fabric link gives ``switch_latency``, an access link
``rnic_latency``.

Only the network RTT ``(t5−t2)−(t4−t3)`` (R-Pingmesh §4.2.1) enters, so host
delay rising while the network RTT stays flat is never blamed on the network.
A flow seen for the first time is compared with the median P99 of its
pinglist's flows in the same window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import Key, group, key, to_numpy
from streams.pingmesh.context import WindowContext
from streams.pingmesh.partial import FLOW_KEYS, coded_quantile, link_counts
from streams.pingmesh.tomography import CoverResult, VoteConfig, greedy_cover


@dataclass(frozen=True)
class LatencyConfig:
    """Thresholds of the latency rule.

    Attributes:
        quantile: tail quantile compared with the baseline (0.99).
        factor: window P99 over baseline that makes a flow slow (3x).
        min_excess_ns: and at least this much over the baseline (20 µs), for flows timed by the RNIC.
        min_excess_software_ns: the same for flows with kernel software timestamps (500 µs): their
            network RTT carries the softirq path of two busy hosts, whose tail moves by hundreds of
            µs on its own (measured on the netns lab); PFC storms and congestion move it by more.
        min_samples: successful probes a flow needs in the window (5).
        ewma: weight of a new window in the baseline (0.2); slow windows do not update it.
        min_tail_samples: samples the tail quantile must have above it (3): with n samples the
            quantile used is min(quantile, 1 - 3/n), so one outlier is never a tail.
        min_baseline_windows: windows a flow's baseline needs before the flow is judged (2).
            A tail is anomalous relative to the flow's own history; a cross-flow comparison
            inside one window mistakes scheduler noise (software timestamps on busy hosts)
            for a fabric fault.
        min_slow_share: share of the judged flows crossing a link that must be slow for the link to be
            named (0.5). A congested or PFC-paused port slows nearly every flow through it; scheduler
            noise on software-timestamped hosts slows a few flows anywhere (the netns lab on two shared
            CI cores once made 2 of the 16 flows through one access link slow, and was named for it).
        baseline_idle_ns: a flow without a sample for this long (event time; 2 h, two inter-ToR
            rotation periods, as the worker's path index) loses its baseline: rotated inter-ToR
            tuples and ended jobs' flows never come back, and keeping them grows the reducer's
            state without bound (about 30x in a week at 20 % rotation per hour).
    """

    quantile: float = 0.99
    factor: float = 3.0
    min_excess_ns: int = 20_000
    min_excess_software_ns: int = 500_000
    min_samples: int = 5
    ewma: float = 0.2
    min_baseline_windows: int = 2
    min_tail_samples: int = 3
    min_slow_share: float = 0.5
    baseline_idle_ns: int = 2 * 3_600_000_000_000


def _flow_key(cols: list[pa.Array]) -> pa.Array:
    """``pinglist|prober|responder|src_port`` of each row of the flow columns."""
    return pc.binary_join_element_wise(*(pc.cast(c, pa.string()) for c in cols), "|")


def _max_by_group(col: pa.Array | pa.ChunkedArray, k: Key, gid: np.ndarray, n_groups: int) -> pa.Array:
    """Largest value of ``col`` (coded by ``k``) per group (nulls skipped, null when a group has none), as a
    group-by ``max``: over order-preserving codes, not values."""
    codes = np.where(to_numpy(pc.is_null(col)).astype(bool), -1, k.codes) if col.null_count else k.codes
    top = np.full(n_groups, -1, dtype=np.int64)
    np.maximum.at(top, gid, codes)
    vals = k.values(np.maximum(top, 0))
    return pc.if_else(pa.array(top >= 0), vals, pa.scalar(None, vals.type)) if (top < 0).any() else vals


def flow_quantiles(flows: pa.Table, cfg: LatencyConfig = LatencyConfig(),
                   keys: Mapping[str, Key] | None = None) -> pa.Table:
    """Window P99 network RTT per flow from the merged histograms.

    A flow is (pinglist, prober RNIC, responder RNIC, source port); its rows (one per path pair,
    timestamp source and bucket) are grouped on integer codes (:mod:`schemas.group_codes`) and its
    histogram read in bucket order; the flow key string is built once per flow, not per row.

    Args:
        flows: :attr:`~streams.pingmesh.partial.WindowPartial.flows`.
        cfg: the quantile and its minimum tail.
        keys: codes of ``flows``' key columns known already (column → :class:`Key` of its rows, the reducer's
            fold: :class:`~streams.pingmesh.partial.PartialKeys`); the columns not named are coded here.

    Returns:
        Table of ``flow`` (key ``pinglist|prober|responder|src_port``), the flow
        columns (``fwd_hops``, ``rev_hops``, ``ts_source``: the largest of the flow's, as a group-by
        ``max``), ``n`` (samples) and ``p99_ns`` (float64 ns), sorted by ``flow``.
    """
    if flows.num_rows == 0:
        return pa.table({"flow": pa.array([], pa.string()), "pinglist": pa.array([], pa.string()),
                         "fwd_hops": pa.array([], pa.string()), "rev_hops": pa.array([], pa.string()),
                         "n": pa.array([], pa.int64()), "p99_ns": pa.array([], pa.float64())})
    known = keys or {}
    ids = [known.get(c) or key(flows[c]) for c in FLOW_KEYS[:4]]
    g = group(ids)
    id_cols = [k.values(c) for k, c in zip(ids, g.codes, strict=True)]
    flow = _flow_key(id_cols)
    by_name = to_numpy(pc.sort_indices(flow)).astype(np.int64)  # flows in key-string order
    rank = np.empty(g.n_groups, dtype=np.int64)
    rank[by_name] = np.arange(g.n_groups, dtype=np.int64)
    r = rank[g.gid]
    n = to_numpy(flows["n"]).astype(np.int64)
    _, q = coded_quantile(r, g.n_groups, to_numpy(flows["bucket"]), n, cfg.quantile, cfg.min_tail_samples)
    take = pa.array(by_name)
    cols = {"flow": flow.take(take)}
    cols |= {c: a.take(take) for c, a in zip(FLOW_KEYS[:4], id_cols, strict=True)}
    cols |= {c: _max_by_group(flows[c], known.get(c) or key(flows[c]), r, g.n_groups) for c in FLOW_KEYS[4:]}
    cols["n"] = pa.array(np.bincount(r, weights=n, minlength=g.n_groups).round().astype(np.int64))
    cols["p99_ns"] = pa.array(q, pa.float64())
    return pa.table(cols)


def slow_flows(fq: pa.Table, baseline: pa.Table | None, cfg: LatencyConfig = LatencyConfig()) -> pa.Table:
    """Mark slow flows: ``fq`` plus ``baseline_ns`` and ``slow`` (bool).

    Args:
        fq: output of :func:`flow_quantiles`.
        baseline: table ``flow``, ``baseline_ns`` from earlier windows, or None.
    """
    if fq.num_rows == 0:
        return fq.append_column("baseline_ns", pa.array([], pa.float64())).append_column(
            "slow", pa.array([], pa.bool_()))
    t = fq
    if baseline is not None and baseline.num_rows:
        known = baseline.filter(pc.greater_equal(baseline["windows"], cfg.min_baseline_windows))
        # one flow per row on both sides: a lookup keeps fq's rows and order (a join would re-sort them by flow)
        base = known["baseline_ns"].take(pc.index_in(fq["flow"], value_set=known["flow"]))
    else:
        base = pa.nulls(fq.num_rows, pa.float64())
    has_base = pc.is_valid(base).to_numpy(zero_copy_only=False)
    b = np.asarray(pc.fill_null(base, np.inf).to_numpy(zero_copy_only=False), dtype=np.float64)
    p99 = t["p99_ns"].to_numpy()
    enough = t["n"].to_numpy() >= cfg.min_samples
    software = np.asarray(pc.equal(t["ts_source"], "software").to_numpy(zero_copy_only=False), dtype=bool)
    excess = np.where(software, cfg.min_excess_software_ns, cfg.min_excess_ns)
    slow = has_base & (p99 > cfg.factor * b) & (p99 - b > excess) & enough
    b = np.where(has_base, b, np.nan)
    return t.append_column("baseline_ns", pa.array(b)).append_column("slow", pa.array(slow))


def latency_cover(marked: pa.Table, vote: VoteConfig = VoteConfig(),
                  cfg: LatencyConfig = LatencyConfig()) -> CoverResult:
    """Vote slow flows over their forward and ACK paths (one vote per slow flow and link).

    A link is named only when at least ``cfg.min_slow_share`` of the judged flows crossing it are slow
    (judged: flows with ``min_samples``; a flow too sparse to be slow says nothing either way).

    Flows per link (the vote's denominator) are counted only when a flow is slow: in most windows none
    is, and the count expands every flow of the window to its links.
    """
    if not pc.any(marked["slow"]).as_py():
        return CoverResult([], 0, 0, 0)  # what the cover gives without failing groups
    judged = marked.filter(pc.greater_equal(marked["n"], cfg.min_samples))
    ones = pa.array(np.ones(judged.num_rows, np.int64))
    allf = pa.table({"fwd_hops": judged["fwd_hops"], "rev_hops": judged["rev_hops"], "n": ones})
    crossing = link_counts(allf)
    slow = allf.filter(judged["slow"])
    return greedy_cover(slow, crossing, replace(vote, min_ratio=max(vote.min_ratio, cfg.min_slow_share)))


def update_baseline(baseline: pa.Table | None, marked: pa.Table, cfg: LatencyConfig = LatencyConfig(),
                    now_ns: int | None = None) -> pa.Table:
    """New per-flow baseline: EWMA of window P99 over flows that were not slow (ns).

    ``now_ns`` (the window's start, event time) stamps the flows probed in the window (slow or not)
    in ``last_ns`` and drops flows not probed for ``cfg.baseline_idle_ns``; None keeps every flow.

    Returns:
        Table ``flow``, ``baseline_ns``, ``windows`` (windows that built it), ``last_ns`` (window the flow
        was last probed in; 0 when ``now_ns`` was never given), one row per flow probed within the limit.
    """
    ok = pc.and_(pc.invert(marked["slow"]), pc.greater_equal(marked["n"], cfg.min_samples))
    stamp = pa.scalar(0 if now_ns is None else now_ns, pa.int64())
    if baseline is None or baseline.num_rows == 0:
        first = marked.filter(ok)
        return pa.table({"flow": first["flow"], "baseline_ns": first["p99_ns"],
                         "windows": pa.array(np.ones(first.num_rows, np.int64)),
                         "last_ns": pa.array(np.full(first.num_rows, stamp.as_py(), np.int64))}).sort_by("flow")
    if "last_ns" not in baseline.column_names:  # a baseline built before flows carried when they were probed
        baseline = baseline.append_column("last_ns", pa.array(np.full(baseline.num_rows, stamp.as_py(), np.int64)))
    new = pc.if_else(ok, marked["p99_ns"], pa.scalar(None, pa.float64()))
    # a full outer join on flow, by one lookup (one flow per row on both sides): the baseline's rows, each with
    # its flow's new value if probed, then the flows probed for the first time
    at = pc.index_in(marked["flow"], value_set=baseline["flow"])  # hashes the baseline's flows, the fewer
    hit = to_numpy(pc.is_valid(at)).astype(bool)
    of_base = np.full(baseline.num_rows, -1, dtype=np.int64)  # baseline row -> its flow's row in marked
    of_base[to_numpy(pc.drop_null(at)).astype(np.int64)] = np.flatnonzero(hit)
    fresh = pa.array(~hit)
    k = marked.num_rows - int(hit.sum())
    take = pa.array(of_base, mask=of_base < 0)

    def both(a: pa.ChunkedArray | pa.Array, b: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray:
        b = b.cast(a.type)
        return pa.chunked_array([*(a.chunks if isinstance(a, pa.ChunkedArray) else [a]),
                                 *(b.chunks if isinstance(b, pa.ChunkedArray) else [b])], a.type)

    flow = both(baseline["flow"], marked["flow"].filter(fresh))
    old = both(baseline["baseline_ns"], pa.nulls(k, pa.float64()))
    new_j = both(new.take(take), new.filter(fresh))
    probed = both(pa.array(of_base >= 0), pa.array(np.ones(k, bool)))
    upd = pc.coalesce(pc.add(pc.multiply(old, 1 - cfg.ewma), pc.multiply(new_j, cfg.ewma)), old, new_j)
    n = pc.add(pc.fill_null(both(baseline["windows"], pa.nulls(k, pa.int64())), 0),
               pc.cast(pc.is_valid(new_j), pa.int64()))
    last = pc.if_else(probed, stamp, both(baseline["last_ns"], pa.nulls(k, pa.int64())))
    out = pa.table({"flow": flow, "baseline_ns": upd, "windows": n, "last_ns": last})
    keep = pc.is_valid(upd)  # a flow probed only while slow has no baseline yet
    if now_ns is not None:
        keep = pc.and_(keep, pc.greater_equal(last, now_ns - cfg.baseline_idle_ns))
    return out.filter(keep).sort_by("flow")


def latency_step(ctx: WindowContext, cfg: LatencyConfig, vote: VoteConfig) -> None:
    """Step 5: slow flows without loss voted over their paths; ``switch_latency`` / ``rnic_latency``
    verdicts; the per-flow baselines move on (slow windows excluded).

    Confidence: the vote's (support × ratio of slow flows × margin); ties make no claim.
    """
    fq = flow_quantiles(ctx.partial.flows, cfg, ctx.keys.get("flows"))
    marked = slow_flows(fq, ctx.state.flow_baseline, cfg)
    if marked.num_rows:
        lat = latency_cover(marked, vote, cfg)
        for s in lat.suspects:
            if s.tied_with:
                continue
            kind, loc = ("rnic_latency", s.access_rnic) if s.access_rnic else ("switch_latency", s.link)
            ctx.emit(kind, loc, s.ratio, s.confidence, s.failed, s.crossing,
                     {"slow_flows": s.failed, "flows": s.crossing, "link": s.link})
    ctx.state.flow_baseline = update_baseline(ctx.state.flow_baseline, marked, cfg, now_ns=ctx.ws)
