"""Traced paths as links: the vocabulary of tomography (R-Pingmesh §4.3, Algorithm 1).

A ``path.v1`` row lists the hops of one 5-tuple as comma-separated node names
from the source RNIC to the destination RNIC. Voting is over *physical* links:
a dead cable drops both directions, so a probe whose forward path crosses
``A→S3`` and a probe whose ACK path crosses ``S3→A`` vote for the same link.
A link is named ``lower->upper``: in a valley-free Clos path the hops climb to
the middle node and descend, so each link is named from its end nearer the
RNIC (``A1->A``, ``A->S3``, ``B->S3``). The first and last link of a path are
*access links* (an RNIC, its cable, its ToR port): R-Pingmesh cannot tell these
apart and calls them RNIC problems. A trace that ends ``X,*`` (an incomplete one whose
tail is unknown) gives the pseudo-link ``X->*``, which the vote reports as ``undetermined``.

Which path a probe took (the newest trace of its 5-tuple and of the reverse one) is
:mod:`streams.pingmesh.path_index`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import ranges, to_numpy
from schemas.records import NO_ANSWER

LINK_SEP = "->"


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
    # a trace that stops right after its own RNIC ("C1,*") stops on that RNIC's access link: its ToR is the
    # only next hop there is
    access = np.where(dark, np.where(first & (a != NO_ANSWER), a, None), np.where(first, a, np.where(last, b, None)))
    return pa.table(
        {
            "path": pa.array(parent[i_idx], pa.int64()),
            "link": link,
            "access_rnic": pa.array(access, pa.string()),
        }
    )


def probe_links(fwd_hops: pa.Array, rev_hops: pa.Array) -> pa.Table:
    """Distinct physical links of each probe's forward path and ACK path together.

    A link on both the forward and the ACK path of one probe counts once for it
    (one vote per failing probe and link, Algorithm 1).

    Returns:
        Table with ``row`` (index of the probe, int64), ``link`` and ``access_rnic`` (the RNIC end
        when the link is an access link of that probe's paths, else null), sorted by (row, link).
    """
    pl = probe_link_codes(fwd_hops, rev_hops)
    return pa.table({"row": pa.array(pl.row, pa.int64()), "link": pl.names.take(pa.array(pl.link)),
                     "access_rnic": pl.access})


@dataclass(frozen=True)
class ProbeLinkCodes:
    """:func:`probe_links` as integer codes: ``row[i]`` crosses link ``names[link[i]]``; ``access[i]``
    (string, nullable) is its access RNIC. Sorted by (row, link); ``names`` is sorted ascending."""

    row: np.ndarray
    link: np.ndarray
    access: pa.Array
    names: pa.Array


def probe_link_codes(fwd_hops: pa.Array | pa.ChunkedArray, rev_hops: pa.Array | pa.ChunkedArray) -> ProbeLinkCodes:
    """The links of each row's forward and ACK path (:func:`probe_links`), as integer codes.

    Rows hold distinct hop strings (one per 5-tuple: they start and end at its RNICs), but their
    hops are few (RNICs, ToRs, spines), so each distinct path is split once, its hops numbered in
    string order and its links named by (lower, upper) hop codes; the per-row work is numpy over
    those codes (a sort of row x link), never a string per row. Names are as :func:`explode_links`
    gives them, access RNICs the largest of a row's (as a group-by ``max`` over strings).
    """
    n = len(fwd_hops)
    both = pa.concat_arrays([_combine(fwd_hops), _combine(rev_hops)])
    enc = pc.dictionary_encode(pc.fill_null(both, "") if both.null_count else both)
    paths, path_of = enc.dictionary, to_numpy(enc.indices)
    lists = pc.split_pattern(paths, ",")
    raw_len = to_numpy(pc.list_value_length(lists))
    lengths = np.where(to_numpy(pc.equal(paths, "")).astype(bool), 0, raw_len)
    hop_enc = pc.dictionary_encode(pc.list_flatten(lists))
    order = to_numpy(pc.sort_indices(hop_enc.dictionary))
    hop_rank = np.empty(len(order), dtype=np.int64)
    hop_rank[order] = np.arange(len(order), dtype=np.int64)
    hop_names = hop_enc.dictionary.take(pa.array(order))
    hops = hop_rank[to_numpy(hop_enc.indices)] if len(order) else np.zeros(0, np.int64)
    is_star = np.flatnonzero(to_numpy(pc.equal(hop_enc.dictionary, NO_ANSWER)).astype(bool))
    star = int(hop_rank[is_star[0]]) if len(is_star) else -1  # the hop of a trace's unanswered tail
    parent = to_numpy(pc.list_parent_indices(lists))
    starts = np.concatenate([[0], np.cumsum(raw_len)[:-1]]).astype(np.int64)
    pos = np.arange(len(hops), dtype=np.int64) - starts[parent]
    plen = lengths[parent]
    i_idx = np.flatnonzero(pos < plen - 1)  # element i starts link (i, i+1)
    a, b, p, plen, path = hops[i_idx], hops[i_idx + 1], pos[i_idx], plen[i_idx], parent[i_idx]
    up = p + 1 <= (plen - 1) // 2
    lower, upper = np.where(up, a, b), np.where(up, b, a)
    dark = (a == star) | (b == star)
    lower = np.where(dark, np.where(a == star, b, a), lower)
    upper = np.where(dark, star, upper)
    access = np.where(dark, np.where((p == 0) & (a != star), a, -1),  # "C1,*": C1's access link (probe_links)
                      np.where(p == 0, a, np.where(p == plen - 2, b, -1)))
    n_hops = max(len(order), 1)
    pair, link_of = np.unique(lower * n_hops + upper, return_inverse=True)
    names = pc.binary_join_element_wise(hop_names.take(pa.array(pair // n_hops)),
                                        hop_names.take(pa.array(pair % n_hops)), LINK_SEP)
    name_order = to_numpy(pc.sort_indices(names))
    link_rank = np.empty(len(pair), dtype=np.int64)
    link_rank[name_order] = np.arange(len(pair), dtype=np.int64)
    names = names.take(pa.array(name_order))
    # links of each distinct path (CSR: the split keeps paths in order), then of each row's two paths
    per_path = np.bincount(path, minlength=len(paths))
    off = np.concatenate([[0], np.cumsum(per_path)]).astype(np.int64)
    cnt = per_path[path_of]
    occ = ranges(off[path_of], cnt)
    row = np.repeat(np.arange(len(path_of), dtype=np.int64) % max(n, 1), cnt)
    n_links = max(len(pair), 1)
    key = row * n_links + link_rank[link_of[occ]]
    acc = access[occ]
    if max(n, 1) * n_links * (n_hops + 1) < 2**62:  # one int64 sort: by key, then access
        srt = np.argsort(key * (n_hops + 1) + (acc + 1))
    else:
        srt = np.lexsort((acc, key))
    key, acc = key[srt], acc[srt]  # a (row, link) group's last entry has its largest access RNIC
    last = np.flatnonzero(np.append(key[1:] != key[:-1], True)) if len(key) else np.zeros(0, np.int64)
    key, acc = key[last], acc[last]
    access_arr = hop_names.take(pa.array(np.where(acc < 0, 0, acc), mask=acc < 0)) if len(acc) else \
        pa.array([], pa.string())
    return ProbeLinkCodes(key // n_links, key % n_links, access_arr, names)


def _combine(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
