"""What the triage steps of one window share: its counts, the carried state, the verdicts so far.

:func:`streams.pingmesh.analyzer.analyze_window` builds one :class:`WindowContext` per closed
window and hands it to each step in R-Pingmesh's fixed order (§4.3, §5; digest Figure 3):
the triage (:mod:`streams.pingmesh.triage`: host down, stale QPN, the RNIC rule with busy host and
host unreachable, one module each), switch voting (:mod:`streams.pingmesh.tomography`), latency
(:mod:`streams.pingmesh.latency`). A step emits :class:`Claim` rows and marks the timed-out
probes it explained, so the later steps see only the rest.

Confidence helpers live here too: every kind's confidence is computed from its own evidence
(a tail probability of the counts under the healthy hypothesis, and a margin over the
competing explanation), never a constant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import Key, key
from schemas.verdicts import verdict_id
from streams.pingmesh.carried_loss import LinkCarry
from streams.pingmesh.partial import PartialKeys, WindowPartial

__all__ = ["AnalyzerState", "Claim", "WindowContext", "verdict_id"]

VERDICT = "verdict.v1"


@dataclass
class AnalyzerState:
    """What one window leaves for the next (keep it in the reducer; plain dicts and one table).

    Attributes:
        charged: RNIC → event time (ns) until which its timeouts are charged to it.
        host_baseline: (host, role) → p50 responder/prober delay baseline (ns).
        flow_baseline: table ``flow``, ``baseline_ns``: P99 network RTT baseline per flow.
        recent: (kind, location) → (verdict_id, window_start_ns) of the last 60 s, for revisions.
        job_flows: job → connections seen in earlier windows (coverage's denominator); a job unseen for
            ``CoverageConfig.job_retention_ns`` is dropped, so this holds the running jobs, not every job.
        job_seen_ns: job → start (ns) of the newest window with service probes of it.
        rnic_host: RNIC → host, learnt from probe rows.
        links_seen: switch link → start (ns) of the newest window whose probes crossed it on a complete
            trace or that named it; the vote's candidates for the next hop of a trace that stopped
            (:func:`streams.pingmesh.tomography.remember_links`). Forgotten ``LINK_MEMORY_NS`` after that.
        carried: the last windows' per-link counts (newest first, at most ``CARRY_WINDOWS``) for the vote's
            pooled test of a low-rate loss (:mod:`streams.pingmesh.carried_loss`); switch links that failed
            probes only.
    """

    charged: dict[str, int] = field(default_factory=dict)
    host_baseline: dict[tuple[str, str], float] = field(default_factory=dict)
    flow_baseline: pa.Table | None = None
    recent: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    job_flows: dict[str, set[str]] = field(default_factory=dict)
    job_seen_ns: dict[str, int] = field(default_factory=dict)
    rnic_host: dict[str, str] = field(default_factory=dict)
    links_seen: dict[str, int] = field(default_factory=dict)
    carried: tuple[LinkCarry, ...] = ()


def isin(t: pa.Table, col: str, values: set[str]) -> np.ndarray:
    """Boolean mask of the rows of ``t`` whose ``col`` is one of ``values``."""
    if t.num_rows == 0 or not values:
        return np.zeros(t.num_rows, dtype=bool)
    return pc.is_in(t[col], pa.array(sorted(values), pa.string())).to_numpy(zero_copy_only=False)


def sums_by(t: pa.Table, mask: np.ndarray, by: str) -> dict[str, tuple[int, int]]:
    """(timeouts, probes) per value of ``by`` over the rows of ``t`` selected by ``mask`` (one group-by)."""
    if t.num_rows == 0 or not mask.any():
        return {}
    g = t.filter(pa.array(mask)).group_by([by]).aggregate([("n_timeout", "sum"), ("n", "sum")])
    return {k: (int(f), int(n)) for k, f, n in zip(g[by].to_pylist(), g["n_timeout_sum"].to_pylist(),
                                                   g["n_sum"].to_pylist(), strict=True)}


# ---- confidence from evidence ---------------------------------------------------------------


def log_binom_tail(k: np.ndarray | float, n: np.ndarray | float, p: float) -> np.ndarray:
    """Natural log of an upper bound of P(X ≥ k) for X ~ Binomial(n, p) (Chernoff–Hoeffding).

    ``-n · KL(k/n ‖ p)`` for ``k/n > p``, else 0 (no evidence against ``p``). Vectorised; the
    bound is conservative (never smaller than the exact tail's log), so a test built on it
    errs towards silence. Source: Hoeffding (1963), Theorem 1.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    p = min(max(float(p), 1e-12), 1 - 1e-12)
    x = np.clip(k / n, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(x > 0, x * np.log(np.maximum(x, 1e-300) / p), 0.0) + \
            np.where(x < 1, (1 - x) * np.log(np.maximum(1 - x, 1e-300) / (1 - p)), 0.0)
    return np.where(x > p, -n * kl, 0.0)


def significance(log_tail: float, tests: int) -> float:
    """1 − Bonferroni-corrected p-value: the probability that the counts are not chance, in [0, 1]."""
    return float(max(0.0, 1.0 - math.exp(min(0.0, log_tail)) * max(tests, 1)))


def saturating(x: float, scale: float) -> float:
    """``1 − exp(−x / scale)``: evidence ``x`` (count, factor) mapped to [0, 1)."""
    return 1.0 - math.exp(-max(x, 0.0) / scale)


@dataclass
class Claim:
    """One verdict row before impact grading (the columns of ``verdict.v1`` that steps fill)."""

    kind: str
    location: str
    votes: float
    confidence: float
    failed_probes: int
    total_probes: int
    evidence: dict
    revision_of: str | None
    window_start_ns: int


@dataclass
class WindowContext:
    """One closed window as every triage step sees it.

    Attributes:
        partial: the merged counts of the window.
        window_ns: window length (ns).
        uploads: newest upload (ns, prober host clock) per host, the window's own uploads included.
        rnic_host: RNIC → host.
        state: carried between windows; steps mutate it.
        claims: the verdict rows emitted so far, in order.
        p_taken / f_taken: step name → rows of ``partial.pairs`` / ``partial.failing`` that step
            explained (later steps leave them alone).
        vote_crossing: probes crossing each link less those earlier steps took (set by the vote).
        keys: codes of the partial's key columns known without hashing them (the reducer's fold,
            :class:`~streams.pingmesh.partial.PartialKeys`); :meth:`key` codes the others.
    """

    partial: WindowPartial
    window_ns: int
    uploads: dict[str, int]
    rnic_host: dict[str, str]
    state: AnalyzerState
    claims: list[Claim] = field(default_factory=list)
    p_taken: dict[str, np.ndarray] = field(default_factory=dict)
    f_taken: dict[str, np.ndarray] = field(default_factory=dict)
    vote_crossing: pa.Table | None = None
    keys: PartialKeys = field(default_factory=dict)
    _keyed: dict[tuple[str, str], Key] = field(default_factory=dict, repr=False)

    def key(self, table: str, column: str) -> Key:
        """Order-preserving codes (:func:`schemas.group_codes.key`) of column ``column`` of ``partial.<table>``,
        one per row: from :attr:`keys` when the fold gave them, else coded once per window and kept."""
        k = self.keys.get(table, {}).get(column) or self._keyed.get((table, column))
        if k is None:
            k = self._keyed[(table, column)] = key(getattr(self.partial, table)[column])
        return k

    @property
    def ws(self) -> int:
        """Window start (ns)."""
        return self.partial.window_start_ns

    @property
    def we(self) -> int:
        """Window end (ns, exclusive)."""
        return self.partial.window_start_ns + self.window_ns

    def emit(self, kind: str, location: str, votes: float, conf: float, failed: int, total: int,
             evidence: dict, revision_of: str | None = None, window: int | None = None) -> None:
        """Add one verdict row (``window``: the start of the window it is about; default this one)."""
        self.claims.append(Claim(kind, location, float(votes), round(float(conf), 6), int(failed), int(total),
                                 evidence, revision_of, self.ws if window is None else window))

    def take(self, step: str, pairs_mask: np.ndarray | None = None, failing_mask: np.ndarray | None = None) -> None:
        """Mark rows of ``pairs`` / ``failing`` as explained by ``step`` (or-ed with earlier marks)."""
        if pairs_mask is not None:
            old = self.p_taken.get(step)
            self.p_taken[step] = pairs_mask if old is None else old | pairs_mask
        if failing_mask is not None:
            old = self.f_taken.get(step)
            self.f_taken[step] = failing_mask if old is None else old | failing_mask

    def taken_pairs(self, *steps: str) -> np.ndarray:
        """Rows of ``pairs`` explained by ``steps`` (all steps if none named)."""
        return self._any(self.p_taken, self.partial.pairs.num_rows, steps)

    def taken_failing(self, *steps: str) -> np.ndarray:
        """Rows of ``failing`` explained by ``steps`` (all steps if none named)."""
        return self._any(self.f_taken, self.partial.failing.num_rows, steps)

    @staticmethod
    def _any(d: dict[str, np.ndarray], n: int, steps: tuple[str, ...]) -> np.ndarray:
        out = np.zeros(n, dtype=bool)
        for k, m in d.items():
            if not steps or k in steps:
                out |= m
        return out

    def charged_rnics(self) -> set[str]:
        """RNICs whose RNIC claim is still charged at this window's start (``state.charged``, 60 s)."""
        return {r for r, until in self.state.charged.items() if until >= self.ws}

    def rnics_of(self, host: str) -> list[str]:
        """RNICs of a host as the probe rows named them, sorted."""
        return sorted(r for r, h in self.rnic_host.items() if h == host)

    def revise(self, kinds_locations: list[tuple[str, str]], kind: str, location: str, votes: float,
               conf: float, failed: int, total: int, evidence: dict) -> None:
        """Emit a ``kind`` revision of each earlier-window verdict (kind, location) still in ``state.recent``."""
        for k, loc in kinds_locations:
            prev = self.state.recent.get((k, loc))
            if prev is not None and prev[1] < self.ws:
                self.emit(kind, location, votes, conf, failed, total, {**evidence, "revises": k,
                                                                         "revised_location": loc},
                          prev[0], prev[1])
                del self.state.recent[(k, loc)]


def log_poisson_tail(k: np.ndarray | float, lam: np.ndarray | float, exact_below: int = 64) -> np.ndarray:
    """Natural log of P(X ≥ k) for X ~ Poisson(``lam``): the binomial tail for rare loss
    (n large, p small; the Poisson tail is the larger of the two, so the test stays conservative).

    Exact by summation for ``k`` < ``exact_below``; above, or where the exact tail underflows,
    the Chernoff bound ``k − λ − k·ln(k/λ)``. Vectorised.
    """
    k = np.atleast_1d(np.asarray(k, dtype=np.float64))
    lam = np.broadcast_to(np.maximum(np.asarray(lam, dtype=np.float64), 1e-300), k.shape)
    i = np.arange(exact_below, dtype=np.float64)
    # log pmf of 0..exact_below-1 for each row; cdf of X <= k-1
    logpmf = i[None, :] * np.log(lam)[:, None] - lam[:, None] - np.array([math.lgamma(x + 1) for x in i])[None, :]
    below = i[None, :] < k[:, None]
    cdf = np.where(below, np.exp(logpmf), 0.0).sum(axis=1)
    exact = 1.0 - cdf
    with np.errstate(divide="ignore", invalid="ignore"):
        chern = np.where(k > lam, k - lam - k * np.log(np.maximum(k, 1e-300) / lam), 0.0)
        out = np.where((k < exact_below) & (exact > 1e-12), np.log(np.maximum(exact, 1e-300)), chern)
    return np.where(k <= 0, 0.0, np.minimum(out, 0.0))


def poisson_upper(k: np.ndarray | float, z: float = 3.09) -> np.ndarray:
    """Upper confidence bound of a Poisson mean from ``k`` observed events, one-sided at ``z`` standard
    normal deviates (3.09: 1 - 1e-3): the Wilson-Hilferty cube-root approximation of the exact
    (chi-square) bound ``chi2.ppf(1 - a, 2k + 2) / 2``: within 1 % of it at ``z`` = 1.645 (k = 0: 2.97
    against 3.00), and up to 2.3 % over it at 3.09 (k = 0: 7.07 against 6.91). Vectorised; shape of ``k``.
    """
    m = np.asarray(k, dtype=np.float64) + 1.0
    return m * (1.0 - 1.0 / (9.0 * m) + z / (3.0 * np.sqrt(m))) ** 3


def lookup_per_code(k: Key, mapping: Mapping[str, int]) -> pa.Array:
    """``mapping``'s value (int64) for each distinct value of ``k``, indexed by code (null where the name is not
    in ``mapping``): one lookup per distinct name, not per row."""
    at = pc.index_in(k.values(np.arange(k.card, dtype=np.int64)), value_set=pa.array(list(mapping), pa.string()))
    return pc.take(pa.array(list(mapping.values()), pa.int64()), at)


def probe_evidence(failed: int, total: int, q: float, tests: int) -> float:
    """Significance of ``failed`` timeouts among ``total`` probes against background loss ``q``."""
    if total <= 0:
        return 0.0
    return significance(float(log_poisson_tail(failed, total * q)[0]), tests)


def rnic_hosts(pairs: pa.Table) -> dict[str, str]:
    """RNIC → host, as the probe rows name them (prober and responder sides)."""
    out: dict[str, str] = {}
    for rc, hc in (("prober_rnic", "prober_host"), ("responder_rnic", "responder_host")):
        if pairs.num_rows == 0:
            continue
        g = pairs.group_by([rc, hc]).aggregate([])
        out.update(zip(g[rc].to_pylist(), g[hc].to_pylist(), strict=True))
    return out
