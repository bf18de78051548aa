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
* **Parsimony.** When the cover names several links and one link explains every failure they
  explain, the cover is run again with that link named first (one fault, not two): a link that
  failed mid-window, or whose last traces predate a reroute, has a diluted ratio, and the far ToRs'
  links to the same spine outscore it on parts of its failures. Not when a named link looks dead
  (``DEAD_RATIO``).
* **Low-rate loss.** A link is named when its failures are too many to be the fabric's
  background loss: a one-sided test of its unexplained failures among the probes
  crossing it against the per-probe background rate under "this link is healthy" (the
  95 % upper bound of the unexplained failures off the link over the probes off it, those
  that leave their ToR for a switch link, at least a floor), Bonferroni-corrected over the
  links probed.
  A 0.5 % lossy link is named as soon as enough probes crossed it, with no fixed
  share of failures to reach.
* **Confidence.** Each named link gets a probability built from its support
  (number of failures), the significance of its test and its margin over the best
  competing link that explains the same failures; exact ties are reported as
  ``undetermined``.

The same routine votes for latency anomalies (:mod:`streams.pingmesh.latency`) with
"failing" meaning "P99 over baseline".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streams.pingmesh.carried_loss import CARRY_WINDOWS, LinkCarry, carry_arrays, carry_of_window, consecutive
from streams.pingmesh.context import AnalyzerState, WindowContext, log_poisson_tail, poisson_upper, significance
from streams.pingmesh.links import LINK_SEP, NO_ANSWER, probe_links
from streams.pingmesh.partial import link_counts
from streams.pingmesh.verify import claims_crossed, co_crossed, failing_paths

DEAD_RATIO = 0.95
"""Failure ratio from which a link looks dead (every probe crossing it fails, bar a few counted before
the fault): a fault in its own right, never replaced by parsimony nor tied on a few tuples' paths."""

SWAP_RATE_BOUND = 2.0
"""A claim the swap (:func:`_swap_claim_for_tie`) would replace keeps its place when its failure ratio is over
this many times the sum of the new cover's ratios: under the new cover a probe crossing it fails with at most
the sum of the rates of the suspects on its paths (union bound), so it cannot show more on average; the
factor is for the coarse rates of a few tuples (a partial loss fails whole tuples)."""


@dataclass(frozen=True)
class VoteConfig:
    """Stopping rule and confidence constants of the greedy cover.

    Attributes:
        min_votes: unexplained failing probes a link needs to be named (2).
        min_ratio: failure ratio (failing / crossing probes) a link needs besides the test (0:
            the test alone decides; set it to require a fixed share as Algorithm 1 did).
        few_tuples: failing path groups (≈ 5-tuples) at or under which links with exactly the same
            failing groups are tied whatever their crossing counts (4).
        alpha: family-wise false-alarm rate of the per-link test in one window (1e-3).
        support_scale: failures at which support reaches 1 − 1/e (2.0).
        ratio_scale: ratio at which the ratio term reaches 1 − 1/e (0.05); used only without a
            background rate (latency votes, where "failing" is "slow").
        near_tie: score (votes x ratio), relative to the best link's, at which a competitor sharing at
            least half of the best link's failures is tied with it (0.99): the claim's margin term would
            be under 4 %, and such claims were wrong on fresh benchmark seeds.
        same_rows_tie: score, relative to the best link's, at which a competitor with exactly the same
            unexplained failing groups is tied with it (0.75): the scores then differ only by the
            links' crossing counts (margin term under 0.69).
        access_claim_ratio: failure ratio at which an access link the RNIC rule could not judge
            (fewer than two live ToR-mesh probers: its ToR peers are down or on its own host) is
            claimed as an ``rnic`` fault (0.9); below it the link stays ``undetermined``, as a busy
            or dying host can fail a share of its probes without its RNIC being at fault.
        test_floor: least per-probe background rate of the per-link loss test (1e-4: a healthy link loses
            1e-5..1e-4 of its packets, and a probe crosses several links each way); above it, the 95 %
            upper bound of the rate the window's probes off the link show.
        carry_screen: p-value under which a link that this window's own test holds back is tested again with
            the counts of the windows before pooled in (:mod:`streams.pingmesh.carried_loss`; 0.01: about four
            failures where background gives half of one; 0: no pooled test). A fault that ended fails too few
            probes here to pass the screen, so earlier windows' failures alone never name it.
    """

    min_votes: int = 2
    few_tuples: int = 4
    min_ratio: float = 0.0
    alpha: float = 1e-3
    support_scale: float = 2.0
    ratio_scale: float = 0.05
    near_tie: float = 0.99
    same_rows_tie: float = 0.75
    access_claim_ratio: float = 0.9
    test_floor: float = 1e-4
    carry_screen: float = 0.01


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
        tied_with: links that explain the same failures as well, or nearly as well (``near_tie``).
        few_tuples: the tie is over every link on the paths of a few failing 5-tuples (``few_tuples``),
            not over links whose failures and scores alone are alike.
        carried: (failures, crossing probes) of the windows before pooled into this link's test, where
            this window's counts alone did not pass it; None otherwise.
    """

    link: str
    access_rnic: str | None
    votes: int
    failed: int
    crossing: int
    ratio: float
    confidence: float
    tied_with: tuple[str, ...] = ()
    few_tuples: bool = False
    carried: tuple[int, int] | None = None


@dataclass(frozen=True)
class CoverResult:
    """Named links, the failing probes no link explained (untraced or below the rules), and the counts the
    window leaves for the next one's pooled test (``carry``: None without ``ws``)."""

    suspects: list[Suspect]
    unexplained: int
    untraced: int
    total_failed: int
    carry: LinkCarry | None = None


def link_background(off_failures: np.ndarray | float, off_probes: np.ndarray | float, floor: float) -> np.ndarray:
    """The per-probe background rate the per-link loss test of :func:`greedy_cover` assumes for a link: the
    95 % upper bound (:func:`streams.pingmesh.context.poisson_upper`) of ``off_failures`` unexplained failures
    among the ``off_probes`` probes that did not cross it, at least ``floor`` (``VoteConfig.test_floor``).
    Vectorised; negative counts read as 0 failures and 1 probe."""
    k = np.maximum(np.asarray(off_failures, dtype=np.float64), 0.0)
    return np.maximum(floor, poisson_upper(k, 1.645) / np.maximum(np.asarray(off_probes, dtype=np.float64), 1.0))


