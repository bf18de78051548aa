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
import pyarrow.compute as pc

from streams.pingmesh.links import LINK_SEP, NO_ANSWER, probe_links

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
    pl = probe_links(failing["fwd_hops"], failing["rev_hops"])
    links = pl["link"].cast(pa.string())
    switch = pc.and_(pc.is_null(pl["access_rnic"]), pc.invert(pc.ends_with(links, LINK_SEP + NO_ANSWER)))
    pl = pl.filter(switch)
    rows = pl["row"].to_numpy()
    names = np.array(pl["link"].to_pylist(), dtype=object)
    n = failing["n"].to_numpy().astype(np.float64)
    skip = set(claims) | set(exclude)
    for c in out:
        on = np.unique(rows[names == c])
        if len(on) == 0:
            continue
        sel = np.isin(rows, on)
        totals: dict[str, float] = {}
        for lk, r in zip(names[sel].tolist(), rows[sel].tolist(), strict=True):
            if lk not in skip:
                totals[lk] = totals.get(lk, 0.0) + float(n[r])
        out[c] = [lk for lk, _ in sorted(totals.items(), key=lambda x: (-x[1], x[0]))[:k]]
    return out
