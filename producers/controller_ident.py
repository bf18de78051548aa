"""Identifiability of a probe plan, and inter-ToR 5-tuples that make every switch link identifiable.

Binary tomography can name a faulty link only when no other link is crossed by exactly the same
probes: two links whose sets of covering 5-tuples are equal fail and pass together, and any vote
over them ends in a tie (R-Pingmesh §4.3 names the most-voted link; with a tie it cannot). Eq. 1
(:func:`schemas.eq1.tuples_needed`) sizes the inter-ToR pinglist for *coverage* of the ECMP paths;
deTector (Peng et al., ATC '17) and NetBouncer (Tan et al., NSDI '19) choose probes so that single
(and double) link failures are *identifiable*: every link has a distinct set of covering probes.

This module measures that property of a plan and adds the 5-tuples that restore it:

* :func:`identifiability`: the switch links no probe covers, the groups of links with the same
  covering probes (ambiguous for a single fault), and, when asked, the two-link faults that are
  indistinguishable from another fault of one or two links.
* :func:`structural_groups`: the finest grouping *any* set of RNIC-to-RNIC probes can reach on the
  fabric: links that every up-down ToR-to-ToR path crosses together (on a three-tier Clos of two
  pods, the two links of a core, one per pod). No 5-tuple separates them; naming one needs probes
  that turn at the core (TTL-limited or bounced probes), which only the simulator's agents send.
* :func:`make_identifiable`: extra inter-ToR 5-tuples, chosen against the ECMP paths the tracer sees
  (``paths_of``: entry → links its forward and ACK paths cross), that split every splittable group
  and cover every uncovered link, within a budget of extra tuples (25 % of the plan's by default);
  when asked, :func:`standing_bounces` for the structural groups.
* :func:`bounce_entries`: bounced probes up to a link's upper end and back (NetBouncer's packet
  bouncing), for the closed loop and the standing ones.
* :func:`split_entries`: the few 5-tuples that split one given group (the closed loop's answer to an
  ``undetermined`` verdict over that group, :mod:`producers.controller_loop`).

Signatures are Python ints used as bitsets over the plan's entries (bit ``i``: entry ``i`` crosses
the link), so equal signatures are equal sets exactly, and two-link unions are one ``|``.
"""

from __future__ import annotations

import random
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from producers import controller as ctl
from schemas.inventory import Inventory

PathsOf = Callable[[list[dict]], list[frozenset[str]]]
"""Entries → per entry, the switch links (``lower->upper``) its forward and ACK paths cross.

In the simulator this is the ECMP model (:func:`producers.sim.plan.entry_links`); on a cluster it is
the tracer's traced paths of the candidate 5-tuples."""

EXTRA_BUDGET = 0.25
"""Extra inter-ToR tuples :func:`make_identifiable` may add, as a share of the plan's (issue 29: at
most 25 % more probes than Eq. 1's plan; every added tuple runs at its ToR's Eq. 1 tuple rate)."""
TWO_LINK_MAX_LINKS = 400
"""Two-link identifiability is counted over all link pairs (O(L²)); above this many links it is skipped."""


def switch_links(inv: Inventory) -> list[str]:
    """The fabric's switch links as the vote names them (``lower->upper``), sorted."""
    return sorted(f"{ln.a}{'->'}{ln.b}" for ln in inv.links)