def greedy_cover(failing: pa.Table, crossing: pa.Table, cfg: VoteConfig = VoteConfig(),
                 probes: int | None = None, background: float = 0.0,
                 known_links: Sequence[str] = (), local_probes: int = 0, carry: Sequence[LinkCarry] = (),
                 ws: int | None = None) -> CoverResult:
    """Name the links that explain a window's failing probes.

    Args:
        failing: groups of failing probes with ``fwd_hops``, ``rev_hops`` (comma-separated
            hops, '' if untraced) and ``n`` (probes in the group).
        crossing: ``link``, ``n``: probes (any outcome) crossing each physical link.
        cfg: stopping rule and confidence constants.
        probes: probes in the window (any outcome, traced or not) for the background rate; None
            (latency votes, unit tests): no significance test, the ratio term instead.
        background: per-probe background failure rate assumed at least for single drops (the cover's stray
            drops and few-tuple signatures); the per-link test has its own floor (``cfg.test_floor``).
        known_links: links earlier windows' probes crossed (``AnalyzerState.links_seen``): candidates for
            the next hop of a trace that stopped, beside the links this window's probes crossed.
        local_probes: of ``probes``, those between RNICs of one ToR (the ToR mesh: no switch link on their
            paths; ``failing``'s ``pinglist`` column marks their groups ``tor_mesh``); 0: not told apart.
        carry: the counts of the windows before, newest first and consecutive
            (:class:`streams.pingmesh.carried_loss.LinkCarry`): a switch link this window's test holds back, but
            whose failures pass ``cfg.carry_screen``, is tested again on its counts pooled with those of the
            windows before in which it failed probes (:func:`streams.pingmesh.carried_loss.carry_arrays`).
            Only with ``probes``.
        ws: this window's start (ns): the result's ``carry`` is filled for the next window. Only with
            ``probes``.

    Returns:
        :class:`CoverResult`, suspects in the order chosen. Deterministic: ties
        break by link name; the input row order does not matter.
    """
    n_g = failing["n"].to_numpy().astype(np.int64) if failing.num_rows else np.zeros(0, np.int64)
    total = int(n_g.sum())
    if failing.num_rows == 0:
        return CoverResult([], 0, 0, 0)
    pl = _expand_dark(probe_links(failing["fwd_hops"], failing["rev_hops"]), crossing, n_g, known_links)
    rows = pl["row"].to_numpy().astype(np.int64)
    w = pl["w"].to_numpy() if "w" in pl.column_names else np.ones(len(rows))
    seen = pl["seen"].to_numpy() if "seen" in pl.column_names else np.ones(len(rows))
    traced = np.zeros(len(n_g), dtype=bool)
    traced[rows] = True
    untraced = int(n_g[~traced].sum())
    links, l_idx = np.unique(np.array(pl["link"].to_pylist(), dtype=object), return_inverse=True)
    access = {lk: a for lk, a in zip(pl["link"].to_pylist(), pl["access_rnic"].to_pylist(), strict=True)}
    cmap = dict(zip(crossing["link"].to_pylist(), crossing["n"].to_pylist(), strict=True))
    cross = np.array([cmap.get(lk, 0) for lk in links], dtype=np.float64)
    is_access = np.array([access.get(lk) is not None for lk in links], dtype=bool)
    local_row = (np.asarray(pc.equal(failing["pinglist"], "tor_mesh").fill_null(False))
                 if local_probes and "pinglist" in failing.column_names else np.zeros(len(n_g), dtype=bool))
    failed_all = np.bincount(l_idx, weights=n_g[rows] * w, minlength=len(links))
    # a failing probe whose trace went dark after a node may have crossed each candidate link there: it
    # counts among a candidate's crossings as in its votes (weight w), on top of the probes the traces
    # saw cross it. The larger of the two alone would hide a candidate's passing probes behind dark votes:
    # its ratio reads 1.0, and once a dead link explains the dark probes, a partial loss beside it is
    # blamed on the candidate (C-S1 down and A-S1 partial on Panel 1: B->S1 named, not A->S1).
    failed_seen = np.bincount(l_idx, weights=n_g[rows] * w * seen, minlength=len(links))
    cross = np.maximum(cross, failed_seen) + (failed_all - failed_seen)
    probed = cross.copy()  # as reported; ``cross`` loses the failures each named link explains
    left0 = np.where(traced, n_g, 0).astype(np.float64)
    n_tests = max(len(cmap), len(links), 1)
    log_alpha = math.log(cfg.alpha / n_tests)
    c_has, c_failed, c_cross, c_off_k, c_off_n = carry_arrays(carry if probes is not None else (), links)
    c_has &= ~is_access
    log_screen = math.log(cfg.carry_screen) if cfg.carry_screen > 0 else -math.inf

    def passing(left: np.ndarray, cross: np.ndarray, taken: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Votes, ratio, which links pass the stopping rule and the per-link test, its log p, and which of
        them passed on the earlier windows' counts pooled in."""
        votes = np.bincount(l_idx, weights=left[rows] * w, minlength=len(links))
        ratio = np.where(cross > 0, votes / np.maximum(cross, 1), 0.0)
        ok = (votes >= cfg.min_votes) & (ratio >= cfg.min_ratio) & ~taken
        log_p = np.zeros(len(links))
        pooled = np.zeros(len(links), dtype=bool)
        if probes is not None and ok.any():
            # background under "this link is healthy": the failures no link has explained yet that did not
            # cross it, over the probes that did not. Counting its own failures in would let a lossy link
            # that carries much of a small fabric's probes raise its own bar (Panel 1: a 0.5 % loss on a link
            # crossed by 29 % of the probes, 18 failures, beside a flapping link). A switch link is measured
            # against the probes that leave their ToR only: they cross more links than a ToR-mesh probe, and
            # lose 1.6x as much to background (0.92e-3 against 0.59e-3 a probe at 1e-4 a link on the
            # 1,024-RNIC Clos). The rate is the 95 % upper bound of what those probes show (a window's few
            # failures say little of it), at least ``cfg.test_floor``
            k_off = float(left.sum()) - votes[ok]
            n_off = probes - cross[ok]
            far = ok & ~is_access
            if local_probes and far.any():
                sw = far[ok]
                k_off[sw] = float(left[~local_row].sum()) - votes[far]
                n_off[sw] = probes - local_probes - cross[far]
            q = link_background(k_off, n_off, cfg.test_floor)
            log_p[ok] = log_poisson_tail(votes[ok], cross[ok] * q)
            again = ok & c_has & (log_p >= log_alpha) & (log_p < log_screen)
            if again.any():
                sub = again[ok]
                q2 = link_background(k_off[sub] + c_off_k[again], n_off[sub] + c_off_n[again], cfg.test_floor)
                lp2 = log_poisson_tail(votes[again] + c_failed[again], (cross[again] + c_cross[again]) * q2)
                pooled[again] = lp2 < log_alpha
                log_p[pooled] = lp2[pooled[again]]
            ok &= log_p < log_alpha
        return votes, ratio, ok, log_p, pooled

    def cover(first: int | None, banned: np.ndarray | None = None) -> tuple[list[Suspect], np.ndarray]:
        """The greedy cover; ``first``: the link to name first (the parsimony rerun below); ``banned``:
        links it may neither name nor tie (the swap rerun below). Records in ``covers`` the failing
        groups each suspect explained, in order."""
        cross = cross0.copy()
        left = left0.copy()
        out: list[Suspect] = []
        explained_by: list[frozenset[int]] = []
        covers.append((out, explained_by))
        taken = np.zeros(len(links), dtype=bool) if banned is None else banned.copy()
        while True:
            votes, ratio, ok, log_p, pooled = passing(left, cross, taken)
            if not ok.any():
                break
            score = np.where(ok, votes * ratio, -1.0)
            best = score.max()
            top = np.nonzero(np.isclose(score, best, rtol=1e-12, atol=0.0) & ok)[0]
            top = top[np.argsort(links[top])]
            i = top[0]
            forced = first is not None and not out and bool(ok[first])
            if forced:
                i, best = int(first), score[first]
            live = left > 0
            on_i = (l_idx == i) & live[rows]
            rows_i = frozenset(rows[on_i].tolist())
            # ties: links explaining exactly the same failures equally well; and, when those failures
            # are a few 5-tuples only and the best link also carries probes that pass (not a dead link),
            # every link on all of their paths (a partial 5-tuple fault drops whole tuples, so the
            # crossing counts say nothing about which of their links it is). The tuples are compared
            # by their heavy rows (:func:`_tuple_signature`): one stray background drop on a path of
            # one member must not break the tie and make it a claim.
            sig_i = _tuple_signature(rows_i, left, probed[i], background, cfg) if probes is not None else rows_i
            few = len(sig_i) <= cfg.few_tuples and ratio[i] < DEAD_RATIO
            loose: tuple[str, ...] = ()
            if few:
                # an access link's few tuples are tied too with the switch links on all of their paths that
                # carry other failures besides (a superset): a partial loss on D->S1 that selects only D5's
                # tuples, beside a lossy C->S1 whose failing probes also cross D->S1, gives the access link
                # D5->D the higher score on crossing counts alone (seed 4857, scenario 157)
                sub = access.get(links[i]) is not None
                sigs = {int(j): _tuple_signature(frozenset(rows[(l_idx == j) & live[rows]].tolist()), left, probed[j],
                                                 background, cfg, probes is not None)
                        for j in np.nonzero(ok)[0] if j != i}
                ties = tuple(sorted(str(links[j]) for j, sg in sigs.items() if sg == sig_i))
                # tied, not taken: such a link may still be named for the failures of its own
                loose = tuple(sorted(str(links[j]) for j, sg in sigs.items()
                                     if sub and access.get(links[j]) is None and sg != sig_i and sig_i <= sg))
            else:
                # the same failing groups and a score within ``same_rows_tie``: only the crossing counts
                # tell the two apart, and those hold the passing probes of pairs whose failures an earlier
                # suspect took (a lossy link beside a flapping one at the same spine)
                near_same = np.nonzero(ok & (score >= cfg.same_rows_tie * best))[0]
                ties = tuple(sorted(str(links[j]) for j in near_same
                                    if j != i and frozenset(rows[(l_idx == j) & live[rows]].tolist()) == rows_i))
            # margin: the best competing link among those sharing at least half of i's unexplained failures
            in_i = np.zeros(len(n_g), dtype=bool)
            in_i[list(rows_i)] = True
            share = np.bincount(l_idx, weights=in_i[rows] * left[rows] * w, minlength=len(links))
            comp = (share >= 0.5 * votes[i]) & ok
            comp[i] = False
            if forced:  # links whose failures i explains whole are parts of its explanation, not rivals
                comp &= ~np.isclose(share, votes)
            for t in (*ties, *loose):
                comp[np.searchsorted(links, t)] = False
            # near ties: a competitor within ``near_tie`` of the best score leaves a margin under 4 %; the
            # evidence cannot tell the two apart (e.g. the failing probes of a dead uplink traced only up to
            # its switch, whose candidate next hops then share the same failures), so neither is claimed
            near = comp & (score >= cfg.near_tie * best)
            if forced and ratio[i] >= DEAD_RATIO:
                # a dead link named first (:func:`_dead_link_first`): a live link that outscores it does so
                # with failures the dead link explains, so only another dead-looking link can tie it
                near &= ratio >= DEAD_RATIO
            if near.any():
                ties = tuple(sorted({*ties, *(str(links[j]) for j in np.nonzero(near)[0])}))
                comp &= ~near
            second = float(score[comp].max()) if comp.any() else 0.0
            evidence = (significance(float(log_p[i]), n_tests) if probes is not None
                        else 1.0 - math.exp(-float(ratio[i]) / cfg.ratio_scale))
            conf = _confidence(float(votes[i]), evidence, second / best if best > 0 else 1.0, cfg)
            tied = tuple(sorted({*ties, *loose}))
            if tied:
                conf = conf / (1 + len(tied))
            out.append(Suspect(str(links[i]), access.get(links[i]), int(votes[i]), int(failed_all[i]),
                               int(probed[i]), float(failed_all[i] / max(probed[i], 1)), conf, tied,
                               few and bool(tied),
                               (int(c_failed[i]), int(c_cross[i])) if pooled[i] else None))
            taken[i] = True
            for t in ties:
                taken[np.searchsorted(links, t)] = True
            # explained failures say nothing about the other links they crossed: they leave those links'
            # crossing counts, as the probes of earlier steps (host down, RNIC) leave the vote's
            cross -= np.bincount(l_idx, weights=in_i[rows] * left[rows] * w, minlength=len(links))
            left[list(rows_i)] = 0.0
            explained_by.append(rows_i)
        return out, left

    cross0 = cross
    covers: list[tuple[list[Suspect], list[frozenset[int]]]] = []  # each run's suspects and what each explained

    def explained_of(suspects: list[Suspect]) -> list[frozenset[int]]:
        # the run that made these suspects: a rerun a parsimony rule turned down made its own
        return next(by for o, by in covers if o is suspects)

    out, left = cover(None)
    # single drops the background gives over the window's probes, as for the window's leftovers (vote_step)
    expected = background * (probes or 0)
    stray_max = expected + 3.0 * math.sqrt(expected) if probes is not None else 0.0
    out, left = _dead_link_first(out, left, left0 >= cfg.min_votes, links, cover, stray_max)
    start = passing(left0, cross0, np.zeros(len(links), bool))[:4]  # the whole window, for both parsimony rules
    j, stray = _one_link_for_all(out, left0, left, l_idx, rows, links, start, probes is not None,
                                 cfg.min_votes, stray_max)
    if j is not None:
        out2, left2 = cover(j)
        if len(out2) < len(out) and left2.sum() <= left.sum() + stray:
            out, left = out2, left2
            j = None
    kept = False
    if j is None and probes is not None:
        k = _one_link_for_ties(out, explained_of(out), left0, l_idx, rows, start, cfg.min_votes)
        if k is not None:
            out2, left2 = cover(k)
            if len(out2) < len(out) and left2.sum() <= left.sum():
                out, left, kept = out2, left2, True
    if probes is not None and not kept:
        out, left = _ties_to_common_link(out, left, explained_of(out), left0, l_idx, rows, links, cover, cfg.min_votes)
    if probes is not None:
        out, left = _swap_claim_for_tie(out, left, left0, links, l_idx, rows, cover, cfg.min_votes, stray_max)
        out, left = _swap_access_claim(out, left, left0, links, l_idx, rows, local_row, cover, cfg.min_votes,
                                       stray_max)
    carry_out = None
    if probes is not None and ws is not None:
        far_row = ~local_row if local_probes else np.ones(len(n_g), dtype=bool)
        carry_out = carry_of_window(ws, links, is_access, l_idx, rows, w, left0, left, probed,
                                    [(s.link, *s.tied_with) for s in out], far_row,
                                    probes - local_probes if local_probes else probes)
    return CoverResult(out, int(left.sum()), untraced, total, carry_out)


def _dead_link_first(out: list[Suspect], left: np.ndarray, heavy: np.ndarray, links: np.ndarray,
                     cover: Callable[[int | None, np.ndarray | None], tuple[list[Suspect], np.ndarray]],
                     stray_max: float) -> tuple[list[Suspect], np.ndarray]:
    """The cover again with its first dead-looking claim named first, when a claim that carries passing
    probes came before it; kept when it claims no more links and explains as much.

    A link that every probe through it failed on (ratio at least :data:`DEAD_RATIO`) is a fault in its
    own right, and the failures it can explain are its own. A healthy link that shares a spine with it
    and with a partial or lossy fault gathers both faults' failures (C-S1 dead and a partial loss on
    A-S1, Panel 1: ``B->S1`` carries the B-C tuples the dead link fails and the A-B tuples the partial
    loss fails) and outscores each fault's link in the greedy order; what it leaves of the real partial
    fault then has no rival, and the healthy link is claimed. Named after the dead link, its failures
    are those of the tuples that cross the partial fault's link and it together (the A-B tuples
    through S1), a tie the loop is asked to split, or a claim where the tuples tell them apart.

    Args:
        out, left: the cover's suspects and the failures it left per failing group.
        heavy: the failing groups with ``min_votes`` or more failures.
        links: link names (sorted); cover: the cover, given (``first``, ``banned``).
        stray_max: single failures the background gives over the window.
    """
    dead = next((k for k, s in enumerate(out) if s.ratio >= DEAD_RATIO and not s.tied_with), None)
    if not dead or not any(s.ratio < DEAD_RATIO and not s.tied_with for s in out[:dead]):
        return out, left  # none, or the cover named it before any other claim
    out2, left2 = cover(int(np.searchsorted(links, out[dead].link)), None)

    def claims(o: list[Suspect]) -> int:
        return sum(1 for s in o if not s.tied_with)

    if (claims(out2) <= claims(out) and not (left2[heavy] > left[heavy]).any()
            and left2[~heavy].sum() <= left[~heavy].sum() + stray_max):
        return out2, left2
    return out, left


def _tied_links(out: list[Suspect]) -> int:
    """Links in the suspects that end ``undetermined`` as a tie (several links named together)."""
    return sum(1 + len(s.tied_with) for s in out if s.tied_with)


def _swap_claim_for_tie(out: list[Suspect], left: np.ndarray, left0: np.ndarray, links: np.ndarray,
                        l_idx: np.ndarray, rows: np.ndarray,
                        cover: Callable[[int | None, np.ndarray | None], tuple[list[Suspect], np.ndarray]],
                        min_votes: int, stray_max: float) -> tuple[list[Suspect], np.ndarray]:
    """Parsimony by swap: a claim beside ties over a few tuples' paths is replaced when the cover run
    again without the claimed link names no more suspects and no more tied links, ties fewer links or
    explains more heavy failing groups (``min_votes`` or more failures), keeps every other claim, leaves
    no heavy group less explained and no more single failures unexplained than background loss gives
    (``stray_max``), and each link it newly claims fails a tuple of its own
    (:func:`_new_claims_stand_alone`).

    Two faulty links fail the tuples whose forward path crosses one and whose ACK path crosses the
    other, and a third link that many of those tuples cross (the first ToR's uplink to the spine both
    faults' tuples go up through) gathers both faults' failures on few crossings: it outscores either
    fault's link and is claimed first. What it leaves of the two faults, a tuple of each, ends as ties
    over those tuples' paths window after window, the claim is wrong and neither fault is named (seed
    9231, scenario 82: ``A->S1`` claimed for partial losses at ``A->S4`` and ``C->S1``). The same
    failures explained by no more links, with each new claim failing a tuple that nothing else
    explains, is what the probes single out; a tie left over in the new cover goes to the loop as
    before, now without the healthy link's claim beside it.

    Not when the claim fails at over :data:`SWAP_RATE_BOUND` times the sum of the new cover's rates: the new
    cover cannot give it that many failures. A 50 % partial loss on ``C->S4`` (ratio 0.53) beside a 15 % one
    on ``A->S3`` (tied on two tuples of ``A3``) gave way to ``B->S4`` (0.088) and ``A->S1`` (0.064), both
    wrong (seed 6553, scenario 110); the swap of seed 9231 gives 0.27 against 0.13 + 0.12.

    Args:
        out, left: the cover's suspects and the failures it left per failing group.
        left0: failures per failing group before the cover; links: link names (sorted).
        l_idx, rows: the link and the failing group of each (group, link) pair.
        cover: the cover, given (``first``, ``banned``).
        min_votes: failures that make a failing group heavy; stray_max: single failures background gives.
    """
    # only ties over a few tuples' paths: a tie of links alike in failures and score (two faults at one
    # spine of Panel 1, a third link of that spine tied with one) is the evidence's own ambiguity, and
    # banning the claim beside it gave the third link a wrong claim (seed 9231, scenarios 40 and 75)
    if len(out) < 2 or not any(s.tied_with for s in out) or any(s.tied_with and not s.few_tuples for s in out):
        return out, left
    heavy = left0 >= min_votes
    claims = [s for s in out if not s.tied_with]
    for s in claims:
        # a dead link is a fault in its own right; an access link's claim is the RNIC rule's to make
        if s.ratio >= DEAD_RATIO or s.access_rnic is not None:
            continue
        banned = np.zeros(len(links), dtype=bool)
        banned[np.searchsorted(links, s.link)] = True
        out2, left2 = cover(None, banned)
        fewer = _tied_links(out2) < _tied_links(out) or left2[heavy].sum() < left[heavy].sum()
        if (len(out2) <= len(out) and _tied_links(out2) <= _tied_links(out) and fewer
                and s.ratio <= SWAP_RATE_BOUND * sum(t.ratio for t in out2)
                and {c.link for c in claims if c is not s} <= {t.link for t in out2}
                and not (left2[heavy] > left[heavy]).any()
                and left2[~heavy].sum() <= left[~heavy].sum() + stray_max
                and _new_claims_stand_alone(out2, {c.link for c in claims}, s.link, links, l_idx, rows, heavy)):
            return out2, left2
    return out, left


def _swap_access_claim(out: list[Suspect], left: np.ndarray, left0: np.ndarray, links: np.ndarray,
                       l_idx: np.ndarray, rows: np.ndarray, local_row: np.ndarray,
                       cover: Callable[[int | None, np.ndarray | None], tuple[list[Suspect], np.ndarray]],
                       min_votes: int, stray_max: float) -> tuple[list[Suspect], np.ndarray]:
    """An access link claimed on inter-ToR tuples alone gives way to switch links that explain its failures:
    the cover is run again without it, and kept when it claims no access link, names no more suspects,
    keeps every other claim, leaves no heavy group less explained and no more single
    failures than background loss gives (``stray_max``), and each link it newly claims fails a tuple of its
    own that no other suspect crosses (:func:`_new_claims_stand_alone`).

    An RNIC's access link carries every probe of the RNIC, so a few of its tuples failing through one switch
    link, beside another fault whose failing tuples also had that RNIC at one end, add up on it: a 14 %
    partial loss on ``B->S3`` that selected three tuples of ``B3``, beside a flapping ``A->S4`` that failed
    two more of ``B3``'s, made ``B3->B`` outscore ``B->S3`` on five tuples (too many to tie them) and the
    RNIC rule then left ``undetermined B3`` two windows in a row (simulator seed 6553, scenario 255). The
    new cover may tie links the first did not (the access claim would end ``undetermined`` at the RNIC
    anyway, which the closed loop cannot split; a tie of switch links it can). Not
    applied when a ToR-mesh tuple of the link failed ``min_votes`` or more probes (``local_row``: a fault at
    the RNIC shows there; a single drop is background).

    Args:
        out, left: the cover's suspects and the failures it left per failing group.
        left0: failures per group before the cover; links: link names (sorted).
        l_idx, rows: the link and the failing group of each (group, link) pair.
        local_row: whether each failing group is a ToR-mesh one.
        cover: the cover, given (``first``, ``banned``).
        min_votes: failures that make a failing group heavy; stray_max: single failures background gives.
    """
    heavy = left0 >= min_votes
    for s in out:
        if s.access_rnic is None or s.tied_with or s.ratio >= DEAD_RATIO:
            continue
        k = int(np.searchsorted(links, s.link))
        if (local_row & heavy)[rows[l_idx == k]].any():  # its ToR-mesh tuples failed too: the RNIC rule's to judge
            continue
        banned = np.zeros(len(links), dtype=bool)
        banned[k] = True
        out2, left2 = cover(None, banned)
        others = {c.link for c in out if c is not s and not c.tied_with}
        if (not any(c.access_rnic is not None and not c.tied_with for c in out2)
                and len(out2) <= len(out)
                and others <= {c.link for c in out2 if not c.tied_with}
                and not (left2[heavy] > left[heavy]).any()
                and left2[~heavy].sum() <= left[~heavy].sum() + stray_max
                and _new_claims_stand_alone(out2, others, None, links, l_idx, rows, heavy)):
            return out2, left2
    return out, left


def _new_claims_stand_alone(out2: list[Suspect], claimed: set[str], banned: str | None, links: np.ndarray,
                            l_idx: np.ndarray, rows: np.ndarray, heavy: np.ndarray) -> bool:
    """Whether each link the swap would newly claim fails a heavy group (a failing 5-tuple) that neither
    the banned claim nor any other suspect of the new cover crosses: failures it alone explains.

    Banning a right claim spreads its failures over the links its tuples also cross; a healthy one
    among them then explains nothing of its own (a flapping ``A->S3`` banned, its tuples to B and C went
    to ``B->S3`` and ``C->S3``, and ``B->S3`` had no failing tuple that avoided both), whereas each of two
    real faults has tuples that cross neither the other nor the link that outscored them.

    ``banned`` None: the banned link's groups are not set aside (a banned access link is on every group of
    its RNIC, :func:`_swap_access_claim`).
    """
    on = {str(lk): set(rows[l_idx == i].tolist()) for i, lk in enumerate(links)}
    for t in out2:
        if t.tied_with or t.link in claimed:
            continue
        others = set(on[banned]) if banned is not None else set()
        for u in out2:
            if u is not t:
                for lk in (u.link, *u.tied_with):
                    others |= on[lk]
        if not any(heavy[r] for r in on[t.link] - others):
            return False
    return True


def _one_link_for_ties(out: list[Suspect], explained_by: list[frozenset[int]], left0: np.ndarray,
                       l_idx: np.ndarray, rows: np.ndarray,
                       start: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], min_votes: int) -> int | None:
    """Parsimony over ties: the one link on the paths of every heavy failing group (``min_votes`` or more
    failures) of two or more of the cover's tied suspects, if any (the most voted), else None.

    A partial 5-tuple loss on a link with much traffic fails a few tuples whose paths differ; each makes
    a tie of its own paths' links when the cover reaches it (the faulty link's ratio is small, so links
    on one tuple's path score higher), and the faulty link is the one those ties have in common. The
    cover is then run again with it named first; the caller keeps that cover when it names fewer links
    and explains as much.

    Args:
        out: the cover's suspects; explained_by: the failing groups each explained.
        left0: failures per group; l_idx, rows: the link and group of each (group, link) pair.
        start: :func:`greedy_cover`'s ``passing`` on the whole window (votes, ratio, ok, log p).
    """
    tied = [explained_by[i] for i, s in enumerate(out) if s.tied_with and s.ratio < DEAD_RATIO]
    if len(tied) < 2:
        return None
    heavy = [frozenset(r for r in g if left0[r] >= min_votes) or g for g in tied]
    votes, _, ok, _ = start
    for j in np.argsort(-votes, kind="stable"):
        if not ok[j]:
            continue
        on_j = set(rows[l_idx == j].tolist())
        if sum(1 for g in heavy if g <= on_j) >= 2:
            return int(j)
    return None


