"""R-Pingmesh Eq. 1: how many random 5-tuples cover all N ECMP paths with probability P.

ECMP hashes each 5-tuple onto one of ``N`` equal paths between two ToRs. The chance
that ``k`` random tuples miss at least one path is, by inclusion–exclusion (the
coupon-collector bound of R-Pingmesh §4.1, Equation 1)::

    P_miss(N, k) = sum_{i=1..N} (-1)^(i+1) * C(N, i) * (1 - i/N)^k

The controller picks the smallest ``k`` with ``P_miss(N, k) <= 1 - P`` (the paper
uses ``P = 0.99``: ``k = 51`` for ``N = 8``, ``k = 255`` for ``N = 32``). Exact rational
arithmetic avoids the cancellation that the alternating sum suffers in floats.
"""

from __future__ import annotations

import math
from fractions import Fraction


def p_miss(n_paths: int, k: int) -> float:
    """Probability that ``k`` uniform random 5-tuples miss at least one of ``n_paths`` paths.

    Raises:
        ValueError: ``n_paths < 1`` or ``k < 0``.
    """
    return float(_p_miss_exact(n_paths, k))


def _p_miss_exact(n: int, k: int) -> Fraction:
    if n < 1 or k < 0:
        raise ValueError(f"p_miss needs n_paths >= 1 and k >= 0, got n_paths={n}, k={k}")
    total = Fraction(0)
    for i in range(1, n + 1):
        term = math.comb(n, i) * Fraction(n - i, n) ** k
        total += term if i % 2 else -term
    return total


def tuples_needed(n_paths: int, p: float = 0.99) -> int:
    """Smallest ``k`` with ``p_miss(n_paths, k) <= 1 - p`` (R-Pingmesh Eq. 1).

    Args:
        n_paths: number of parallel ECMP paths ``N`` between two ToRs (>= 1).
        p: wanted probability that every path is covered, in ``(0, 1)``.

    Returns:
        The number of inter-ToR 5-tuples ``k``; 1 when there is a single path.

    Raises:
        ValueError: ``n_paths < 1`` or ``p`` outside ``(0, 1)``.
    """
    if n_paths < 1:
        raise ValueError(f"tuples_needed: n_paths must be >= 1, got {n_paths}")
    if not 0.0 < p < 1.0:
        raise ValueError(f"tuples_needed: p must be in (0, 1), got {p}")
    if n_paths == 1:
        return 1
    target = Fraction(1) - Fraction(p).limit_denominator(10**12)
    # P_miss decreases with k; the union bound N(1-1/N)^k <= 1-p gives an upper end.
    hi = max(n_paths, math.ceil(math.log((1 - p) / n_paths) / math.log(1 - 1 / n_paths)) + 1)
    lo = n_paths - 1  # fewer than N tuples always miss a path
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _p_miss_exact(n_paths, mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi
