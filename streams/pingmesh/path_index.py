"""The path index: which path each probe took, by 5-tuple, kept bounded (R-Pingmesh §4.3).

A worker folds every ``path.v1`` batch of ``paths.traced`` into one :class:`PathIndex` and looks up
a step's probes in it (:func:`attach_paths`, :meth:`PathIndex.hop_ids`); the links of each hop
string come from :func:`streams.pingmesh.links.explode_links`.

An *incomplete* trace (``complete`` false: a hop stopped answering) ends at the last
hop that answered, or holds ``*`` for each hop that did not (hops after it may have); only
the hops before its first ``*`` are taken as known. The index prefers a tuple's newest
complete trace (a silent fault does not reroute; the dead hop is on the known path), unless a newer incomplete trace
answered from hops that are not the held trace's first hops: the tuple was rerouted
(ECMP rehash, a link taken out) and the held trace is stale. With no complete trace known,
the tail is resolved from the complete traces of other tuples when it is unique (a
spine's only link down to the destination's ToR, a ToR's link to the destination
RNIC); otherwise the path is ``X,*``: the pseudo-link ``X->*`` ("the next hop after X
did not answer"), which the vote reports as ``undetermined``, never as a link. A trace
that stopped at a ToR whose every switch above goes straight down to the destination's
ToR ``Y`` (a two-tier Clos) is ``X,*,Y``: the pseudo-links ``X->*`` and ``Y->*``, the
links up from X and the links up from Y, one of which the packet died on.

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

from schemas.group_codes import ranges, to_numpy
from streams.pingmesh.links import NO_ANSWER, explode_links

KEY = ("src_ip", "dst_ip", "src_port", "dst_port")
"""The 5-tuple columns a trace and a probe are matched on."""
HOUR_NS = 3_600_000_000_000
# Inter-ToR 5-tuples rotate every hour (R-Pingmesh §4.1, Eq. 1 picks new source ports): a tuple no probe
# has used for two rotation periods is gone from every pinglist.
EVICT_AFTER_NS = 2 * HOUR_NS
DIRECT_BITS = 15
"""Bits of an address id in a direct pair id (:class:`PathIndex`): up to 32,768 addresses, two ids and the
direction and ports fit the entry key's 63 bits."""
_COLS = ("direction", *KEY)


def _off_path(hops: str, held: str) -> bool:
    """Whether a hop that answered in the incomplete trace ``hops`` differs from ``held``'s hop at that place.

    Both are comma-separated node names; a ``*`` (no answer: a lost ICMP reply, a dead hop) matches any hop.
    ``_off_path("A,S2,*", "A,S1,C,C1")`` is True; ``_off_path("A,S1,*", "A,S1,C,C1")`` and
    ``_off_path("A,*,C,C1", "A,S1,C,C1")`` are False."""
    path = held.split(",")
    seen = [x for x in hops.split(",") if x]
    return len(seen) > len(path) or any(x != NO_ANSWER and x != y for x, y in zip(seen, path, strict=False))


