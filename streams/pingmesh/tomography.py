"""Switch tomography: voting over failing probe and ACK paths (R-Pingmesh §4.3, Algorithm 1), extended.

Algorithm 1 of the paper gives each link on a failing probe's path one vote and
names the most-voted link. Three extensions:

* **Normalisation.** A link's failure ratio is its failing probes over all probes
  whose forward or ACK path crossed it in the window, so a busy core link does
  not out-vote a quiet broken one. Candidates are ranked by ``votes × ratio``
  (``votes²/crossings``): many failures *and* few successes.
* **Greedy cover.** After a link is named, the failing probes it explains leave
  the vote, and the next link is chosen from the rest; the cover stops when the
  unexplained failures fall below ``min_votes`` or no link has a ratio of at
  least ``min_ratio``. Several concurrent faults are thus each named once.
* **Confidence.** Each named link gets a probability built from its support
  (number of failures), its ratio and its margin over the best competing link
  that explains the same failures; exact ties are reported as ``undetermined``.
  The constants are calibrated on the simulator (tests/test_tomography_sim.py).

The same routine votes for latency anomalies (:mod:`streams.pingmesh.latency`) with
"failing" meaning "P99 over baseline".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from streams.pingmesh.links import probe_links


@dataclass(frozen=True)
class VoteConfig:
    """Stopping rule and confidence constants of the greedy cover.

    Attributes:
        min_votes: unexplained failing probes a link needs to be named (2).
        min_ratio: failure ratio (failing / crossing probes) a link needs (0.02).
        support_scale: failures at which support reaches 1 − 1/e (2.0).
        ratio_scale: ratio at which the ratio term reaches 1 − 1/e (0.05).
    """

    min_votes: int = 2
    min_ratio: float = 0.02
    support_scale: float = 2.0
    ratio_scale: float = 0.05


@dataclass(frozen=True)
class Suspect:
    """One link named by the cover.

    Attributes:
        link: physical link ``lower->upper``.
        access_rnic: the RNIC end if this is an access link (RNIC, cable, ToR port), else None.
        votes: failing probes it explained when chosen (raw count).
        failed: all failing probes crossing it (including ones explained earlier).
        crossing: probes crossing it in the window.
        ratio: ``failed / crossing``.
        confidence: calibrated probability that the link is faulty.
        tied_with: links that explain exactly the same failures with the same ratio.
    """

    link: str
    access_rnic: str | None
    votes: int
    failed: int
    crossing: int
    ratio: float
    confidence: float
    tied_with: tuple[str, ...] = ()


@dataclass(frozen=True)
class CoverResult:
    """Named links, and the failing probes no link explained (untraced or below the rules)."""

    suspects: list[Suspect]
    unexplained: int
    untraced: int
    total_failed: int


def greedy_cover(failing: pa.Table, crossing: pa.Table, cfg: VoteConfig = VoteConfig()) -> CoverResult:
    """Name the links that explain a window's failing probes.

    Args:
        failing: groups of failing probes with ``fwd_hops``, ``rev_hops`` (comma-separated
            hops, '' if untraced) and ``n`` (probes in the group).
        crossing: ``link``, ``n``: probes (any outcome) crossing each physical link.
        cfg: stopping rule and confidence constants.

    Returns:
        :class:`CoverResult`, suspects in the order chosen. Deterministic: ties
        break by link name; the input row order does not matter.
    """
    n_g = failing["n"].to_numpy().astype(np.int64) if failing.num_rows else np.zeros(0, np.int64)
    total = int(n_g.sum())
    if failing.num_rows == 0:
        return CoverResult([], 0, 0, 0)
    pl = probe_links(failing["fwd_hops"], failing["rev_hops"])
    rows = pl["row"].to_numpy().astype(np.int64)
    traced = np.zeros(len(n_g), dtype=bool)
    traced[rows] = True
    untraced = int(n_g[~traced].sum())
    links, l_idx = np.unique(np.array(pl["link"].to_pylist(), dtype=object), return_inverse=True)
    access = {lk: a for lk, a in zip(pl["link"].to_pylist(), pl["access_rnic"].to_pylist(), strict=True)}
    cmap = dict(zip(crossing["link"].to_pylist(), crossing["n"].to_pylist(), strict=True))
    cross = np.array([cmap.get(lk, 0) for lk in links], dtype=np.float64)
    failed_all = np.bincount(l_idx, weights=n_g[rows], minlength=len(links))
    cross = np.maximum(cross, failed_all)
    left = np.where(traced, n_g, 0).astype(np.float64)
    out: list[Suspect] = []
    taken = np.zeros(len(links), dtype=bool)
    while True:
        votes = np.bincount(l_idx, weights=left[rows], minlength=len(links))
        ratio = np.where(cross > 0, votes / np.maximum(cross, 1), 0.0)
        ok = (votes >= cfg.min_votes) & (ratio >= cfg.min_ratio) & ~taken
        if not ok.any():
            break
        score = np.where(ok, votes * ratio, -1.0)
        best = score.max()
        top = np.nonzero(np.isclose(score, best, rtol=1e-12, atol=0.0) & ok)[0]
        top = top[np.argsort(links[top])]
        i = top[0]
        live = left > 0
        on_i = (l_idx == i) & live[rows]
        rows_i = frozenset(rows[on_i].tolist())
        ties = tuple(str(links[j]) for j in top[1:]
                     if frozenset(rows[(l_idx == j) & live[rows]].tolist()) == rows_i)
        # margin: the best competing link among those sharing at least half of i's unexplained failures
        in_i = np.zeros(len(n_g), dtype=bool)
        in_i[list(rows_i)] = True
        share = np.bincount(l_idx, weights=in_i[rows] * left[rows], minlength=len(links))
        comp = (share >= 0.5 * votes[i]) & ok
        comp[i] = False
        for t in ties:
            comp[np.searchsorted(links, t)] = False
        second = float(score[comp].max()) if comp.any() else 0.0
        conf = _confidence(float(votes[i]), float(ratio[i]), second / best if best > 0 else 1.0, cfg)
        if ties:
            conf = conf / (1 + len(ties))
        out.append(Suspect(str(links[i]), access.get(links[i]), int(votes[i]), int(failed_all[i]),
                           int(cross[i]), float(failed_all[i] / max(cross[i], 1)), conf, ties))
        taken[i] = True
        for t in ties:
            taken[np.searchsorted(links, t)] = True
        left[list(rows_i)] = 0.0
    return CoverResult(out, int(left.sum()), untraced, total)


def _confidence(votes: float, ratio: float, rel_second: float, cfg: VoteConfig) -> float:
    """Probability a named link is faulty: support × ratio term × margin (each in [0, 1])."""
    support = 1.0 - math.exp(-votes / cfg.support_scale)
    ratio_term = 1.0 - math.exp(-ratio / cfg.ratio_scale)
    margin = max(0.0, 1.0 - rel_second**2)
    return round(support * ratio_term * margin, 6)