def _ties_to_common_link(out: list[Suspect], left: np.ndarray, explained_by: list[frozenset[int]],
                         left0: np.ndarray, l_idx: np.ndarray, rows: np.ndarray, links: np.ndarray,
                         cover: Callable[[int | None, np.ndarray | None], tuple[list[Suspect], np.ndarray]],
                         min_votes: int) -> tuple[list[Suspect], np.ndarray]:
    """Parsimony over ties beside other faults: the cover run again with every tied link banned but the one
    on the heavy failing groups of the most tied suspects (at least two), kept when it names that link,
    keeps every claim of the first cover, names fewer suspects and leaves no more failures unexplained.

    :func:`_one_link_for_ties` names the common link first, and its test is on the whole window. Beside
    another fault both fail: a dead link's failures raise the background the common link is tested
    against, and a link named first takes every failure crossing it, a flapping link's too, which then
    spread over the links of that fault's paths (seed 25584, scenario 243: an 11 % partial loss on
    ``T5->P1S2`` beside a flapping ``P0S1->X2`` and a dead ``T2->P0S1``, its failing tuples tied in
    two, then four groups that all held ``T5->P1S2``, three windows in a row). With the tied links
    banned, the cover names the other faults first, as it did, and then the common link on what they
    leave, tested on that.

    Args:
        out, left: the cover's suspects and the failures it left per failing group.
        explained_by: the failing groups each suspect explained; left0: failures per group before the
            cover; l_idx, rows: the link and group of each (group, link) pair; links: link names (sorted).
        cover: the cover, given (``first``, ``banned``); min_votes: failures that make a group heavy.
    """
    tied = [(s, explained_by[i]) for i, s in enumerate(out) if s.tied_with and s.ratio < DEAD_RATIO]
    if len(tied) < 2:
        return out, left
    heavy = [frozenset(r for r in g if left0[r] >= min_votes) or g for _, g in tied]
    on = {str(lk): set(rows[l_idx == i].tolist()) for i, lk in enumerate(links)}
    names = sorted({lk for s, _ in tied for lk in (s.link, *s.tied_with)})
    held = {lk: sum(1 for g in heavy if g <= on[lk]) for lk in names}
    best = max(held.values())
    common = [lk for lk in names if held[lk] == best]
    if best < 2 or len(common) != 1:  # no link, or several alike: the ties are the evidence's own
        return out, left
    banned = np.zeros(len(links), dtype=bool)
    for lk in names:
        if lk != common[0]:
            banned[np.searchsorted(links, lk)] = True
    out2, left2 = cover(None, banned)
    claims = {s.link for s in out if not s.tied_with}
    claims2 = {s.link for s in out2 if not s.tied_with}
    if (common[0] in claims2 and claims <= claims2 and len(out2) < len(out) and left2.sum() <= left.sum()):
        return out2, left2
    return out, left


