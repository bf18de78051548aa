"""A low-rate loss tested over several windows: the per-link counts one window's vote carries to the next.

A link that loses 0.5 % of the packets crossing it fails about five of the 900 probes a small fabric sends
over it in 20 s. Against the 95 % bound of a window's background (about 6e-4 a probe when no probe off the
link failed: three failures' worth over 5,000 probes), five failures are not significant once corrected
for every link tested, and such a link stays unnamed window after window. Its failures persist while
background failures do not: its counts in the windows before (up to ``CARRY_WINDOWS``, back to the first in
which it failed no probe), pooled with this one's, name it.

The pooled test is run only for a link that this window's own test holds back but whose failures are
already unlikely here (``VoteConfig.carry_screen``), so a fault that ended is not named from the last
windows' failures. Under "this link is healthy in these windows" the pooled counts are Poisson with mean
(the crossings summed) · background, and the screened test rejects no more often than the pooled test
alone: it adds at most ``alpha`` to the window's family-wise false-alarm rate.

Pure functions over the cover's arrays; :func:`streams.pingmesh.tomography.greedy_cover` calls them and
:func:`streams.pingmesh.tomography.vote_step` keeps the carry in ``AnalyzerState.carried``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

CARRY_WINDOWS = 3
"""Windows of counts a link's pooled test may add to the current one's (60 s at 20 s windows): with the
screen, the first window of a 0.5 % loss on a small fabric's link is its only one left unnamed, and a fault
older than a minute is judged on its last minute."""

__all__ = ["CARRY_WINDOWS", "LinkCarry", "carry_arrays", "carry_of_window", "consecutive"]


@dataclass(frozen=True)
class LinkCarry:
    """What one window's vote leaves for the next window's pooled test, per switch link that failed probes.

    Attributes:
        ws: start (ns) of the window the counts are from; a window pools only the windows right before it,
            without a gap (a window not analyzed, a reducer restarted: no pooling across it).
        failed: link → failing probes crossing it that no claim on another link explained.
        crossing: link → probes (any outcome) crossing it.
        off_failures: link → failures left unexplained that did not cross it (probes that left their ToR
            only, where the window told those apart).
        off_probes: link → probes that did not cross it (the same set).
    """

    ws: int
    failed: dict[str, int] = field(default_factory=dict)
    crossing: dict[str, int] = field(default_factory=dict)
    off_failures: dict[str, int] = field(default_factory=dict)
    off_probes: dict[str, int] = field(default_factory=dict)


def consecutive(carried: Sequence[LinkCarry], ws: int, window_ns: int) -> list[LinkCarry]:
    """The carries of the windows right before the window starting at ``ws`` (ns), newest first, up to the
    first gap (``carried``: newest first, as ``AnalyzerState.carried`` holds them)."""
    out: list[LinkCarry] = []
    for c in carried:
        if c.ws != ws - (len(out) + 1) * window_ns:
            break
        out.append(c)
    return out


def carry_arrays(carries: Sequence[LinkCarry], links: np.ndarray) -> tuple[np.ndarray, ...]:
    """The carried counts aligned with ``links`` (sorted link names, length L): per link, the sum over the
    newest windows of ``carries`` (newest first, consecutive) up to the first in which it failed no probe.

    Returns:
        ``(has, failed, crossing, off_failures, off_probes)``: a bool mask and four float64 arrays of
        length L, zero where the link is not carried.
    """
    n = len(links)
    has = np.zeros(n, dtype=bool)
    out = [np.zeros(n, dtype=np.float64) for _ in range(4)]
    if not carries or not carries[0].failed or n == 0:
        return (has, *out)
    alive = np.ones(n, dtype=bool)  # still in an unbroken run of windows with failures of its own
    for c in carries:
        keys = np.array(list(c.failed), dtype=object)
        pos = np.minimum(np.searchsorted(links, keys), n - 1)
        hit = links[pos] == keys
        present = np.zeros(n, dtype=bool)
        present[pos[hit]] = True
        alive &= present
        if not alive.any():
            break
        has |= alive
        for arr, d in zip(out, (c.failed, c.crossing, c.off_failures, c.off_probes), strict=True):
            vals = np.zeros(n, dtype=np.float64)
            vals[pos[hit]] = [d.get(k, 0) for k in keys[hit].tolist()]
            arr += np.where(alive, vals, 0.0)
    return (has, *out)


def carry_of_window(ws: int, links: np.ndarray, is_access: np.ndarray, l_idx: np.ndarray, rows: np.ndarray,
                    weight: np.ndarray, left0: np.ndarray, left: np.ndarray, probed: np.ndarray,
                    named: Sequence[tuple[str, ...]], far_row: np.ndarray, far_probes: int) -> LinkCarry:
    """The carry of one window's cover.

    Args:
        ws: the window's start (ns).
        links: link names (sorted, L); is_access: which are access links (not carried: the RNIC rules
            judge those).
        l_idx, rows, weight: per (failing group, link) pair: the link's index, the group's index and the
            pair's weight (a dark trace's share of a candidate hop).
        left0, left: failures per failing group before the cover and left unexplained after it (G).
        probed: probes crossing each link (L).
        named: per suspect in the cover's order, its link and the links tied with it.
        far_row: failing groups counted in the background (G; those that left their ToR, or all).
        far_probes: probes counted in the background.

    Returns:
        :class:`LinkCarry` of the switch links with at least one failure of their own. A failing group
        explained by a suspect counts for that suspect's links only (the first suspect in order whose
        links it crossed, as the greedy cover took it); an unexplained group for every link it crossed.
    """
    n_g = len(left0)
    owner = np.full(n_g, -1, dtype=np.int64)
    explained = left0 > left
    link_pos = {str(lk): i for i, lk in enumerate(links.tolist())}
    on_named = [np.isin(l_idx, [link_pos[x] for x in group if x in link_pos]) for group in named]
    for k, on_pair in enumerate(on_named):
        on = np.zeros(n_g, dtype=bool)
        on[rows[on_pair]] = True
        owner[on & explained & (owner < 0)] = k
    mine = np.zeros(len(rows), dtype=bool)
    for k, on_pair in enumerate(on_named):
        mine |= (owner[rows] == k) & on_pair
    own_rows = np.where(mine, left0[rows], left[rows]) * weight
    failed = np.bincount(l_idx, weights=own_rows, minlength=len(links))
    unexpl = np.bincount(l_idx, weights=left[rows] * weight * far_row[rows], minlength=len(links))
    k_far = float((left * far_row).sum())
    c = LinkCarry(ws)
    for i in np.nonzero((failed >= 1) & ~is_access)[0].tolist():
        lk = str(links[i])
        c.failed[lk] = int(round(failed[i]))
        c.crossing[lk] = int(probed[i])
        c.off_failures[lk] = max(int(round(k_far - unexpl[i])), 0)
        c.off_probes[lk] = max(int(far_probes - probed[i]), 0)
    return c