class PathIndex:
    """The newest trace per (direction, 5-tuple), kept up to date for every batch; bounded.

    :meth:`update` folds in a ``path.v1`` batch in O(new paths) (a dict keyed by direction and
    5-tuple; newer ``trace_ns`` wins, ties go to the smaller hop string). :attr:`latest` is the
    index as an Arrow table, rebuilt only when it changed, once per worker step at most.
    :func:`attach_paths` records which entries probes used (:meth:`touch`); an entry no probe has
    used for ``evict_after_ns`` of event time (two inter-ToR rotation periods) is evicted, so the
    index holds what the pinglists probe now, not every tuple ever traced.

    Attributes:
        evicted: entries evicted so far.
    """

    def __init__(self, paths: pa.Table | None = None, evict_after_ns: int = EVICT_AFTER_NS) -> None:
        self.evict_after_ns = evict_after_ns
        self.evicted = 0
        self._pos: dict[tuple, int] = {}
        self._keys: list[tuple] = []
        self._hops: list[str] = []
        self._trace_ns: list[int] = []
        self._complete: list[bool] = []
        self._trace: list[str] = []  # hops as traced; ``_hops`` holds them resolved (incomplete traces)
        self._dark: set[int] = set()  # entries whose trace is incomplete (few: a fault's)
        self._ends = _TraceEnds()
        self._used_ns = np.zeros(0, dtype=np.int64)
        self._now_ns = 0
        self._swept_ns = 0
        self._latest: pa.Table | None = None
        # Integer ids for the probe lookup (:meth:`hop_ids`): address -> id, (src id, dst id) -> pair id,
        # per entry its key (pair id, direction, ports in one int64) and its hop-string id; hop strings
        # interned ('' is id 0), their links in CSR form, filled lazily for new hop strings.
        self._ip: dict[str, int] = {}
        # While the addresses fit in DIRECT_BITS each (32,768: a 10,000-RNIC fabric's), an address pair's id is
        # the two address ids side by side (no pair table: a probe's key needs no lookup of its pair); past that,
        # pair ids come from a table (``_pair``, ``_pair_keys``), converted once (:meth:`_to_pair_table`).
        self._direct = True
        self._pair: dict[int, int] = {}
        self._ip_arr = pa.array([], pa.string())  # address of each id (dict order = id order)
        self._pair_keys = np.zeros(0, dtype=np.int64)
        self._ekey = np.zeros(0, dtype=np.int64)
        self._ehop = np.zeros(0, dtype=np.int64)
        self._hop: dict[str, int] = {"": 0}
        self._hop_strs: list[str] = [""]
        self._hop_arr: pa.Array = pa.array([""], pa.string())
        self._link: dict[str, int] = {}
        self._link_strs: list[str] = []
        self._link_off = np.zeros(1, dtype=np.int64)
        self._link_ids = np.zeros(0, dtype=np.int64)
        if paths is not None:
            self.update(paths)

    def __len__(self) -> int:
        return len(self._pos)

    def update(self, paths: pa.Table) -> None:
        """Fold a ``path.v1`` batch in (newer ``trace_ns`` wins per direction and 5-tuple): O(rows of the batch).

        Incomplete traces are resolved (:meth:`_resolve`) when they arrive; the ones already held are
        resolved again only when the batch's complete traces taught something new about the fabric
        (:meth:`_TraceEnds.learn`), since nothing else changes their resolution: no pass over the index."""
        if paths.num_rows == 0:
            return
        cols = [paths[c].to_pylist() for c in (*_COLS, "hops", "trace_ns")]
        complete = (paths["complete"].to_pylist() if "complete" in paths.column_names
                    else [True] * paths.num_rows)
        grown = []
        new_rows: list[int] = []
        changed: list[int] = []
        touched: list[int] = []  # incomplete traces new or replaced in this batch
        for j, (*key, hops, trace_ns, done) in enumerate(zip(*cols, complete, strict=True)):
            k = tuple(key)
            i = self._pos.get(k)
            done = bool(done)
            if i is None:
                self._pos[k] = len(self._keys)
                grown.append(trace_ns)
                new_rows.append(j)
                self._keys.append(k)
                self._hops.append(hops)
                self._trace.append(hops)
                self._trace_ns.append(trace_ns)
                self._complete.append(done)
                if not done:
                    self._dark.add(len(self._keys) - 1)
                    touched.append(len(self._keys) - 1)
            else:
                # a complete trace beats an incomplete one (a silent fault does not reroute), unless the newer
                # incomplete one saw hops off the held path: the tuple was rerouted and the held trace is stale.
                # Else newer wins, ties to the smaller hop string
                old_ns, old_done = self._trace_ns[i], self._complete[i]
                if (done and not old_done) or (done == old_done and (
                        trace_ns > old_ns or (trace_ns == old_ns and hops < self._trace[i]))) or (
                        old_done and not done and trace_ns > old_ns and _off_path(hops, self._trace[i])):
                    self._hops[i], self._trace[i], self._trace_ns[i], self._complete[i] = hops, hops, trace_ns, done
                    changed.append(i)
                    if done:
                        self._dark.discard(i)
                    else:
                        self._dark.add(i)
                        touched.append(i)
        start = len(self._ekey)
        self._ekey = np.concatenate([self._ekey, self._tuple_keys(paths.take(pa.array(new_rows, pa.int64())))])
        self._ehop = np.concatenate([self._ehop, self._hop_ids_of(self._hops[start:])])
        if changed:
            self._ehop[changed] = self._hop_ids_of([self._hops[i] for i in changed])
        ok = [j for j, d in enumerate(complete) if d]
        learnt = self._ends.learn([cols[1][j] for j in ok], [cols[2][j] for j in ok], [cols[5][j] for j in ok])
        if learnt and self._dark:
            self._resolve(sorted(self._dark))
        elif touched:
            self._resolve(sorted(set(touched)))
        if grown:  # a fresh trace counts as a use: the tuple is on a pinglist now
            self._used_ns = np.concatenate([self._used_ns, np.asarray(grown, dtype=np.int64)])
        self._now_ns = max(self._now_ns, int(max(cols[-1])))
        self._latest = None

    def _resolve(self, entries: list[int]) -> None:
        """Complete the tails of the incomplete traces of ``entries`` (ascending) from the complete ones
        where the next hop is unique (the module docstring), else ``X,*``."""
        ends = self._ends
        for i in entries:
            hops = [x for x in (self._trace[i] or "").split(",") if x]
            if NO_ANSWER in hops:  # what answered after a silent hop cannot say which node that hop was
                hops = hops[:hops.index(NO_ANSWER)]
            dst = ends.ip_rnic.get(self._keys[i][2])
            tor = ends.tor_of.get(dst) if dst else None
            last = hops[-1] if hops else None
            if not hops or last == dst:
                out = ",".join(hops)
            elif self._keys[i][1] == self._keys[i][2]:
                # a bounced probe (to its own address, turned around by a switch above): the way down is
                # known, the way up past the last answer is not, so the dead link is X's next one up
                out = f"{last},{NO_ANSWER}"
            elif last == tor:
                out = ",".join([*hops, dst])  # type: ignore[list-item]
            elif tor is not None and len(hops) >= 2 and (way := ends.descent(last, tor, hops[-2])) is not None:
                out = ",".join([*hops, *way, dst])  # type: ignore[list-item]
            elif tor is not None and ends.one_switch_between(last, tor):
                # stopped at a ToR whose every switch above goes straight down to the destination's ToR: the
                # silent link is one of the two at the unknown switch, the way up or the way down (a spine
                # that lost its link to the destination's ToR drops what it cannot route, and its ICMP
                # answers are rate-limited away)
                out = f"{last},{NO_ANSWER},{tor}"
            else:
                out = f"{last},{NO_ANSWER}"
            if out != self._hops[i]:
                self._hops[i] = out
                self._ehop[i] = self._hop_id(out)
                self._latest = None

    @property
    def latest(self) -> pa.Table | None:
        """``direction``, the 5-tuple, ``hops`` and ``_entry`` (position, for :meth:`touch`); None when empty."""
        if not self._pos:
            return None
        if self._latest is None:
            live = np.fromiter(self._pos.values(), dtype=np.int64, count=len(self._pos))
            keys = [self._keys[i] for i in live]
            cols = list(zip(*keys, strict=True))
            self._latest = pa.table({
                "direction": pa.array(cols[0], pa.string()), "src_ip": pa.array(cols[1], pa.string()),
                "dst_ip": pa.array(cols[2], pa.string()), "src_port": pa.array(cols[3], pa.uint16()),
                "dst_port": pa.array(cols[4], pa.uint16()),
                "hops": pa.array([self._hops[i] for i in live], pa.string()),
                "_entry": pa.array(live, pa.int64()),
            })
        return self._latest

    def touch(self, entries: np.ndarray, at_ns: int) -> None:
        """Entries (``_entry`` values) used by probes up to event time ``at_ns``; evicts stale ones now and then."""
        self._used(entries, at_ns)
        self.sweep()

    def _used(self, entries: np.ndarray, at_ns: int) -> None:
        if len(entries):  # one time for all: repeated entries write the same value
            self._used_ns[entries] = np.maximum(self._used_ns[entries], at_ns)
        self._now_ns = max(self._now_ns, at_ns)

    def sweep(self) -> None:
        """Evict what no probe used for ``evict_after_ns`` (checked every quarter of it, event time). An
        eviction renumbers hop-string ids: call it once done with the ids of :meth:`hop_ids`."""
        if self._now_ns - self._swept_ns >= self.evict_after_ns // 4:
            self.evict(self._now_ns - self.evict_after_ns)
            self._swept_ns = self._now_ns

    def evict(self, before_ns: int) -> int:
        """Drop entries no probe used since ``before_ns`` (event time); compacts storage; returns how many."""
        live = np.fromiter(self._pos.values(), dtype=np.int64, count=len(self._pos))
        keep = live[self._used_ns[live] >= before_ns]
        gone = len(live) - len(keep)
        if gone == 0 and len(self._keys) < 2 * len(live) + 1024:
            return 0
        keep.sort()
        self._keys = [self._keys[i] for i in keep]
        self._hops = [self._hops[i] for i in keep]
        self._trace_ns = [self._trace_ns[i] for i in keep]
        self._complete = [self._complete[i] for i in keep]
        self._trace = [self._trace[i] for i in keep]
        self._dark = {j for j, done in enumerate(self._complete) if not done}
        self._used_ns = self._used_ns[keep]
        self._pos = {k: j for j, k in enumerate(self._keys)}
        self._ekey, self._ehop = self._ekey[keep], self._ehop[keep]
        self._compact_ids()
        self.evicted += gone
        self._latest = None
        return gone

    def _compact_ids(self) -> None:
        """Drop pair ids and hop strings no live entry uses (after an eviction): the id tables stay as
        small as the index. Ids are renumbered in their old order, so the links already computed are kept."""
        known = self._ekey >= 0
        if self._direct:  # pair ids are address ids, which never change
            self._compact_hops()
            return
        pids = self._ekey[known] >> 33
        live_p = np.flatnonzero(np.bincount(pids, minlength=len(self._pair_keys)))
        lut = np.zeros(len(self._pair_keys), dtype=np.int64)
        lut[live_p] = np.arange(len(live_p))
        self._ekey[known] = (lut[pids] << 33) | (self._ekey[known] & ((1 << 33) - 1))
        self._pair_keys = self._pair_keys[live_p]
        self._pair = dict(zip(self._pair_keys.tolist(), range(len(self._pair_keys)), strict=True))
        self._compact_hops()

    def _compact_hops(self) -> None:
        """Drop hop strings no live entry uses, renumbered in their old order (their links are kept)."""
        used = np.bincount(self._ehop, minlength=len(self._hop_strs)) > 0
        used[0] = True  # '' stays id 0
        live_h = np.flatnonzero(used)
        lut = np.zeros(len(self._hop_strs), dtype=np.int64)
        lut[live_h] = np.arange(len(live_h))
        self._ehop = lut[self._ehop]
        self._hop_arr = self.hop_strings().take(pa.array(live_h))
        self._hop_strs = [self._hop_strs[i] for i in live_h]
        self._hop = {h: j for j, h in enumerate(self._hop_strs)}
        done = live_h[live_h < len(self._link_off) - 1]  # hop ids whose links are known: a prefix, kept
        lengths = np.diff(self._link_off)[done]
        self._link_ids = self._link_ids[ranges(self._link_off[done], lengths)]
        self._link_off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def _tuple_keys(self, rows: pa.Table) -> np.ndarray:
        """One int64 per (direction, 5-tuple) of ``path.v1`` rows: pair id << 33 | direction << 32 | src
        port << 16 | dst port; -1 for a direction that is neither ``forward`` nor ``reverse`` (no probe
        looks it up). Vectorised; Python only over the distinct addresses and address pairs."""
        if rows.num_rows == 0:
            return np.zeros(0, dtype=np.int64)
        d = to_numpy(pc.fill_null(pc.index_in(rows["direction"], value_set=pa.array(list(_DIRECTION))), -1))
        s, t = self._intern_addresses(rows["src_ip"]), self._intern_addresses(rows["dst_ip"])
        if self._direct and len(self._ip) > 1 << DIRECT_BITS:
            self._to_pair_table()
        if self._direct:
            pid = (s << DIRECT_BITS) | t
        else:
            pairs, inv = np.unique((s << 31) | t, return_inverse=True)
            ids = _lookup(pairs, self._pair_keys, self._pair)  # known pairs: their id; new ones: appended
            new = ids < 0
            ids[new] = len(self._pair_keys) + np.arange(int(new.sum()), dtype=np.int64)
            self._pair.update(zip(pairs[new].tolist(), ids[new].tolist(), strict=True))
            self._pair_keys = np.concatenate([self._pair_keys, pairs[new]])
            pid = ids[inv.ravel()]
        sport = to_numpy(rows["src_port"]).astype(np.int64)
        dport = to_numpy(rows["dst_port"]).astype(np.int64)
        keys = (pid << 33) | (d.astype(np.int64) << 32) | (sport << 16) | dport
        return np.where(d >= 0, keys, -1)

    def _to_pair_table(self) -> None:
        """Leave the direct pair ids (more than ``2**DIRECT_BITS`` addresses): number the entries' address pairs
        in a table and re-key the entries with those ids."""
        known = self._ekey >= 0
        pid = self._ekey[known] >> 33
        pk = ((pid >> DIRECT_BITS) << 31) | (pid & ((1 << DIRECT_BITS) - 1))
        self._pair_keys, inv = np.unique(pk, return_inverse=True)
        self._pair = dict(zip(self._pair_keys.tolist(), range(len(self._pair_keys)), strict=True))
        self._ekey[known] = (inv.ravel().astype(np.int64) << 33) | (self._ekey[known] & ((1 << 33) - 1))
        self._direct = False

    def _intern_addresses(self, col: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """Address id of each value, new addresses added (ids never change)."""
        dic = pc.dictionary_encode(pc.fill_null(_combine(col), ""))
        lut = np.fromiter((self._ip.setdefault(v, len(self._ip)) for v in dic.dictionary.to_pylist()),
                          dtype=np.int64, count=len(dic.dictionary))
        return lut[to_numpy(dic.indices).astype(np.int64)]

    def _hop_ids_of(self, hops: list[str | None]) -> np.ndarray:
        """Hop-string id of each hop list (new strings interned); Python only over the distinct strings."""
        if not hops:
            return np.zeros(0, dtype=np.int64)
        dic = pc.dictionary_encode(pc.fill_null(pa.array(hops, pa.string()), ""))
        lut = _lookup(dic.dictionary, self.hop_strings(), self._hop)
        new = np.flatnonzero(lut < 0)
        if len(new):  # intern the new strings in one go
            strs = dic.dictionary.take(pa.array(new)).to_pylist()
            lut[new] = len(self._hop_strs) + np.arange(len(new), dtype=np.int64)
            self._hop.update(zip(strs, lut[new].tolist(), strict=True))
            self._hop_strs.extend(strs)
        return lut[to_numpy(dic.indices).astype(np.int64)]

    def _hop_id(self, hops: str | None) -> int:
        h = hops or ""
        i = self._hop.get(h)
        if i is None:
            i = self._hop[h] = len(self._hop_strs)
            self._hop_strs.append(h)
        return i

    def hop_ids(self, probes: pa.Table, at_ns: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The forward and ACK path of each probe as hop-string ids (:meth:`hop_strings`; 0 is '', untraced).

        Integer lookups, no join: the probe's addresses become the index's address ids (a dict lookup per
        distinct address of the batch), each 5-tuple one int64 key, found by a hash lookup
        (``pyarrow.compute.index_in``) among the entries' keys. The ACK path is the reverse 5-tuple with
        the probe's ports, else with the ports swapped (module docstring). Records which entries the
        probes used (at the newest ``upload_ns``) but evicts nothing: the ids (and :meth:`hop_strings`,
        :meth:`hop_links`) stay valid until the caller, done with them, calls :meth:`sweep`.

        Args:
            probes: rows with ``src_ip``, ``dst_ip``, ``src_port``, ``dst_port`` (and ``upload_ns``).
            at_ns: when the entries were used (event time, ns); None: the rows' newest ``upload_ns``
                (give it when ``probes`` stand for more rows, e.g. one row per distinct 5-tuple).

        Returns:
            ``(fwd, rev)``: int64 arrays of ``probes.num_rows`` hop ids.
        """
        n = probes.num_rows
        if n == 0 or not self._pos:
            return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        # the batch's distinct 5-tuples (a window's probes repeat each a few times): one hash pass over
        # an int64 per row (the two addresses' batch codes and the ports), then the lookups per tuple
        src, s_ids = self._address_codes(probes["src_ip"])
        dst, t_ids = self._address_codes(probes["dst_ip"])
        pair = src * len(t_ids) + dst
        if len(s_ids) * len(t_ids) >= 1 << 31:  # too many addresses for 31 bits: number the pairs first
            pair = to_numpy(pc.dictionary_encode(pa.array(pair, pa.int64())).indices).astype(np.int64)
            pair_s, pair_t = np.zeros(int(pair.max()) + 1, np.int64), np.zeros(int(pair.max()) + 1, np.int64)
            pair_s[pair], pair_t[pair] = src, dst
        else:
            pair_s = pair_t = None
        sport = to_numpy(probes["src_port"]).astype(np.int64)
        dport = to_numpy(probes["dst_port"]).astype(np.int64)
        d = pc.dictionary_encode(pa.array((pair << 32) | (sport << 16) | dport, pa.int64()))
        u = to_numpy(d.dictionary).astype(np.int64)
        up = u >> 32
        us, ut = (up // len(t_ids), up % len(t_ids)) if pair_s is None else (pair_s[up], pair_t[up])
        fwd, rev, used = self._tuple_hops(s_ids[us], t_ids[ut], (u >> 16) & 0xFFFF, u & 0xFFFF)
        at = at_ns if at_ns is not None else (
            pc.max(probes["upload_ns"]).as_py() if "upload_ns" in probes.column_names else None)
        self._used(used, int(at or 0))  # no eviction here: the ids stay valid until sweep()
        rows = to_numpy(d.indices)
        return fwd[rows], rev[rows]

    def _tuple_hops(self, s: np.ndarray, t: np.ndarray, sport: np.ndarray, dport: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Forward and ACK hop ids of 5-tuples given as index address ids (-1: unknown) and ports, and
        the entries they used. One hash lookup (``pyarrow.compute.index_in``) of int64 keys: the three 5-tuples
        (forward; reverse with the probe's ports, with the ports swapped) among the entries' keys; before it,
        past ``2**DIRECT_BITS`` addresses, one of the address pairs among the pair ids."""
        m = len(s)
        known = (s >= 0) & (t >= 0)
        if self._direct:  # the pair ids are the address ids side by side: no lookup
            f_pid, r_pid = np.where(known, (s << DIRECT_BITS) | t, -1), np.where(known, (t << DIRECT_BITS) | s, -1)
        else:
            pk = np.concatenate([(s << 31) | t, (t << 31) | s])
            pid = _positions(np.where(np.concatenate([known, known]), pk, -2), self._pair_keys)
            f_pid, r_pid = pid[:m], pid[m:]
        q = np.concatenate([(f_pid << 33) | (sport << 16) | dport,
                            (r_pid << 33) | (1 << 32) | (sport << 16) | dport,
                            (r_pid << 33) | (1 << 32) | (dport << 16) | sport])
        e = _positions(np.where(np.concatenate([f_pid, r_pid, r_pid]) >= 0, q, -2), self._ekey)
        fwd, rev, swapped = e[:m], e[m:2 * m], e[2 * m:]
        rev = np.where(rev >= 0, rev, swapped)
        out = [np.where(x >= 0, self._ehop[x], 0) for x in (fwd, rev)]  # not found (-1): '' (id 0)
        return out[0], out[1], e[e >= 0]

    def _address_codes(self, col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(batch code of each value, the index address id of each code (-1: unknown)); nulls get the last
        code, whose id is -1. A hash pass over the rows, a lookup per distinct address."""
        d = pc.dictionary_encode(_combine(col))
        if len(self._ip_arr) < len(self._ip):  # addresses are only added (ids never change)
            self._ip_arr = pa.array(list(self._ip), pa.string())
        lut = to_numpy(pc.fill_null(pc.index_in(d.dictionary, value_set=self._ip_arr), -1)).astype(np.int64)
        codes = to_numpy(pc.fill_null(d.indices, len(d.dictionary))).astype(np.int64)
        return codes, np.concatenate([lut, [-1]])

    def hop_strings(self) -> pa.Array:
        """Hop string of every hop id (:meth:`hop_ids`): a string array, ``[0]`` is ''."""
        if len(self._hop_arr) < len(self._hop_strs):  # new hop strings since the last call: appended
            self._hop_arr = pa.concat_arrays([self._hop_arr, pa.array(self._hop_strs[len(self._hop_arr):],
                                                                      pa.string())])
        return self._hop_arr

    def hop_links(self) -> tuple[np.ndarray, np.ndarray, pa.Array]:
        """The distinct physical links of every hop string, in CSR form: ``(offsets, link ids, link names)``.

        Hop id ``h``'s links are ``link_ids[offsets[h]:offsets[h + 1]]``, ascending, each once; ``link
        names[i]`` is link ``i`` (``lower->upper``, :func:`explode_links`, pseudo-links ``X->*`` included).
        Computed once per new hop string (vectorised), not per probe.
        """
        done = len(self._link_off) - 1
        if done < len(self._hop_strs):
            new = pa.array(self._hop_strs[done:], pa.string())
            ex = explode_links(new)
            d = pc.dictionary_encode(ex["link"].combine_chunks())
            lut = np.fromiter((self._link.setdefault(v, len(self._link)) for v in d.dictionary.to_pylist()),
                              dtype=np.int64, count=len(d.dictionary))
            self._link_strs += list(self._link)[len(self._link_strs):]
            ids = lut[to_numpy(d.indices)] if len(ex) else np.zeros(0, dtype=np.int64)
            path = to_numpy(ex["path"]).astype(np.int64)
            width = max(len(self._link), 1)
            pl = np.unique(path * width + ids)  # per hop string, each link once, ascending
            lengths = np.bincount(pl // width, minlength=len(new))
            self._link_ids = np.concatenate([self._link_ids, pl % width])
            self._link_off = np.concatenate([self._link_off, self._link_off[-1] + np.cumsum(lengths)])
        return self._link_off, self._link_ids, pa.array(self._link_strs, pa.string())


_DIRECTION = {"forward": 0, "reverse": 1}


def _lookup(values: np.ndarray | pa.Array, table: np.ndarray | pa.Array, ids: dict) -> np.ndarray:
    """Id of each of a batch's distinct ``values`` (-1: new), where ``table[id]`` is the value and ``ids``
    the same as a dict: per value from the dict when the batch is small against the table (O(batch)),
    else one hash lookup of the batch in the table (O(table), no Python per value)."""
    if len(values) * 8 < len(table):
        vals = values.to_pylist() if isinstance(values, pa.Array) else values.tolist()
        return np.fromiter((ids.get(v, -1) for v in vals), dtype=np.int64, count=len(vals))
    found = pc.index_in(values if isinstance(values, pa.Array) else pa.array(values, pa.int64()),
                        value_set=table if isinstance(table, pa.Array) else pa.array(table, pa.int64()))
    return to_numpy(pc.fill_null(found, -1)).astype(np.int64)


def _positions(keys: np.ndarray, value_set: np.ndarray) -> np.ndarray:
    """Position of each key in ``value_set`` (unique values; hash lookup), -1 where absent."""
    if len(value_set) == 0:
        return np.full(len(keys), -1, dtype=np.int64)
    found = pc.index_in(pa.array(keys, pa.int64()), value_set=pa.array(value_set, pa.int64()))
    return to_numpy(pc.fill_null(found, -1)).astype(np.int64)


class _TraceEnds:
    """What complete traces tell about the fabric: RNIC → ToR, address → RNIC, and the ways down:
    for each switch on a descending part of a path, the hops from it down to the ToR.
    Learnt per batch over the distinct values only (vectorised)."""

    def __init__(self) -> None:
        self.tor_of: dict[str, str] = {}
        self.ip_rnic: dict[str, str] = {}
        self.desc: dict[tuple[str, str], tuple[str, ...]] = {}  # (switch, ToR) -> hops below it to the ToR
        self.below: dict[str, set[str]] = {}  # switch -> nodes seen right below it
        self.above: dict[str, set[str]] = {}  # switch -> switches seen right above it on the way up

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

    def one_switch_between(self, node: str, tor: str) -> bool:
        """Whether the traces put exactly one switch between ToR ``node`` and ToR ``tor``: every switch seen
        right above ``node`` (at least one) was seen going straight down to ``tor`` (the spines of a two-tier
        Clos; the aggregation switches of one pod of a three-tier one). False for ``node == tor``."""
        if node == tor:
            return False
        above = self.above.get(node, ())
        return bool(above) and all(self.desc.get((u, tor)) == (tor,) for u in above)

    def learn(self, src_ip: list[str], dst_ip: list[str], hops: list[str]) -> bool:
        """Fold in complete traces (their addresses and hop strings); whether anything changed (only then
        can an incomplete trace resolve differently)."""
        if not hops:
            return False
        before = self._size()
        moved = False
        for h in set(hops):
            p = (h or "").split(",")
            n = len(p)
            if n < 3:
                continue
            for rnic, tor in ((p[0], p[1]), (p[-1], p[-2])):
                moved |= self.tor_of.get(rnic, tor) != tor  # a re-cabled RNIC: a new ToR
                self.tor_of[rnic] = tor
            for j in range(1, (n - 1) // 2):
                self.above.setdefault(p[j], set()).add(p[j + 1])
            for j in range((n - 1) // 2, n - 2):
                self.desc.setdefault((p[j], p[-2]), tuple(p[j + 1:-1]))
                self.below.setdefault(p[j], set()).add(p[j + 1])
        for s_ip, d_ip, h in zip(src_ip, dst_ip, hops, strict=True):
            if s_ip not in self.ip_rnic or d_ip not in self.ip_rnic:
                p = (h or "").split(",")
                self.ip_rnic.setdefault(s_ip, p[0])
                self.ip_rnic.setdefault(d_ip, p[-1])
        return moved or self._size() != before

    def _size(self) -> tuple[int, ...]:
        return (len(self.tor_of), len(self.ip_rnic), len(self.desc), sum(len(v) for v in self.below.values()),
                sum(len(v) for v in self.above.values()))


def latest_paths(paths: pa.Table) -> pa.Table:
    """The newest trace per (direction, 5-tuple) of a ``path.v1`` table.

    Returns:
        Table with ``direction``, the four 5-tuple columns and ``hops``, as :class:`PathIndex`
        keeps them (complete traces first; incomplete tails resolved or ``X,*``).
    """
    cols = ["direction", *KEY]
    if paths.num_rows == 0:
        return paths.select([*cols, "hops"])
    return PathIndex(paths).latest.select([*cols, "hops"])  # type: ignore[union-attr]


def attach_paths(probes: pa.Table, paths: pa.Table | PathIndex | None) -> pa.Table:
    """Add ``fwd_hops`` and ``rev_hops`` (string, '' when untraced) to a probe table.

    Args:
        probes: ``probe.v1``-shaped rows (needs the 5-tuple columns).
        paths: a :class:`PathIndex` (fast: built once), or ``path.v1`` rows (all traces
            known so far), or ``None`` (every path unknown).

    Returns:
        ``probes`` with two more columns, row order kept (:meth:`PathIndex.hop_ids`).
    """
    n = probes.num_rows
    index = paths if isinstance(paths, PathIndex) else (
        PathIndex(paths) if paths is not None and paths.num_rows else None)
    if index is None or n == 0:
        empty = pa.array([""] * n, pa.string())
        return probes.append_column("fwd_hops", empty).append_column("rev_hops", empty)
    fwd, rev = index.hop_ids(probes)
    hops = index.hop_strings()
    out = probes.append_column("fwd_hops", hops.take(pa.array(fwd))).append_column(
        "rev_hops", hops.take(pa.array(rev)))
    index.sweep()
    return out


def _combine(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