def _tuple_signature(rows_l: frozenset[int], left: np.ndarray, crossing: float, background: float,
                     cfg: VoteConfig, heavy: bool = True) -> frozenset[int]:
    """The failing groups (≈ 5-tuples) that make a link's failures, for the few-tuple tie of the cover.

    A partial 5-tuple loss fails every probe of the tuples its hash selects (tens per window each);
    background loss fails single probes, on any path. The *heavy* rows (at least ``cfg.min_votes``
    unexplained failures) are the link's tuples when its other rows hold no more failures than
    background loss gives over its crossings (``background`` x ``crossing``, plus three standard
    deviations, as for the window's leftovers in :func:`vote_step`); otherwise every row counts, as
    does every row when ``heavy`` is False or no row is heavy. So a single background drop on a
    path of one link of a tie does not make that link the only one that explains the failures.

    Args:
        rows_l: the link's failing groups with unexplained failures.
        left: unexplained failures per group.
        crossing: probes that crossed the link in the window.
        background: the per-probe background rate (floor).
        cfg: the vote's constants (``min_votes``).
        heavy: whether to drop the stray rows at all (False: latency votes).
    """
    if not heavy:
        return rows_l
    big = frozenset(r for r in rows_l if left[r] >= cfg.min_votes)
    if not big or big == rows_l:
        return rows_l
    stray = float(sum(left[r] for r in rows_l - big))
    expected = background * max(crossing, 0.0)
    return big if stray <= expected + 3.0 * math.sqrt(expected) else rows_l


