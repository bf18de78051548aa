"""Links a claim may hide: the other switch links its failing probes crossed, for the loop to verify.

Once the vote names a link, every failing probe through it is its: a second fault whose failures all fell
on probes through the named link is explained away. A partial 5-tuple loss is the usual one, as it
fails only the few tuples its hash selects, and those may all cross the named link (simulator seed
27764, scenario 296: the one tuple a partial loss on ``A->S1`` selected went out over ``B->S2``, itself
partially lossy and named; seed 20413, scenario 287: two partial losses on one ToR's uplinks, the
probes of one coming back over the other). The analyzer names those links in the claim's evidence
(``verify_links``); the controller's closed loop probes each with 5-tuples that keep off the named link
(:meth:`producers.controller_loop.SplitLoop.on_requests`), so a fault there fails probes no named link
explains, and the next window names it.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pyarrow as pa

from streams.pingmesh.links import LINK_SEP, NO_ANSWER, ProbeLinkCodes, probe_link_codes

VERIFY_LINKS = 8
"""Links named per claim, the ones its failing probes crossed most (the loop's probes per claim are
bounded by this times its tuples per link)."""


def co_crossed(failing: pa.Table, claims: Collection[str], exclude: Collection[str] = (),
               k: int = VERIFY_LINKS) -> dict[str, list[str]]:
    """For each claimed link, the ``k`` switch links its failing probes crossed most.

    Args:
        failing: failing probe groups (``fwd_hops``, ``rev_hops``, ``n``), as the vote took them.
        claims: links named faulty (``lower->upper``).
        exclude: links never returned (every claim and every link of a tie: they are probed already).
        k: links per claim.

    Returns:
        claim → links, most failing probes first (ties by name); access links (an RNIC's own probes
        judge those) and the pseudo-links of traces that stopped are left out. A claim no failing group
        crossed maps to ``[]``.
    """
    out: dict[str, list[str]] = {c: [] for c in claims}
    if not out or failing.num_rows == 0:
        return out
    names, totals, pl = _failures_beside(failing, out)
    # switch links only: an access link is its RNIC's (the RNIC rule judges it), a pseudo-link no link
    usable = np.array([not x.endswith(LINK_SEP + NO_ANSWER) for x in names], dtype=bool)
    usable[np.unique(pl.link[pl.access.is_valid().to_numpy(zero_copy_only=False)])] = False
    skip = set(claims) | set(exclude)
    usable[[i for i, x in enumerate(names) if x in skip]] = False
    for c, t in totals.items():
        ranked = sorted((-x, names[i]) for i, x in enumerate(t) if x > 0 and usable[i])  # most failures, then name
        out[c] = [x for _, x in ranked[:k]]
    return out


def _failures_beside(failing: pa.Table, claims: Collection[str]) -> tuple[list[str], dict[str, np.ndarray],
                                                                         ProbeLinkCodes]:
    """The failing groups' link names, and for each claim they crossed: failing probes per link (by name
    index) over the groups through the claim; with the groups' link codes."""
    pl = probe_link_codes(failing["fwd_hops"], failing["rev_hops"])
    names = pl.names.to_pylist()
    code = {x: i for i, x in enumerate(names)}
    n = failing["n"].to_numpy().astype(np.float64)
    totals = {}
    for c in claims:
        if c in code:
            on = np.zeros(failing.num_rows, dtype=bool)
            on[pl.row[pl.link == code[c]]] = True
            sel = on[pl.row]
            totals[c] = np.bincount(pl.link[sel], weights=n[pl.row[sel]], minlength=len(names))
    return names, totals, pl


def claims_crossed(failing: pa.Table, claims: Collection[str]) -> dict[str, list[str]]:
    """For each claimed link, the other claims its failing probes also crossed, most failures first.

    A lossy link beside a dead one: most of its failing probes cross the dead link too, which explains
    them, so the lossy link may be left a few votes short in the next window (simulator seed 15665,
    scenario 280, window 2: 8 left). The loop then probes the claim itself off the other claims
    (``verify_self`` in the claim's evidence, :meth:`producers.controller_loop.SplitLoop.on_requests`), so
    its own loss fails probes that no other claim explains.

    Args:
        failing: failing probe groups (``fwd_hops``, ``rev_hops``, ``n``), as the vote took them.
        claims: links named faulty (``lower->upper``).

    Returns:
        claim → the other claims, by failing probes shared (ties by name); a claim sharing none maps to ``[]``.
    """
    out: dict[str, list[str]] = {c: [] for c in claims}
    if len(out) < 2 or failing.num_rows == 0:
        return out
    names, totals, _ = _failures_beside(failing, out)
    at = {x: i for i, x in enumerate(names)}
    for c, t in totals.items():
        out[c] = [o for _, o in sorted((-t[at[o]], o) for o in out if o != c and o in at and t[at[o]] > 0)]
    return out


FAILING_PATHS = 6
"""Failing probe groups listed per claim or tie in its evidence (``failing_paths``)."""


def failing_paths(failing: pa.Table, links: Collection[str], k: int = FAILING_PATHS) -> dict[str, list[dict]]:
    """For each link, the ``k`` failing probe groups through it with the most failures: what an operator
    reads to see which flows a verdict stands on, and what a wrong claim's post-mortem needs (the traced
    paths live on the bus, not in the store).

    Args:
        failing: failing probe groups (``fwd_hops``, ``rev_hops``, ``n``), as the vote took them.
        links: links named in verdicts (``lower->upper``). A trace that stopped after X is listed under
            ``X->*`` only, not under each link it may have crossed next.
        k: groups per link.

    Returns:
        link → ``[{"fwd": hops, "rev": hops, "failed": n}]``, most failures first (ties by path); a link no
        failing group crossed maps to ``[]``.
    """
    out: dict[str, list[dict]] = {lk: [] for lk in links}
    if not out or failing.num_rows == 0:
        return out
    pl = probe_link_codes(failing["fwd_hops"], failing["rev_hops"])
    code = {x: i for i, x in enumerate(pl.names.to_pylist())}
    n = failing["n"].to_numpy()
    for lk in out:
        if lk not in code:
            continue
        rows = np.unique(pl.row[pl.link == code[lk]])
        # only the groups that can make the top k reach Python (a busy window has thousands)
        rows = rows[n[rows] >= np.sort(n[rows])[-min(k, len(rows))]]
        fwd = failing["fwd_hops"].take(rows).to_pylist()
        rev = failing["rev_hops"].take(rows).to_pylist()
        ranked = sorted(zip(n[rows].tolist(), fwd, rev, strict=True), key=lambda x: (-x[0], x[1] or "", x[2] or ""))
        out[lk] = [{"fwd": f or "", "rev": r or "", "failed": int(c)} for c, f, r in ranked[:k]]
    return out
