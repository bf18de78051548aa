"""nccl-tests pair tables (``hostA,hostB  busbw``) and voting over hosts.

Two-node ``all_reduce_perf`` runs over many host pairs localise a slow host the way
binary tomography localises a link (Hostping Algorithm 1, R-Pingmesh §5 votes):
a pair is *slow* when its bus bandwidth is more than ``ABNORMAL_TH`` (20 %) below the
best pair; hosts of fast pairs are normal; a slow pair with exactly one host not
cleared votes for that host; a slow pair whose hosts are both uncleared and
unexplained stays ``undetermined`` (more pairings are needed: never guess).
A ``# crossing ToR`` note marks inter-ToR pairs: if crossing pairs are both fast and
slow, crossing does not predict slowness and no switch link is blamed (field case 5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from producers.hostping.findings import Finding

NAME = "nccl_pairs"
READS = "nccl-tests pair tables (hostA,hostB busbw [# note]) from 2-node all_reduce_perf runs"
ABNORMAL_TH = 0.20
_PAIR = re.compile(
    r"^\s*(?P<a>[A-Za-z][\w.-]*)\s*(?:,|<->)\s*(?P<b>[A-Za-z][\w.-]*)\s+(?P<bw>\d+(?:\.\d+)?)\s*(?:#\s*(?P<note>.*))?$"
)


@dataclass(frozen=True)
class PairResult:
    """One 2-host run: bus bandwidth in GB/s, and whether the pair crosses ToRs (from its note)."""

    a: str
    b: str
    busbw_gbs: float
    crosses_tor: bool
    line: int


def parse(text: str) -> list[PairResult]:
    """Pair lines ``a,b  busbw  [# note]``; other lines are ignored."""
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        m = _PAIR.match(line)
        if m:
            note = (m["note"] or "").lower()
            out.append(PairResult(m["a"], m["b"], float(m["bw"]), "cross" in note and "tor" in note, n))
    return out


def vote(pairs: list[PairResult], abnormal_th: float = ABNORMAL_TH) -> list[Finding]:
    """Localise slow hosts from pair results.

    Returns:
        ``slow_host`` per host voted by slow pairs whose partner is fast elsewhere;
        ``undetermined`` per slow pair that no vote explains; ``switch`` only when every
        ToR-crossing pair is slow and every other pair is fast.
    """
    if len(pairs) < 2:
        return []
    best = max(p.busbw_gbs for p in pairs)
    floor = (1 - abnormal_th) * best
    slow = [p for p in pairs if p.busbw_gbs < floor]
    fast = [p for p in pairs if p.busbw_gbs >= floor]
    cleared = {h for p in fast for h in (p.a, p.b)}
    crossing = [p for p in pairs if p.crosses_tor]
    tor_ev = {
        "crossing_pairs": len(crossing),
        "crossing_slow": sum(p in slow for p in crossing),
        "crossing_predicts_slowness": bool(crossing)
        and all(p in slow for p in crossing)
        and all(p in fast for p in pairs if not p.crosses_tor),
    }
    out: list[Finding] = []
    if tor_ev["crossing_predicts_slowness"]:
        out.append(
            Finding(
                "switch",
                "inter-ToR path",
                "error",
                "Every ToR-crossing pair is slow and every same-ToR pair is fast: suspect the inter-ToR links.",
                dict(tor_ev, best_busbw=best),
                "failure",
                str(crossing[0].line),
            )
        )
        return out
    votes: dict[str, list[PairResult]] = {}
    for p in slow:
        open_ = [h for h in (p.a, p.b) if h not in cleared]
        if len(open_) == 1:
            votes.setdefault(open_[0], []).append(p)
    for host, ps in sorted(votes.items(), key=lambda kv: -len(kv[1])):
        partners = [p.b if p.a == host else p.a for p in ps]
        out.append(
            Finding(
                "slow_host",
                host,
                "error",
                f"{host} is in {len(ps)} slow pair(s) ({', '.join(f'{p.busbw_gbs:g}' for p in ps)} GB/s vs best "
                f"{best:g} GB/s) whose partners ({', '.join(partners)}) are fast in other pairs. "
                + ("Crossing the ToR does not predict slowness, so no switch link is blamed. " if crossing else "")
                + "Run Hostping loopback tests on it (intra-host links, PCIe, ACS).",
                {
                    "votes": len(ps),
                    "slow_pairs": [[p.a, p.b, p.busbw_gbs] for p in ps],
                    "best_busbw": best,
                    "threshold_busbw": round(floor, 2),
                    **tor_ev,
                },
                "failure",
                str(ps[0].line),
            )
        )
    for p in slow:
        if p.a in votes or p.b in votes:
            continue
        both_fast = p.a in cleared and p.b in cleared
        out.append(
            Finding(
                "undetermined",
                f"{p.a},{p.b}",
                "warning",
                f"Pair {p.a},{p.b} is slow ({p.busbw_gbs:g} GB/s) but "
                + (
                    "both hosts are fast with others: the path between them is the common element."
                    if both_fast
                    else "neither host appears in another pair: undetermined, pair each with a known-good host."
                ),
                {"busbw": p.busbw_gbs, "best_busbw": best, "both_hosts_fast_elsewhere": both_fast, **tor_ev},
                "",
                str(p.line),
            )
        )
    return out


def findings(pairs: list[PairResult]) -> list[Finding]:
    """Alias of :func:`vote` with the default threshold, for :mod:`diagnose.run`."""
    return vote(pairs)


def detect(text: str) -> bool:
    """True when the text holds at least two pair lines."""
    return len(parse(text)) >= 2