@dataclass(frozen=True)
class IdentReport:
    """What a plan can name, for single (and two-link) faults on the switch links.

    Attributes:
        links: switch links of the fabric (``lower->upper``).
        entries: probe entries (5-tuples) the report was built from.
        uncovered: links no entry crosses.
        groups: sets of two or more links with the same (non-empty) covering entries, each sorted.
        structural: the groups that no RNIC-to-RNIC 5-tuple can split (subsets of
            :func:`structural_groups`); the rest could be split by more 5-tuples.
        two_link_ambiguous: two-link faults whose failing probes equal those of another fault of one
            or two links (None: not computed, or over :data:`TWO_LINK_MAX_LINKS` links).
    """

    links: tuple[str, ...]
    entries: int
    uncovered: tuple[str, ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()
    structural: tuple[tuple[str, ...], ...] = ()
    two_link_ambiguous: int | None = None

    @property
    def identifiable(self) -> tuple[str, ...]:
        """Links covered and alone in their group: a single fault on each is named."""
        bad = set(self.uncovered) | {lk for g in self.groups for lk in g}
        return tuple(lk for lk in self.links if lk not in bad)

    @property
    def all_identifiable(self) -> bool:
        """True when every switch link is identifiable for a single fault."""
        return not self.uncovered and not self.groups

    @property
    def splittable(self) -> tuple[tuple[str, ...], ...]:
        """Ambiguous groups that more 5-tuples could split."""
        s = set(self.structural)
        return tuple(g for g in self.groups if g not in s)

    def summary(self) -> str:
        """One line: ``24 switch links: 20 identifiable, 0 uncovered, 2 ambiguous groups (2 structural)``."""
        return (f"{len(self.links)} switch links over {self.entries} probed 5-tuples: "
                f"{len(self.identifiable)} identifiable, {len(self.uncovered)} uncovered, "
                f"{len(self.groups)} ambiguous groups ({len(self.structural)} no 5-tuple can split)"
                + ("" if self.two_link_ambiguous is None else
                   f", {self.two_link_ambiguous} ambiguous two-link faults"))


def _signatures(links: Iterable[str], link_sets: Sequence[Iterable[str]]) -> dict[str, int]:
    sig = dict.fromkeys(links, 0)
    for i, s in enumerate(link_sets):
        bit = 1 << i
        for lk in s:
            if lk in sig:
                sig[lk] |= bit
    return sig


def _groups(sig: dict[str, int]) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    by: dict[int, list[str]] = defaultdict(list)
    for lk, s in sig.items():
        by[s].append(lk)
    uncovered = tuple(sorted(by.get(0, [])))
    groups = tuple(sorted(tuple(sorted(v)) for s, v in by.items() if s and len(v) > 1))
    return uncovered, groups


def identifiability(inv: Inventory, link_sets: Sequence[Iterable[str]], *, two_link: bool = False) -> IdentReport:
    """Measure the identifiability of a plan over the fabric's switch links.

    Args:
        inv: the fabric.
        link_sets: one entry per probed 5-tuple: the switch links its forward and ACK paths cross
            (``lower->upper``; other names, e.g. access links, are ignored).
        two_link: also count the two-link faults indistinguishable from another fault of one or two
            links (skipped above :data:`TWO_LINK_MAX_LINKS` links).

    Returns:
        :class:`IdentReport`; ``structural`` marks the groups :func:`structural_groups` says no
        5-tuple can split.
    """
    links = switch_links(inv)
    sig = _signatures(links, link_sets)
    uncovered, groups = _groups(sig)
    struct = {frozenset(g) for g in structural_groups(inv)} if groups else set()
    structural = tuple(g for g in groups if any(set(g) <= s for s in struct))
    pairs = None
    if two_link and len(links) <= TWO_LINK_MAX_LINKS:
        seen: dict[int, int] = defaultdict(int)
        for lk in links:
            seen[sig[lk]] += 1
        pair_sigs = [sig[a] | sig[b] for i, a in enumerate(links) for b in links[i + 1:]]
        for s in pair_sigs:
            seen[s] += 1
        pairs = sum(1 for s in pair_sigs if seen[s] > 1)
    return IdentReport(tuple(links), len(link_sets), uncovered, groups, structural, pairs)


def _below(inv: Inventory) -> dict[str, set[str]]:
    """Switch → the ToRs under it (a ToR: itself); links are ``a`` (lower) to ``b`` (upper)."""
    up: dict[str, list[str]] = defaultdict(list)
    for ln in inv.links:
        up[ln.a].append(ln.b)
    out: dict[str, set[str]] = defaultdict(set)
    for t in inv.tors:
        q, seen = deque([t]), {t}
        while q:
            u = q.popleft()
            out[u].add(t)
            for v in up.get(u, []):
                if v not in seen:
                    seen.add(v)
                    q.append(v)
    return out


def _tor_paths(inv: Inventory) -> Iterable[list[str]]:
    """Every shortest ToR-to-ToR path (never transiting a third ToR), as its links ``lower->upper``."""
    adj: dict[str, list[str]] = defaultdict(list)
    name: dict[tuple[str, str], str] = {}
    for ln in inv.links:
        adj[ln.a].append(ln.b)
        adj[ln.b].append(ln.a)
        name[ln.a, ln.b] = name[ln.b, ln.a] = f"{ln.a}->{ln.b}"
    tors = list(inv.tors)
    for dst in tors:
        dist = {dst: 0}
        q = deque([dst])
        while q:
            u = q.popleft()
            for v in adj[u]:
                if v not in dist:
                    dist[v] = dist[u] + 1
                    if v not in inv.tors:  # paths never transit another ToR
                        q.append(v)
        for src in tors:
            if src == dst or src not in dist:
                continue
            stack = [(src, [])]
            while stack:
                u, acc = stack.pop()
                if u == dst:
                    yield acc
                    continue
                for v in adj[u]:
                    if dist.get(v, -1) == dist[u] - 1 and (v not in inv.tors or v == dst):
                        stack.append((v, [*acc, name[u, v]]))


def structural_groups(inv: Inventory) -> list[tuple[str, ...]]:
    """Groups of two or more switch links that every shortest ToR-to-ToR path crosses together.

    A probe's links are the union of two such paths (probe and ACK); a union splits no group that
    neither path splits, so these groups are the finest any RNIC-to-RNIC probe plan reaches. On a
    two-tier Clos there are none; on a three-tier Clos of two pods, each core's two links.
    Cost: one pass over all ToR pairs' ECMP paths (N per pair).
    """
    links = switch_links(inv)
    sig = _signatures(links, list(_tor_paths(inv)))
    return list(_groups(sig)[1])


@dataclass
class _Refiner:
    """The partition of links by covering entries, refined as entries are added."""

    links: list[str]
    sig: dict[str, int] = field(default_factory=dict)
    n: int = 0

    def add(self, s: Iterable[str]) -> None:
        bit = 1 << self.n
        self.n += 1
        for lk in s:
            if lk in self.sig:
                self.sig[lk] |= bit

    def classes(self) -> tuple[dict[str, int], dict[int, int]]:
        """link → class id, class id → size (class 0: uncovered)."""
        ids: dict[int, int] = {0: 0}
        cls = {lk: ids.setdefault(s, len(ids)) for lk, s in self.sig.items()}
        size: dict[int, int] = defaultdict(int)
        for c in cls.values():
            size[c] += 1
        return cls, size

    def gain(self, s: frozenset[str], cls: dict[str, int], size: dict[int, int], skip: set[int]) -> int:
        """Classes ``s`` splits plus uncovered links it covers (the ambiguity it removes)."""
        hit: dict[int, int] = defaultdict(int)
        for lk in s:
            c = cls.get(lk)
            if c is not None:
                hit[c] += 1
        g = hit.get(0, 0)
        return g + sum(1 for c, k in hit.items() if c and c not in skip and k < size[c])


def _candidates(inv: Inventory, reg: ctl.Registry, group: Sequence[str], rng: random.Random, n: int,
                below: dict[str, set[str]], rates: dict[str, float], pinglist: str = "inter_tor",
                avoid: frozenset[str] = frozenset()) -> list[dict]:
    """``n`` random 5-tuples whose paths can cross a link of ``group``: one end under the link's lower
    switch, the other end outside it (in both directions, so forward and ACK paths both try); no end at
    an RNIC of ``avoid`` (those whose access links are in the group: a tuple from one crosses it too)."""
    tors = [t for t in inv.tors if inv.rnics_under_tor(t)]
    out = []
    for j in range(n):
        lower = group[j % len(group)].split("->")[0]
        near = sorted(t for t in below.get(lower, ()) if inv.rnics_under_tor(t))
        far = [t for t in tors if t not in below.get(lower, ())] or [t for t in tors if t not in near[:1]]
        if not near or not far:
            continue
        a, b = rng.choice(near), rng.choice(far)
        if rng.random() < 0.5:
            a, b = b, a
        ra = [r for r in inv.rnics_under_tor(a) if r not in avoid]
        rb = [r for r in inv.rnics_under_tor(b) if r not in avoid]
        if not ra or not rb:
            continue
        src = rng.choice(ra)
        dst = rng.choice(rb)
        out.append(ctl.pinglist_entry(pinglist, inv, reg, src, dst, rng.randrange(1 << 20),
                                      rates.get(a, 2.0 * ctl.INTER_TOR_LINK_PPS), ctl.DEFAULT_TC))
    return out


def _tor_rates(inv: Inventory, entries: Sequence[dict]) -> dict[str, float]:
    """ToR → rate of its Eq. 1 inter-ToR tuples (an added tuple runs at the same rate)."""
    out: dict[str, float] = {}
    for e in entries:
        if e["pinglist"] == "inter_tor":
            out.setdefault(inv.rnics[e["prober_rnic"]].tor, float(e["rate_pps"]))
    return out


BOUNCE_PPS = 10.0
"""Least rate of one link's bounced probes (probes/s): 200 crossings of its link per 20 s window, the rate
R-Pingmesh asks of every link above the ToR (§4: more than 10 probes/s each way). :class:`SplitLoop` bounces
at the group's rate shared by its members (``group_pps / members``) when that is more."""


BOUNCE_TUPLES = 8
"""Bounced 5-tuples per link (source ports differ): a loss that hits only some 5-tuples through the link
(selecting a share ``f`` of them by hash) misses all eight with probability ``(1 - f)^8``: 1.7 % at
f = 0.4, 17 % at f = 0.2."""

def bounce_entries(inv: Inventory, reg: ctl.Registry, group: Sequence[str], *, pps: float = BOUNCE_PPS,
                   seed: int = 0, per_link: int = BOUNCE_TUPLES, generation: int = 0,
                   avoid: frozenset[str] = frozenset(), avoid_links: frozenset[str] = frozenset(),
                   others: frozenset[str] = frozenset()) -> list[dict]:
    """``per_link`` bounced probes per link ``a->b`` of ``group``: from an RNIC under ``a`` up to ``b`` and
    back, each at ``pps / per_link`` probes/s (the link sees ``pps`` bounced probes/s in all).

    Each entry is an ``inter_tor`` entry whose prober and responder are the same RNIC, with
    ``bounce_path`` = the switches from its ToR up to ``b`` through ``a`` (comma-separated), e.g.
    ``"T1,P0S1,X2"``; its forward path crosses exactly the links of that climb (both ways). Flow labels
    are drawn from ``(seed, generation, link, j)``: a new ``generation`` gives new source ports (the
    loop's answer when a group stays undetermined with its probes in force). RNICs of ``avoid`` (judged down
    or busy) bounce nothing while their ToR has others; a climb keeps off the links of ``avoid_links`` (named
    faulty: a bounce through one fails there and says nothing of the member), and then off the group's other
    members and the links of ``others`` (the rest of a tie whose other links are split otherwise), while another
    ToR is below.

    Raises:
        ValueError: a link is not a switch link of ``inv``, or no ToR with RNICs is under its lower end.
    """
    known, members = set(switch_links(inv)), set(group) | others
    up: dict[str, list[str]] = {}
    for ln in inv.links:
        up.setdefault(ln.b, []).append(ln.a)  # upper -> lower ends
    out = []
    for k, lk in enumerate(sorted(group)):
        if lk not in known:
            raise ValueError(f"bounce_entries: {lk!r} is not a switch link of {inv.name}")
        lower, upper = lk.split("->")
        climb = [lower]
        while climb[0] not in inv.tors:  # down to a ToR with RNICs, first in name order
            below = sorted(x for x in up.get(climb[0], []) if x in inv.tors and inv.rnics_under_tor(x)) or \
                sorted(up.get(climb[0], []))
            kept = [x for x in below if f"{x}->{climb[0]}" not in avoid_links] or below
            # nor through another member: a climb that crosses two of the group's links splits neither from the
            # other (a partial loss on P1S2->X4 stayed tied with T8->P1S2 while its bounces climbed from T8)
            below = [x for x in kept if f"{x}->{climb[0]}" not in members] or kept
            if not below:
                raise ValueError(f"bounce_entries: no ToR under {lower} to bounce {lk} from")
            climb.insert(0, below[(seed + k) % len(below)])
        rnics = [r for r in inv.rnics_under_tor(climb[0]) if r not in avoid] or inv.rnics_under_tor(climb[0])
        if not rnics:
            raise ValueError(f"bounce_entries: ToR {climb[0]} under {lower} has no RNIC")
        for j in range(per_link):
            r = rnics[(seed + k + j) % len(rnics)]
            fl = random.Random(f"bounce/{seed}/{generation}/{lk}/{j}").randrange(1 << 20)
            e = ctl.pinglist_entry("inter_tor", inv, reg, r, r, fl, pps / per_link, ctl.DEFAULT_TC)
            e["bounce_path"] = ",".join([*climb, upper])
            out.append(e)
    return out


def standing_bounces(inv: Inventory, reg: ctl.Registry, *, seed: int = 0) -> list[dict]:
    """Bounced probes that stay in the plan for every link of the fabric's structural groups
    (:func:`structural_groups`): :data:`BOUNCE_TUPLES` per link at :data:`BOUNCE_PPS` per link in all
    (:func:`bounce_entries`). Empty on a fabric without such groups.

    What NetBouncer (NSDI '19) does for every link, here only where no RNIC-to-RNIC probe can split: on the
    three-tier fabric of two pods, each core's two links, 8 links and 80 probes/s. Only for agents that send
    bounced probes (the simulator's; the udp and verbs agents refuse them).
    """
    groups = structural_groups(inv)
    return [e for g in groups for e in bounce_entries(inv, reg, g, seed=seed)]


@dataclass(frozen=True)
class Augmented:
    """Result of :func:`make_identifiable`: the added entries and the reports before and after."""

    extra: list[dict]
    before: IdentReport
    after: IdentReport
    base_entries: int
    #: standing bounced probes (:func:`standing_bounces`) when asked for; their rate is reported apart
    bounced: list[dict] = field(default_factory=list)

    @property
    def extra_share(self) -> float:
        """Added inter-ToR tuples over the plan's inter-ToR tuples."""
        return len(self.extra) / max(self.base_entries, 1)


def make_identifiable(inv: Inventory, reg: ctl.Registry, entries: list[dict], paths_of: PathsOf, *,
                      seed: int, budget: float = EXTRA_BUDGET, tries: int = 48, bounce: bool = False) -> Augmented:
    """Extra inter-ToR 5-tuples that make every splittable switch link identifiable for a single fault.

    Greedy, as deTector's probe selection: while a group of links shares its covering probes (or a
    link is uncovered), draw ``tries`` random 5-tuples with one end under one of the group's links
    (:func:`_candidates`), route them with ``paths_of`` and keep the one that splits the most groups
    and covers the most uncovered links anywhere. Groups no 5-tuple can split
    (:func:`structural_groups`) are left and reported.

    Args:
        inv, reg: the fabric and its registry (QPNs for the new entries).
        entries: the plan in force (all pinglists: ToR-mesh and service probes cross switch links too).
        paths_of: the links each entry's forward and ACK paths cross.
        seed: seeds the candidate draw (the result is a pure function of its inputs).
        budget: most extra tuples, as a share of ``entries``' inter-ToR tuples.
        tries: candidates drawn per group per step.
        bounce: also keep :func:`standing_bounces` for the structural groups (agents that send bounced
            probes only): ``bounced``, and ``after`` counts them.

    Returns:
        :class:`Augmented`; ``extra`` are ``inter_tor`` entries at their prober ToR's Eq. 1 rate.

    Raises:
        ValueError: ``budget`` is negative.
    """
    if budget < 0:
        raise ValueError(f"make_identifiable: budget must be >= 0, got {budget}")
    base = [e for e in entries if e["pinglist"] == "inter_tor"]
    sets = paths_of(entries) if entries else []
    before = identifiability(inv, sets)
    links = list(before.links)
    ref = _Refiner(links, dict.fromkeys(links, 0))
    for s in sets:
        ref.add(s)
    struct = {lk: i + 1 for i, g in enumerate(before.structural) for lk in g}
    below = _below(inv)
    rates = _tor_rates(inv, entries)
    rng = random.Random(f"ident/{seed}")
    cap = int(budget * len(base))
    extra: list[dict] = []
    stuck: set[frozenset[str]] = set()  # classes (by their links: ids change as the partition refines)
    while len(extra) < cap:
        cls, size = ref.classes()
        # a class is open when it is uncovered (0) or has several links and is not a structural group
        members: dict[int, list[str]] = defaultdict(list)
        for lk, c in cls.items():
            members[c].append(lk)
        struct_cls = {c for c, m in members.items() if c and m and all(lk in struct for lk in m)
                      and len({struct[lk] for lk in m}) == 1}
        open_ = sorted((c for c, m in members.items() if (c == 0 or len(m) > 1) and c not in struct_cls
                        and frozenset(members[c]) not in stuck), key=lambda c: sorted(members[c])[0])
        if not open_:
            break
        c = open_[0]
        cands = _candidates(inv, reg, sorted(members[c]), rng, tries, below, rates)
        best, best_gain, best_set = None, 0, frozenset()
        for e, s in zip(cands, paths_of(cands) if cands else [], strict=True):
            g = ref.gain(s, cls, size, struct_cls)
            if g > best_gain:
                best, best_gain, best_set = e, g, s
        if best is None:
            stuck.add(frozenset(members[c]))  # nothing drawn helps it: try the others, report it if it stays
            continue
        extra.append(best)
        ref.add(best_set)
    bounced = standing_bounces(inv, reg, seed=seed) if bounce else []
    added = [*extra, *bounced]
    after = identifiability(inv, [*sets, *paths_of(added)] if added else sets)
    return Augmented(extra, before, after, len(base), bounced)


def split_entries(inv: Inventory, reg: ctl.Registry, group: Sequence[str], paths_of: PathsOf, *,
                  seed: int, max_tuples: int = 4, per_member: int = 1, tries: int = 64,
                  rates: dict[str, float] | None = None, pinglist: str = "inter_tor",
                  avoid: frozenset[str] = frozenset(), avoid_links: frozenset[str] = frozenset()) -> list[dict]:
    """At most ``max_tuples`` 5-tuples whose paths split ``group`` (cross some of its links, not all), none
    crossing a link of ``avoid_links`` (the closed loop's links named faulty: a tuple through one fails
    there, and the vote gives its failures to that link, so it splits nothing).

    The closed loop's probes for an ``undetermined`` verdict over ``group``: after them, a fault on one
    link of the group fails probes that the others' do not. Chosen greedily until every link of the
    group has its own set of the chosen tuples (or the cap); then, within the cap, more until each link
    is crossed by ``per_member`` of them that do not cross the whole group: a partial 5-tuple loss
    spares some of the tuples through its link, and one tuple of its own would often be spared. Empty
    when no drawn 5-tuple splits the group (e.g. a structural group, :func:`structural_groups`).

    Raises:
        ValueError: ``group`` has fewer than two links or names a link the fabric lacks.
    """
    known = set(switch_links(inv))
    bad = [lk for lk in group if lk not in known]
    if len(group) < 2 or bad:
        raise ValueError(f"split_entries: need two or more switch links of the fabric; got {list(group)}"
                         + (f" (unknown: {', '.join(bad)})" if bad else ""))
    members = sorted(group)
    rng = random.Random(f"split/{seed}/{'|'.join(members)}")
    cands = _candidates(inv, reg, members, rng, tries, _below(inv), rates or {}, pinglist, avoid)
    cands = _clear_of(cands, paths_of, avoid_links - set(members))
    sets = [s & set(members) for s in (paths_of(cands) if cands else [])]
    ref = _Refiner(members, dict.fromkeys(members, 0))
    out: list[dict] = []
    picked: list[int] = []
    while len(out) < max_tuples:
        cls, size = ref.classes()
        if len(set(cls.values())) == len(members) and 0 not in cls.values():
            break
        scored = [(ref.gain(frozenset(s), cls, size, set()), i) for i, s in enumerate(sets)]
        g, i = max(scored, default=(0, -1))
        if g <= 0:
            break
        out.append(cands[i])
        picked.append(i)
        ref.add(sets[i])
    splitting = [i for i, s in enumerate(sets) if 0 < len(s) < len(members)]
    splits = set(splitting)
    if not any(i in splits for i in picked):
        return []
    own = {m: sum(1 for i in picked if m in sets[i] and i in splits) for m in members}
    short = [m for m in members if own[m] < per_member]
    while short and len(out) < max_tuples:
        m = min(short, key=lambda lk: (own[lk], lk))
        i = next((i for i in splitting if i not in picked and m in sets[i]), None)
        if i is None:
            short.remove(m)  # no more drawn tuples cross this member without the whole group
            continue
        out.append(cands[i])
        picked.append(i)
        for lk in sets[i]:
            own[lk] += 1
        short = [lk for lk in short if own[lk] < per_member]
    return out


def _clear_of(cands: list[dict], paths_of: PathsOf, links: frozenset[str] | set[str]) -> list[dict]:
    """The candidates whose paths cross no link of ``links``."""
    if not cands or not links:
        return cands
    return [e for e, s in zip(cands, paths_of(cands), strict=True) if not s & links]


def crossing_entries(inv: Inventory, reg: ctl.Registry, link: str, paths_of: PathsOf, *, seed: int,
                     avoid: frozenset[str], max_tuples: int = 8, tries: int = 64,
                     rates: dict[str, float] | None = None, pinglist: str = "inter_tor",
                     avoid_links: frozenset[str] = frozenset()) -> list[dict]:
    """At most ``max_tuples`` 5-tuples whose paths cross the switch ``link``, none with an end at an RNIC
    of ``avoid`` nor crossing a link of ``avoid_links`` (links named faulty, as for :func:`split_entries`).

    The closed loop's probes for a tie between one switch link and the access links of ``avoid``'s RNICs
    (the failing tuples all had such an RNIC at one end, so their paths crossed both): these cross the
    switch link and none of the access links, so a fault on the switch link fails probes that the access
    links do not carry. Several, because a partial 5-tuple loss spares most tuples through its link.

    Raises:
        ValueError: ``link`` is not a switch link of ``inv``.
    """
    if link not in set(switch_links(inv)):
        raise ValueError(f"crossing_entries: {link!r} is not a switch link of {inv.name}")
    rng = random.Random(f"cross/{seed}/{link}")
    cands = _candidates(inv, reg, [link], rng, tries, _below(inv), rates or {}, pinglist, avoid)
    cands = _clear_of(cands, paths_of, avoid_links - {link})
    sets = paths_of(cands) if cands else []
    return [e for e, s in zip(cands, sets, strict=True) if link in s][:max_tuples]
