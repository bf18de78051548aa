"""Traced paths as links: the vocabulary of tomography (R-Pingmesh §4.3, Algorithm 1).

A ``path.v1`` row lists the hops of one 5-tuple as comma-separated node names
from the source RNIC to the destination RNIC. Voting is over *physical* links:
a dead cable drops both directions, so a probe whose forward path crosses
``A→S3`` and a probe whose ACK path crosses ``S3→A`` vote for the same link.
A link is named ``lower->upper``: in a valley-free Clos path the hops climb to
the middle node and descend, so each link is named from its end nearer the
RNIC (``A1->A``, ``A->S3``, ``B->S3``). The first and last link of a path are
*access links* (an RNIC, its cable, its ToR port): R-Pingmesh cannot tell these
apart and calls them RNIC problems.

An *incomplete* trace (``complete`` false: a hop stopped answering) ends at the last
hop that answered. The index prefers a tuple's newest complete trace (a silent fault
does not reroute; the dead hop is on the known path). With no complete trace known,
the tail is resolved from the complete traces of other tuples when it is unique (a
spine's only link down to the destination's ToR, a ToR's link to the destination
RNIC); otherwise the path is ``X,*``: the pseudo-link ``X->*`` ("the next hop after X
did not answer"), which the vote reports as ``undetermined``, never as a link.

Probes find their paths by 5-tuple: the forward trace has the probe's
``(src_ip, dst_ip, src_port, dst_port)``; the ACK path is the responder's trace
of the reverse 5-tuple: addresses swapped, ports as in the probe (the simulator's
convention, RoCEv2's fixed destination port 4791), or, failing that, addresses
and ports both swapped (a plain UDP reply).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

LINK_SEP = "->"
KEY = ("src_ip", "dst_ip", "src_port", "dst_port")
NO_ANSWER = "*"
"""Hop name that ends an incomplete trace whose next hop is unknown (``X,*``: link ``X->*``)."""


def explode_links(hops: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Physical links of each path, vectorised.

    Args:
        hops: string array, one comma-separated hop list per path ('' or null: unknown).

    Returns:
        Table with ``path`` (int64 index into ``hops``), ``link`` (``lower->upper``)
        and ``access_rnic`` (the RNIC end of an access link, else null), one row
        per link of each path.
    """
    if isinstance(hops, pa.ChunkedArray):
        hops = hops.combine_chunks()
    hops = pc.fill_null(hops, "")
    lists = pc.split_pattern(hops, ",")
    lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    lengths = np.where(pc.equal(hops, "").to_numpy(zero_copy_only=False), 0, lengths)
    flat = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(object)
    parent = pc.list_parent_indices(lists).to_numpy().astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(pc.list_value_length(lists).to_numpy())[:-1]]).astype(np.int64)
    pos = np.arange(len(flat), dtype=np.int64) - starts[parent]
    n = lengths[parent]
    keep = pos < n - 1  # element i starts link (i, i+1)
    i_idx = np.nonzero(keep)[0]
    a = flat[i_idx]
    b = flat[i_idx + 1]
    p = pos[i_idx]
    plen = n[i_idx]
    mid = (plen - 1) // 2
    up = p + 1 <= mid
    lower = np.where(up, a, b)
    upper = np.where(up, b, a)
    dark = (a == NO_ANSWER) | (b == NO_ANSWER)
    lower = np.where(dark, np.where(a == NO_ANSWER, b, a), lower)
    upper = np.where(dark, NO_ANSWER, upper)
    link = pc.binary_join_element_wise(pa.array(lower, pa.string()), pa.array(upper, pa.string()), LINK_SEP)
    first = p == 0
    last = p == plen - 2
    access = np.where(dark, None, np.where(first, a, np.where(last, b, None)))
    return pa.table(
        {
            "path": pa.array(parent[i_idx], pa.int64()),
            "link": link,
            "access_rnic": pa.array(access, pa.string()),
        }
    )


def latest_paths(paths: pa.Table) -> pa.Table:
    """The newest trace per (direction, 5-tuple) of a ``path.v1`` table.

    Returns:
        Table with ``direction``, the four 5-tuple columns and ``hops``, as :class:`PathIndex`
        keeps them (complete traces first; incomplete tails resolved or ``X,*``).
    """
    cols = ["direction", *KEY]
    if paths.num_rows == 0:
        return paths.select([*cols, "hops"])
    return PathIndex(paths).latest  # type: ignore[return-value]