def _one_link_for_all(out: list[Suspect], left0: np.ndarray, left: np.ndarray, l_idx: np.ndarray,
                      rows: np.ndarray, links: np.ndarray,
                      start: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], loss_votes: bool,
                      min_votes: int = 2, stray_max: float = 0.0) -> tuple[int | None, float]:
    """Parsimony: the one link that explains every failure the cover's several suspects explain, if any
    (the most voted of them), else None; the cover is then run again with it named first.

    Single drops (groups with fewer than ``min_votes`` failures) are left out of "every failure" when
    they hold no more than ``stray_max`` failures in all (what background loss gives over the window): a
    background drop on a path of one suspect must not keep the one link from explaining the rest, as it
    must not break a tie (:func:`_tuple_signature`). Returns ``(link index or None, failures so left
    out)``; the rerun may leave that many more failures unexplained.

    The cover's score (``votes²/crossings``) trusts each link's crossing count, and that count is
    diluted for a link that failed mid-window (its probes passed before the fault) or whose last
    traces predate a reroute (a ToR whose uplink went down moved its own flows at once, and their
    traces still cross the dead link until traced again); the far ToRs' links to the same spine then
    score higher while each explains only part of the failures, and the dead link ends tied with one of
    them. One link on every failing path of two or more suspects is the simpler explanation, and a
    healthy link is rarely on all of them. Not applied when a suspect looks dead (ratio at least
    :data:`DEAD_RATIO`: a fault in its own right), nor to latency votes.

    Args:
        out: the cover's suspects. left0, left: failures per group before and after the cover.
        l_idx, rows: the link and the failing group of each (group, link) pair; links: link names.
        start: :func:`greedy_cover`'s ``passing`` on the whole window (votes, ratio, ok, log p).
        loss_votes: whether these are loss votes (with a background rate).
    """
    if not loss_votes or len(out) < 2 or any(s.ratio >= DEAD_RATIO for s in out):
        return None, 0.0
    explained = np.nonzero((left0 > 0) & (left == 0))[0]
    heavy = explained[left0[explained] >= min_votes]
    stray = float(left0[explained].sum() - left0[heavy].sum())
    if len(heavy) and stray <= stray_max:
        explained = heavy
    else:
        stray = 0.0
    votes, _, ok, _ = start
    for j in np.argsort(-votes, kind="stable"):
        if ok[j] and np.isin(explained, rows[l_idx == j]).all():
            return int(j), stray
    return None, 0.0


def _expand_dark(pl: pa.Table, crossing: pa.Table, n_g: np.ndarray | None = None,
                 known_links: Sequence[str] = ()) -> pa.Table:
    """Replace each pseudo-link ``X->*`` (a trace that stopped after X with no known next hop) by the
    links that could be that next hop: X's links upward (X as the lower end) when any are known,
    else its links downward. Known: crossed by this window's probes, or in ``known_links`` (earlier
    windows'): a link dead since the last window carries no complete trace now, and without it the dark
    traces it stops would all go to its live siblings (both links of a core down on a three-tier Clos: the
    other core's links were claimed, window after window). A failing probe votes once for each (ECMP left
    the choice open); with no candidate known the pseudo-link stays (the vote reports it ``undetermined``).

    With ``n_g`` (failing probes per group of ``pl``'s rows), candidates that look dead on the complete
    traces (at least :data:`DEAD_RATIO` of the probes crossing them failed, and two or more did) are
    the only ones kept when there are any: a trace stops where the next hop does not answer, and a
    dead link is what stops it; a next link that carries passing probes did not. Without this, a dead
    uplink's dark traces were spread over its healthy siblings, and one of those outscored the dead link.

    Returns:
        ``pl`` itself when no pseudo-link is in it; else ``row``, ``link``, ``access_rnic``, ``w`` (the
        row's vote for the link: 1, or 1 / candidates for a dark hop) and ``seen`` (1.0 where the row's
        trace names the link, 0.0 where it is only a candidate), one row per (row, link).
    """
    links = pl["link"].to_pylist()
    suffix = LINK_SEP + NO_ANSWER
    if not any(lk.endswith(suffix) for lk in links):
        return pl
    up: dict[str, list[str]] = {}
    down: dict[str, list[str]] = {}
    # the known links at a node a trace stopped after: found by Arrow over every link (the crossing counts
    # name tens of thousands), then only the few at those nodes go through Python
    nodes = pa.array(sorted({lk[: -len(suffix)] for lk in links if lk.endswith(suffix)}), pa.string())
    every = pc.unique(pa.chunked_array([*crossing["link"].cast(pa.string()).chunks,
                                        *pl["link"].cast(pa.string()).chunks,
                                        pa.array(list(known_links), pa.string())], pa.string()))
    every = every.filter(pc.invert(pc.ends_with(every, suffix)))
    ends = pc.split_pattern(every, LINK_SEP, max_splits=1)
    lo, hi = pc.list_element(ends, 0), pc.list_element(ends, 1)
    at = pc.or_(pc.is_in(lo, value_set=nodes), pc.is_in(hi, value_set=nodes))
    for lk, a, b in zip(every.filter(at).to_pylist(), lo.filter(at).to_pylist(), hi.filter(at).to_pylist(),
                        strict=True):
        up.setdefault(a, []).append(lk)
        down.setdefault(b, []).append(lk)
    access = dict(zip(links, pl["access_rnic"].to_pylist(), strict=True))
    dead = _dead_on_complete_traces(pl, crossing, n_g, suffix) if n_g is not None else set()
    out_row, out_link, out_acc, out_w, out_seen = [], [], [], [], []
    for r, lk in zip(pl["row"].to_pylist(), links, strict=True):
        dark = lk.endswith(suffix)
        if dark:
            node = lk[: -len(suffix)]
            cands = sorted(up.get(node) or down.get(node) or [lk])
            cands = [c for c in cands if c in dead] or cands
        else:
            cands = [lk]
        for c in cands:
            out_row.append(r)
            out_link.append(c)
            out_acc.append(access.get(c))
            out_w.append(1.0 / len(cands))
            out_seen.append(0.0 if dark else 1.0)
    t = pa.table({"row": pa.array(out_row, pa.int64()), "link": pa.array(out_link, pa.string()),
                  "access_rnic": pa.array(out_acc, pa.string()), "w": pa.array(out_w, pa.float64()),
                  "seen": pa.array(out_seen, pa.float64())})
    g = t.group_by(["row", "link"]).aggregate([("access_rnic", "max"), ("w", "max"), ("seen", "max")])
    return g.rename_columns(["row", "link", "access_rnic", "w", "seen"]).sort_by([("row", "ascending"),
                                                                                  ("link", "ascending")])