class PathIndex:
    """The newest trace per (direction, 5-tuple), built once and reused for every batch.

    Build it from all ``path.v1`` rows known (:meth:`update` with each new path batch);
    :func:`attach_paths` joins probes against it.
    """

    def __init__(self, paths: pa.Table | None = None) -> None:
        self._raw: pa.Table | None = None
        self.latest: pa.Table | None = None
        self._ends = _TraceEnds()
        if paths is not None:
            self.update(paths)

    def update(self, paths: pa.Table) -> None:
        """Fold a ``path.v1`` batch in: per direction and 5-tuple the newest complete trace wins,
        else the newest incomplete one (its tail resolved as the module docstring says)."""
        if paths.num_rows == 0:
            return
        cols = ["direction", *KEY, "hops", "trace_ns", "complete"]
        new = paths.select(cols) if "complete" in paths.column_names else paths.select(cols[:-1]).append_column(
            "complete", pa.array(np.ones(paths.num_rows, bool)))
        new = new.append_column("trace", new["hops"])  # the hops as traced (``hops`` may be resolved)
        both = new if self._raw is None else pa.concat_tables([self._raw, new], promote_options="permissive")
        t = both.sort_by([("complete", "descending"), ("trace_ns", "descending"), ("trace", "ascending")])
        idx = t.select(cols[:5]).append_column("_i", pa.array(np.arange(t.num_rows))).group_by(
            cols[:5]).aggregate([("_i", "min")])
        self._ends.learn(new.filter(new["complete"]))
        self._raw = t.take(idx["_i_min"])
        if not pc.all(self._raw["complete"]).as_py():
            self._raw = _resolve_incomplete(self._raw, self._ends)
        self.latest = self._raw.select(cols[:6])