def _dead_on_complete_traces(pl: pa.Table, crossing: pa.Table, n_g: np.ndarray, suffix: str) -> set[str]:
    """Links whose probes on complete traces nearly all failed (:data:`DEAD_RATIO`, at least two failures):
    failures from ``pl``'s known links (``n_g`` per row), over the window's ``crossing`` counts."""
    known = pc.invert(pc.ends_with(pl["link"], suffix))
    sub = pl.filter(known)
    if sub.num_rows == 0 or crossing.num_rows == 0:
        return set()
    rows = sub["row"].to_numpy().astype(np.int64)
    names, idx = np.unique(np.array(sub["link"].to_pylist(), dtype=object), return_inverse=True)
    failed = np.bincount(idx, weights=n_g[rows].astype(np.float64), minlength=len(names))
    cmap = dict(zip(crossing["link"].to_pylist(), crossing["n"].to_pylist(), strict=True))
    cross = np.array([max(cmap.get(lk, 0), 1) for lk in names], dtype=np.float64)
    return {str(lk) for lk, f, c in zip(names, failed, cross, strict=True) if f >= 2 and f / c >= DEAD_RATIO}


LINK_MEMORY_NS = 2 * 3_600_000_000_000
"""How long the vote keeps a link as a candidate next hop after probes last crossed it or a window last
named it (ns): two hours, the life of an inter-ToR 5-tuple (its path index entry,
:data:`streams.pingmesh.path_index.EVICT_AFTER_NS`). A dead link named every window stays."""


def remember_links(state: AnalyzerState, crossing: pa.Table, named: Sequence[str], ws: int,
                   memory_ns: int = LINK_MEMORY_NS) -> None:
    """Fold a window's links into ``state.links_seen``: those its probes crossed (``crossing``: ``link``, ``n``;
    pseudo-links ``X->*`` left out) and those it ``named``, at the window start ``ws`` (ns); forget links
    older than ``memory_ns``. Bounded by the fabric's links."""
    if crossing.num_rows:
        lk = crossing["link"].cast(pa.string())
        keep = pc.and_(pc.greater(crossing["n"], 0), pc.invert(pc.ends_with(lk, LINK_SEP + NO_ANSWER)))
        state.links_seen.update(dict.fromkeys(lk.filter(keep).to_pylist(), ws))
    state.links_seen.update({x: ws for x in named if not x.endswith(LINK_SEP + NO_ANSWER)})
    if any(ws - t >= memory_ns for t in state.links_seen.values()):
        state.links_seen = {x: t for x, t in state.links_seen.items() if ws - t < memory_ns}


def _probing_limit(crossing: pa.Table, links: list[str]) -> bool:
    """True when every link of a tie was crossed by as many probes as the others in the window (with the
    same failures, the same probes: no vote over this window's probes can split them; the analyzer's
    probe request asks for probes that do, :mod:`streams.pingmesh.probe_requests`)."""
    if crossing.num_rows == 0:
        return False
    hit = crossing.filter(pc.is_in(crossing["link"], value_set=pa.array(links, crossing["link"].type)))
    counts = dict(zip(hit["link"].to_pylist(), hit["n"].to_pylist(), strict=True))
    return len(counts) == len(links) and len(set(counts.values())) == 1


def _confidence(votes: float, evidence: float, rel_second: float, cfg: VoteConfig) -> float:
    """Probability a named link is faulty: support × evidence (significance or ratio term) × margin,
    each in [0, 1]."""
    support = 1.0 - math.exp(-votes / cfg.support_scale)
    margin = max(0.0, 1.0 - rel_second**4)
    return round(support * evidence * margin, 6)


def _answers_fail(ctx: WindowContext, rnic: str, ratio: float) -> bool:
    """The RNIC rule over every pinglist's probes to ``rnic`` (inter-ToR and service too, not only its ToR
    peers'): more than ``ratio`` of those no earlier step took timed out, seen by two or more probers and by
    at least half of the probers that probed it. A prober that cannot send fails only the probes it sends:
    it is not judged here; nor is a partial 5-tuple loss elsewhere that dropped a few tuples to the RNIC
    (their probers alone see it fail)."""
    pairs = ctx.partial.pairs
    if pairs.num_rows == 0:
        return False
    mask = pc.equal(pairs["responder_rnic"], rnic).to_numpy(zero_copy_only=False) & ~ctx.taken_pairs()
    if not mask.any():
        return False
    sub = pairs.filter(pa.array(mask))
    n = int(pc.sum(sub["n"]).as_py() or 0)
    bad = int(pc.sum(sub["n_timeout"]).as_py() or 0)
    probers = len(set(sub["prober_rnic"].to_pylist()))
    seen = len(set(sub.filter(pc.greater(sub["n_timeout"], 0))["prober_rnic"].to_pylist()))
    return n > 0 and bad / n > ratio and seen >= 2 and 2 * seen >= probers


def _siblings_clean(ctx: WindowContext, rnic: str, failing: pa.Table, crossing: pa.Table, ratio: float) -> bool:
    """True when ``rnic``'s host has other RNICs and each one's access link was crossed in the window with
    at most ``ratio`` of those probes failing (``failing``: the vote's groups, less those through ``rnic``'s
    own access link; ``crossing``: its counts). A busy or dying host fails the probes of all its RNICs; one
    RNIC failing beside clean siblings is the RNIC, its cable or its ToR port."""
    host = ctx.rnic_host.get(rnic)
    others = [r for r in ctx.rnics_of(host) if r != rnic] if host else []
    if not others:
        return False
    access = {lk.split(LINK_SEP, 1)[0]: lk for lk in crossing["link"].to_pylist()
              if lk.split(LINK_SEP, 1)[0] in others}
    if set(access) != set(others):
        return False  # a sibling no probe crossed says nothing
    cmap = dict(zip(crossing["link"].to_pylist(), crossing["n"].to_pylist(), strict=True))
    fmap: dict[str, int] = {}
    if failing.num_rows:
        # probes between the RNIC and a sibling fail through the RNIC: they say nothing of the sibling
        pl = probe_links(failing["fwd_hops"], failing["rev_hops"])
        own = pc.starts_with(pl["link"], rnic + LINK_SEP)
        mine = np.zeros(failing.num_rows, dtype=bool)
        mine[pl["row"].filter(own).to_numpy().astype(np.int64)] = True
        rest = failing.filter(pa.array(~mine))
        if rest.num_rows:
            fails = link_counts(rest)
            fmap = dict(zip(fails["link"].to_pylist(), fails["n"].to_pylist(), strict=True))
    return all(cmap[lk] > 0 and fmap.get(lk, 0) / cmap[lk] <= ratio for lk in access.values())


def tor_mesh_probes(t: pa.Table) -> int:
    """Probes (``n``) of ``t``'s ToR-mesh rows (``pinglist`` = ``tor_mesh``); 0 without such a column."""
    if not t.num_rows or "pinglist" not in t.column_names:
        return 0
    return int(pc.sum(pc.if_else(pc.equal(t["pinglist"], "tor_mesh"), t["n"], 0)).as_py() or 0)