class _TraceEnds:
    """What complete traces tell about the fabric: RNIC → ToR, address → RNIC, and the ways down:
    for each switch on a descending part of a path, the hops from it down to the ToR.
    Learnt per batch over the distinct values only (vectorised)."""

    def __init__(self) -> None:
        self.tor_of: dict[str, str] = {}
        self.ip_rnic: dict[str, str] = {}
        self.desc: dict[tuple[str, str], tuple[str, ...]] = {}  # (switch, ToR) -> hops below it to the ToR
        self.below: dict[str, set[str]] = {}  # switch -> nodes seen right below it

    def descent(self, node: str, tor: str, prev: str | None = None) -> tuple[str, ...] | None:
        """The hops from ``node`` down to ``tor`` (``tor`` included), if the traces tell them: seen, or
        seen from every sibling of ``node`` (a switch whose children include all of ``node``'s: the
        spines of a two-tier Clos, the cores above one aggregation plane) and the same from each.
        ``prev``, the hop before ``node`` on the trace, counts as a child of ``node`` when it is
        some switch's child and ``node`` is not its child (the trace was still climbing)."""
        if (node, tor) in self.desc:
            return self.desc[(node, tor)]
        mine = set(self.below.get(node, ()))
        if prev is not None and node not in self.below.get(prev, ()) and \
                any(prev in kids for kids in self.below.values()):
            mine.add(prev)
        if not mine:
            return None
        ways = {self.desc[(u, tor)] for u, kids in self.below.items()
                if u != node and mine <= kids and (u, tor) in self.desc}
        return ways.pop() if len(ways) == 1 else None

    def learn(self, done: pa.Table) -> None:
        if done.num_rows == 0:
            return
        for h in pc.unique(pc.fill_null(done["trace"], "")).to_pylist():
            p = h.split(",")
            n = len(p)
            if n < 3:
                continue
            self.tor_of[p[0]] = p[1]
            self.tor_of[p[-1]] = p[-2]
            for j in range((n - 1) // 2, n - 2):
                self.desc.setdefault((p[j], p[-2]), tuple(p[j + 1:-1]))
                self.below.setdefault(p[j], set()).add(p[j + 1])
        g = done.group_by(["src_ip", "dst_ip", "trace"]).aggregate([])
        for s_ip, d_ip, h in zip(g["src_ip"].to_pylist(), g["dst_ip"].to_pylist(), g["trace"].to_pylist(),
                                 strict=True):
            if s_ip not in self.ip_rnic or d_ip not in self.ip_rnic:
                p = (h or "").split(",")
                self.ip_rnic.setdefault(s_ip, p[0])
                self.ip_rnic.setdefault(d_ip, p[-1])


def _resolve_incomplete(t: pa.Table, ends: _TraceEnds) -> pa.Table:
    """Complete the tails of incomplete traces from the complete ones where the next hop is unique."""
    tor_of, ip_rnic = ends.tor_of, ends.ip_rnic
    mask = pc.invert(t["complete"])
    sub = t.filter(mask)
    out = []
    for tr, d_ip in zip(sub["trace"].to_pylist(), sub["dst_ip"].to_pylist(), strict=True):
        hops = [x for x in (tr or "").split(",") if x and x != NO_ANSWER]
        dst = ip_rnic.get(d_ip)
        tor = tor_of.get(dst) if dst else None
        last = hops[-1] if hops else None
        if not hops or last == dst:
            out.append(",".join(hops))
        elif last == tor:
            out.append(",".join([*hops, dst]))
        elif tor is not None and len(hops) >= 2 and (way := ends.descent(last, tor, hops[-2])) is not None:
            out.append(",".join([*hops, *way, dst]))
        else:
            out.append(f"{last},{NO_ANSWER}")
    hops_col = pc.replace_with_mask(t["hops"].combine_chunks(), mask.combine_chunks(), pa.array(out, pa.string()))
    return t.set_column(t.schema.get_field_index("hops"), "hops", hops_col)


def attach_paths(probes: pa.Table, paths: pa.Table | PathIndex | None) -> pa.Table:
    """Add ``fwd_hops`` and ``rev_hops`` (string, '' when untraced) to a probe table.

    Args:
        probes: ``probe.v1``-shaped rows (needs the 5-tuple columns).
        paths: a :class:`PathIndex` (fast: built once), or ``path.v1`` rows (all traces
            known so far), or ``None`` (every path unknown).

    Returns:
        ``probes`` with two more columns, row order kept.
    """
    n = probes.num_rows
    lp = paths.latest if isinstance(paths, PathIndex) else (
        latest_paths(paths) if paths is not None and paths.num_rows else None)
    if lp is None or lp.num_rows == 0 or n == 0:
        empty = pa.array([""] * n, pa.string())
        return probes.append_column("fwd_hops", empty).append_column("rev_hops", empty)
    key = probes.select(list(KEY)).append_column("_row", pa.array(np.arange(n), pa.int64()))
    found = {}
    for direction, names, col in (
        ("forward", list(KEY), "fwd_hops"),
        ("reverse", ["dst_ip", "src_ip", "src_port", "dst_port"], "rev_hops"),
        ("reverse", ["dst_ip", "src_ip", "dst_port", "src_port"], "rev_swapped"),
    ):
        side = lp.filter(pc.equal(lp["direction"], direction)).drop(["direction"])
        side = side.rename_columns([*names, col])
        j = key.join(side, list(names), join_type="left outer").sort_by("_row")
        found[col] = j[col]
    rev = pc.fill_null(pc.coalesce(found["rev_hops"], found["rev_swapped"]), "")
    return probes.append_column("fwd_hops", pc.fill_null(found["fwd_hops"], "")).append_column("rev_hops", rev)


def probe_links(fwd_hops: pa.Array, rev_hops: pa.Array) -> pa.Table:
    """Distinct physical links of each probe's forward path and ACK path together.

    A link on both the forward and the ACK path of one probe counts once for it
    (one vote per failing probe and link, Algorithm 1).

    Returns:
        Table with ``row`` (index of the probe) , ``link`` and ``access_rnic``.
    """
    n = len(fwd_hops)
    both = pa.concat_arrays([_combine(fwd_hops), _combine(rev_hops)])
    ex = explode_links(both)
    row = pc.if_else(pc.less(ex["path"], n), ex["path"], pc.subtract(ex["path"], n))
    t = pa.table({"row": row, "link": ex["link"], "access_rnic": ex["access_rnic"]})
    if t.num_rows == 0:
        return t
    g = t.group_by(["row", "link"]).aggregate([("access_rnic", "max")])
    g = g.select(["row", "link", "access_rnic_max"]).rename_columns(["row", "link", "access_rnic"])
    return g.sort_by([("row", "ascending"), ("link", "ascending")])


def _combine(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