def vote_step(ctx: WindowContext, cfg: VoteConfig, background: float, min_unexplained: int,
              rnic_ratio: float = 0.10, charge_ns: int = 60_000_000_000) -> CoverResult:
    """Step 4: vote the timeouts no earlier step explained over their paths (Algorithm 1 extended).

    The crossing counts lose the probes earlier steps took (so a dead host's access links do
    not look clean). Emits ``switch`` verdicts, ``undetermined`` for ties (links that explain
    the same failures equally: a right abstention when the fault is among them), ``rnic`` for an
    access link that nearly every probe through it failed on (``access_claim_ratio``), or that fails
    over the RNIC rule's ratio (``rnic_ratio``) while its RNIC is still charged from an RNIC claim
    (the rule had its two probers then; its ToR peers are down or busy now) or while its host's other
    RNICs are clean (:func:`_siblings_clean`; a claim renews the charge for ``charge_ns``),
    ``undetermined`` for other access links below the RNIC rule, and
    ``undetermined unexplained`` for leftovers.
    """
    failing = ctx.partial.failing
    keep = ~ctx.taken_failing()
    vote = failing.filter(pa.array(keep)) if failing.num_rows else failing
    crossing = ctx.partial.crossing
    excl = failing.filter(pa.array(~keep)) if failing.num_rows else failing
    if excl.num_rows:
        sub = link_counts(excl)
        j = crossing.join(sub.rename_columns(["link", "_x"]), "link", join_type="left outer")
        crossing = pa.table({"link": j["link"], "n": pc.subtract(j["n"], pc.fill_null(j["_x"], 0))})
    probes = int(ctx.partial.pairs["n"].to_numpy().sum()) if ctx.partial.pairs.num_rows else 0
    probes -= int(excl["n"].to_numpy().sum()) if excl.num_rows else 0
    local = tor_mesh_probes(ctx.partial.pairs) - tor_mesh_probes(excl)
    prev = consecutive(ctx.state.carried, ctx.ws, ctx.window_ns)  # for a loss too low to show in one window
    cover = greedy_cover(vote, crossing, cfg, probes=probes, background=background,
                         known_links=list(ctx.state.links_seen), local_probes=max(local, 0), carry=prev, ws=ctx.ws)
    if cover.carry is not None:
        ctx.state.carried = (cover.carry, *prev)[:CARRY_WINDOWS]
    ctx.vote_crossing = crossing
    remember_links(ctx.state, ctx.partial.crossing, [s.link for s in cover.suspects], ctx.ws)
    charged = ctx.charged_rnics()
    claimed = [s.link for s in cover.suspects if not s.tied_with and s.access_rnic is None
               and not s.link.endswith(LINK_SEP + NO_ANSWER)]
    hidden = co_crossed(vote, claimed, {t for s in cover.suspects for t in s.tied_with}) if claimed else {}
    # a lossy claim whose failing probes crossed another claim (a dead link beside it) is probed off that claim
    lossy = {s.link for s in cover.suspects if s.ratio < DEAD_RATIO} & set(claimed)
    shared = ({c: o for c, o in claims_crossed(vote, claimed).items() if o and c in lossy}
              if lossy and len(claimed) > 1 else {})  # most windows: no lossy claim beside another, no second scan
    named = [s.link for s in cover.suspects if s.access_rnic is None and not s.link.endswith(LINK_SEP + NO_ANSWER)]
    paths = failing_paths(vote, named) if named else {}
    for s in cover.suspects:
        ev = {"votes": s.votes, "failed": s.failed, "crossing": s.crossing, "ratio": round(s.ratio, 6)}
        if s.carried is not None:
            # too few failures in one window for its test, but not with the windows' before pooled in
            ev["previous_window"] = {"failed": s.carried[0], "crossing": s.carried[1]}
        if s.link.endswith(LINK_SEP + NO_ANSWER) and s.access_rnic is None:
            ctx.emit("undetermined", s.link, s.ratio, 0.0, s.failed, s.crossing,
                     {**ev, "link_confidence": s.confidence, "tied_with": list(s.tied_with),
                      "why": "traces stop at this hop and no complete trace tells the next link"})
        elif s.tied_with:
            limit = _probing_limit(crossing, [s.link, *s.tied_with])
            ctx.emit("undetermined", "|".join([s.link, *s.tied_with]), s.ratio, 0.0, s.failed, s.crossing,
                     {**ev, "link_confidence": s.confidence, "probing_limit": limit,
                      "failing_paths": paths.get(s.link, []),
                      "why": ("probing limit: the window's probes crossed these links together, so they fail "
                              "together; probes that split them are requested" if limit
                              else "links explain the same failures equally")})
        elif s.access_rnic is not None and s.ratio >= cfg.access_claim_ratio:
            # nearly every probe through the RNIC's access link failed, from all pinglists: the RNIC, its
            # cable or ToR port (all ``rnic`` faults), even where too few ToR peers were left to probe it
            ctx.emit("rnic", s.access_rnic, s.votes, s.confidence, s.failed, s.crossing,
                     {**ev, "link": s.link, "why": "access link: nearly every probe through it failed"})
        elif s.access_rnic is not None and s.ratio > rnic_ratio and (
                s.access_rnic in charged or (_answers_fail(ctx, s.access_rnic, rnic_ratio)
                                             and _siblings_clean(ctx, s.access_rnic, vote, crossing, rnic_ratio / 2))):
            why = ("access link of an RNIC claimed within its charge still fails over the RNIC rule's ratio"
                   if s.access_rnic in charged else
                   "probes to the RNIC from every pinglist fail over the RNIC rule's ratio, seen by two or more "
                   "probers, while the host's other RNICs' access links are clean")
            ctx.emit("rnic", s.access_rnic, s.votes, s.confidence, s.failed, s.crossing,
                     {**ev, "link": s.link, "why": f"{why}; too few ToR peers left for the rule"})
            ctx.state.charged[s.access_rnic] = max(ctx.state.charged.get(s.access_rnic, 0),
                                                   ctx.we + charge_ns - ctx.window_ns)
        elif s.access_rnic is not None:
            ctx.emit("undetermined", s.access_rnic, s.ratio, 0.0, s.failed, s.crossing,
                     {**ev, "link": s.link, "link_confidence": s.confidence,
                      "why": "access link below the RNIC rule (RNIC, cable or ToR port)"})
        else:
            verify = hidden.get(s.link)
            ev = {**ev, "failing_paths": paths.get(s.link, [])}
            if verify:
                ev["verify_links"] = verify
            if s.link in shared:
                ev["verify_self"] = shared[s.link]  # its failures shared with these claims: probed off them
            ctx.emit("switch", s.link, s.ratio, s.confidence, s.failed, s.crossing, ev)
    left = cover.unexplained + cover.untraced
    # Leftovers within what background loss gives over the window's probes (the per-probe floor, plus
    # three standard deviations of its Poisson count) are not a finding: a healthy fabric's 1e-5..1e-4
    # per link would otherwise make an ``undetermined`` in most healthy windows of a large fabric.
    expected = background * max(probes, 0)
    if left >= min_unexplained and left > expected + 3.0 * math.sqrt(expected):
        ctx.emit("undetermined", "unexplained", 0.0, 0.0, left, cover.total_failed,
                 {"unexplained": cover.unexplained, "untraced": cover.untraced,
                  "why": "timeouts no rule or link explains"})
    return cover
