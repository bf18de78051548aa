"""The controller's closed loop: probes that split a group of links a window could not tell apart.

When a window ends ``undetermined`` over a group of switch links (a tie: every failing probe crossed
all of them), the analyzer turns the verdict into a *probe request* (a ``probe_request`` record,
:func:`streams.pingmesh.probe_requests.requests_from_verdicts`). :class:`SplitLoop` answers it with a
short-lived set of pinglist entries, added to the inter-ToR pinglist of the next windows and withdrawn
after ``lifetime_ns``:

* **5-tuples that split the group** (:func:`producers.controller_ident.split_entries`): their traced
  paths cross one member but not another, so a fault on one member fails probes the others' does not.
* **Bounced probes** where no 5-tuple can (a structural group,
  :func:`producers.controller_ident.structural_groups`: on a three-tier Clos of two pods, a core's two
  links are crossed by every inter-pod path together; or no live RNIC pair splits the group now, as on
  Panel 1 when both hosts under the third ToR are down). One entry per member link ``a->b``: an RNIC
  under ``a`` sends a probe up to ``b`` and back down the same links (NetBouncer's packet bouncing,
  Tan et al., NSDI '19: IP-in-IP to the switch, which decapsulates and routes it back), so it crosses
  that member and no other. The simulator models them; on a cluster they need switches that
  decapsulate IP-in-IP and a prober that encapsulates (not exercised here, docs/identifiability.md).

A named link may hide a second fault: every failing probe through it is its, so a partial 5-tuple loss
whose selected tuples all cross it is never named (:mod:`streams.pingmesh.verify`). A claim names the
other links its failing probes crossed (``verify_links``), and the analyzer asks to *verify* them (a
request with ``verify`` = the claimed link): :class:`SplitLoop` probes each of them with 5-tuples that keep
off every named link, new ones each window the claim stands (but a verified link that a window named keeps
its own: they showed its loss), and withdraws them ``lifetime_ns`` after the last claim.

A group is renewed while windows keep naming one of its links or stay ``undetermined`` over it (or over
more links, all of its among them), drawn anew when such a window had its entries in force for
``min_in_force_ns``, and withdrawn ``lifetime_ns`` after the last of those. Rate-limited per fabric: at
most ``max_groups`` groups at once, ``max_tuples`` 5-tuples per group at ``group_pps`` probes/s in all; a
request beyond that is refused (counted). Verification has caps of its own (``max_verify`` claims,
``verify_per_link`` tuples per link at ``verify_pps`` in all per claim), so it never takes a tie's place.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from producers import controller as ctl
from producers.controller_ident import (
    BOUNCE_PPS,
    BOUNCE_TUPLES,
    PathsOf,
    bounce_entries,
    crossing_entries,
    split_entries,
    structural_groups,
    switch_links,
)
from schemas.inventory import Inventory

WINDOW_NS = 20_000_000_000
GROUP_PPS = 320.0
"""Probes/s of one group's splitting 5-tuples in all (the rate limit per group): 48 tuples at 6.7 probes/s
each (133 per window, every one lost when a partial 5-tuple loss selects the tuple), or fewer at
most ``2 x INTER_TOR_LINK_PPS`` each. Many slow tuples rather than a few fast ones: a partial loss shows
on a tuple its hash selects, whatever its rate, and a lossy or dead link on the probes crossing it."""

GROWTH = 3
"""A group renewed while still undetermined gets ``1 + generation`` times its tuples (bounced and split), at most
this many times, at the same probes/s: ``(1 - f)^16`` of the first set, then ``(1 - f)^32`` and ``(1 - f)^48``."""


@dataclass
class _Active:
    group: tuple[str, ...]
    entries: list[dict]
    until_ns: int
    how: str  # "split" | "bounce" | "none"
    since_ns: int = 0  # when these entries were put in force
    generation: int = 0
    by_link: dict[str, list[dict]] = field(default_factory=dict)  # verification: the entries drawn per link


@dataclass
class SplitLoop:
    """Answers probe requests with short-lived pinglist entries (see the module docstring).

    Attributes:
        inv, reg: the fabric and its registry (QPNs of the new entries).
        paths_of: the links a 5-tuple's paths cross (the tracer's paths; the simulator's ECMP model).
        seed: seeds the candidate 5-tuples.
        lifetime_ns: how long a group's entries stay after its last request or naming (two windows).
        max_groups: groups probed at once per fabric (the rate limit).
        max_tuples: 5-tuples per group (times ``1 + generation``, at most :data:`GROWTH`, once renewed).
        per_member: of them, crossing each member without the whole group (:func:`split_entries`).
        group_pps: probes/s of a group's 5-tuples in all, shared by them (each at most
            ``2 x INTER_TOR_LINK_PPS``, the rate of an Eq. 1 tuple's link pair).
        bounce: answer structural groups with bounced probes (else they are refused as unsplittable).
        max_verify: claims whose hidden links are verified at once per fabric.
        verify_per_link: 5-tuples per link verified, each keeping off the named links.
        verify_pps: probes/s of one claim's verification tuples in all.
        verify_generations: sets of verification tuples drawn per claim while it stands.
        window_ns: the analyzer's window (a request's ``window_start_ns`` + this is its end).
        min_in_force_ns: how long a group's entries must have been in force in a window that still ended
            undetermined over it before they are drawn anew (a quarter window: one 5 s upload round).
    """

    inv: Inventory
    reg: ctl.Registry
    paths_of: PathsOf
    seed: int = 0
    lifetime_ns: int = 2 * WINDOW_NS
    max_groups: int = 4
    max_tuples: int = 48
    per_member: int = 16
    group_pps: float = GROUP_PPS
    bounce: bool = True
    max_verify: int = 4
    verify_per_link: int = 6
    verify_pps: float = GROUP_PPS / 2
    verify_generations: int = 4
    window_ns: int = WINDOW_NS
    min_in_force_ns: int = WINDOW_NS // 4
    active: dict[tuple[str, ...], _Active] = field(default_factory=dict)
    verifying: dict[str, _Active] = field(default_factory=dict)
    """Claimed link → the probes verifying the links its failing probes also crossed."""
    refused: int = 0
    answered: int = 0
    log: list[dict] = field(default_factory=list)
    down_until: dict[str, int] = field(default_factory=dict)
    """RNIC → until when new entries keep off it (:meth:`on_down`)."""
    named_until: dict[str, int] = field(default_factory=dict)
    """Link named faulty → until when new entries keep off it (:meth:`on_named`)."""
    _structural: set[frozenset[str]] | None = None
    _links: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._links = set(switch_links(self.inv))

    def _is_structural(self, group: tuple[str, ...]) -> bool:
        if self._structural is None:
            self._structural = {frozenset(g) for g in structural_groups(self.inv)}
        return any(set(group) <= s for s in self._structural)

    def on_requests(self, requests: Iterable[dict], now_ns: int) -> list[dict]:
        """Take ``probe_request`` records (``links``: the group); returns the entries newly added.

        A request for a group already probed renews it; a group may hold access links (``rnic->tor``) beside
        one or more switch links (:meth:`_parts`); a request over links the fabric lacks (a pseudo-link), or
        over access links only, is refused, as is one past ``max_groups``.
        """
        added: list[dict] = []
        self._expire(now_ns)
        requests = list(requests)
        claimed = {str(r["verify"]) for r in requests if r.get("verify")}  # every switch claim asks to verify
        for req in requests:
            if req.get("verify"):
                added += self._verify(req, now_ns, claimed)
                continue
            group = tuple(sorted(set(req["links"])))
            if len(group) < 2 or self._parts(group) is None:
                self.refused += 1
                continue
            # a tie over more links than an active group, all of its among them (its split tuples or bounces
            # were in force, and the window's failing probes still crossed its links together): the group's
            # probes did not split it either (seed 1317, scenario 33: a partial loss on P0S2->X3 spared the
            # core pair's eight bounced tuples, and the next window tied the pair with T4's links instead)
            for sub in [g for g in self.active if len(g) < len(group) and set(g) <= set(group)]:
                gen = self._renew(self.active[sub], req, now_ns)
                if gen is not None:
                    added += self._draw(sub, gen, now_ns, req)
            gen = 0
            if group in self.active:
                gen = self._renew(self.active[group], req, now_ns)
                if gen is None:
                    continue
            elif len(self.active) >= self.max_groups:
                self.refused += 1
                continue
            added += self._draw(group, gen, now_ns, req)
        return added

    def _renew(self, a: _Active, req: dict, now_ns: int) -> int | None:
        """Keep group ``a`` for another ``lifetime_ns`` (a request's window was still undetermined over it);
        the generation to draw it again at when that window had its entries in force for
        ``min_in_force_ns`` or more, else None (they stay).

        In force for part of the window is enough: a 5-tuple a partial loss selects fails every probe it
        sends, tens in 5 s. A window closes once every agent has uploaded past its end (a grace after it
        while one is silent) and the entries reach the agents after that, so on a live pipeline the window
        after a request has them from a few seconds in, never from its start; waiting for a window that
        began with them wasted that window (in the simulator they mostly come in force at the next
        window's start; seed 1317, scenario 128: 5 s in).
        """
        a.until_ns = now_ns + self.lifetime_ns
        ws = int(req.get("window_start_ns", -1))
        if a.how == "none" or ws < 0 or ws + self.window_ns - a.since_ns < self.min_in_force_ns:
            return None
        return a.generation + 1

    def _draw(self, group: tuple[str, ...], gen: int, now_ns: int, req: dict) -> list[dict]:
        """Put ``group``'s entries of generation ``gen`` in force (in place of any it had); returns them."""
        entries, how = self._answer(group, gen, now_ns)
        self.active[group] = _Active(group, entries, now_ns + self.lifetime_ns, how, now_ns, gen)
        self.answered += 1
        self.log.append({"at_ns": now_ns, "links": list(group), "how": how, "entries": len(entries),
                         "generation": gen, "request": req.get("request_id")})
        return entries

    def _verify(self, req: dict, now_ns: int, claimed: AbstractSet[str] = frozenset()) -> list[dict]:
        """Answer a verification request (``verify``: the claimed link; ``links``: the links to verify).

        Renewed while the claim stands; new 5-tuples when a window that began with the last ones in force
        still names the claim (they showed nothing: a partial loss spares most tuples through its link), up
        to ``verify_generations`` sets, then the last set stays (a link dead for hours does not have its
        neighbours' probes redrawn, and the agents' lists republished, every window). A link to verify that
        is named (``claimed``: this batch's claims, or earlier windows') keeps its 5-tuples in the new set:
        they may be the only probed ones a partial loss on it selected, and new ones would likely spare it
        (seed 15665, scenario 110: `C->S3` named from `B->S4`'s verification tuples, then missed).
        With ``verify_self`` (a lossy claim whose failing probes crossed another claim), the claimed link is
        probed too, off every other named link: its own loss then fails probes no other claim explains (seed
        15665, scenario 280: a lossy link beside a dead one left 8 votes short of its claim for a window).
        Refused past ``max_verify`` claims, or when no link to verify is a switch link."""
        claim = str(req["verify"])
        links = sorted({lk for lk in req["links"] if lk in self._links and lk != claim})
        if req.get("verify_self") and claim in self._links:
            links.append(claim)  # drawn off the other named links (keep_off less itself, below)
        gen = 0
        kept: dict[str, list[dict]] = {}
        if claim in self.verifying:
            a = self.verifying[claim]
            a.until_ns = now_ns + self.lifetime_ns
            if int(req.get("window_start_ns", -1)) < a.since_ns or a.generation + 1 >= self.verify_generations:
                return []
            gen = a.generation + 1
            named = set(claimed) | self._named(now_ns)
            # a named link leaves the claim's request (its own claim verifies others), not this set
            kept = {lk: es for lk, es in a.by_link.items() if lk in named and lk != claim}
            links = sorted({*links, *kept})
            del self.verifying[claim]
        elif len(self.verifying) >= self.max_verify or not links:
            self.refused += 1
            return []
        avoid = self._down(now_ns)
        keep_off = self._named(now_ns) | {claim}
        seed = self.seed + 7919 * gen
        entries: list[dict] = []
        owner: list[str] = []  # the link each entry was drawn for
        seen: set[tuple] = set()
        for lk in links:
            drawn = kept[lk] if lk in kept else crossing_entries(
                self.inv, self.reg, lk, self.paths_of, seed=seed, avoid=avoid, max_tuples=self.verify_per_link,
                avoid_links=frozenset(keep_off - {lk}))
            for e in drawn:
                key = (e["src_ip"], e["dst_ip"], e["src_port"], e["dst_port"])
                if key not in seen:
                    seen.add(key)
                    entries.append(e)
                    owner.append(lk)
        entries = self._share(entries, self.verify_pps)
        by_link: dict[str, list[dict]] = {}
        for e, lk in zip(entries, owner, strict=True):
            by_link.setdefault(lk, []).append(e)
        self.verifying[claim] = _Active(tuple(links), entries, now_ns + self.lifetime_ns, "verify", now_ns, gen,
                                        by_link)
        self.answered += 1
        self.log.append({"at_ns": now_ns, "links": links, "how": "verify", "verify": claim,
                         "entries": len(entries), "generation": gen, "request": req.get("request_id")})
        return entries

    def _parts(self, group: tuple[str, ...]) -> tuple[tuple[str, ...], frozenset[str]] | None:
        """A group's switch links and the RNICs whose access links (``rnic->tor``) it holds; None when it holds
        a link that is neither, or no switch link (an RNIC's own probes settle its access link: the RNIC
        rule, not the loop).

        A tie between a switch link and an access link comes from failing tuples that all had that RNIC at
        one end (a partial 5-tuple loss that selected only its tuples): 5-tuples through the switch link
        from other RNICs split the two.
        """
        switch = tuple(lk for lk in group if lk in self._links)
        access = [lk.split("->", 1) for lk in group if lk not in self._links]
        if not switch or any(len(p) != 2 or p[0] not in self.inv.rnics or self.inv.tor_of(p[0]) != p[1]
                             for p in access):
            return None
        return switch, frozenset(p[0] for p in access)

    def _answer(self, group: tuple[str, ...], generation: int, now_ns: int) -> tuple[list[dict], str]:
        parts = self._parts(group)
        assert parts is not None  # on_requests refuses the others
        switch, avoid = parts
        avoid |= self._down(now_ns)
        # a tuple through a link named faulty fails there, and the vote gives its failures to that link: on
        # Panel 1 the tuples that split A->S2|C->S2 all cross B->S2, and with B->S2 dead they split nothing;
        # bounced probes (below) then do
        named = self._named(now_ns) - set(switch)
        seed = self.seed + 7919 * generation
        # a group still undetermined with the last tuples in force gets more of them, at the same probes/s: a
        # partial loss selecting 11 % of tuples missed three sets of 16 through its link (seed 15665, scenario
        # 299), and a selected tuple shows it at any rate
        grow = min(1 + generation, GROWTH)
        tries = max(64, 4 * self.max_tuples) * grow
        if len(switch) == 1:  # one switch link tied with access links: tuples through it from other RNICs
            entries = crossing_entries(self.inv, self.reg, switch[0], self.paths_of, seed=seed, avoid=avoid,
                                       max_tuples=self.max_tuples * grow, tries=tries, avoid_links=named)
            if not entries and parts[1]:
                # no other live RNIC has a path through it (the rest under its ToR down: seed 1317, scenario
                # 60, B->S4 flapping beside B3 and H3 down, tied with B4->B two windows): new tuples of the
                # tied RNICs through it; a fault on the switch link fails every one, a partial loss on an
                # access link the share it selects, and the RNIC's probes through other links pass
                entries = crossing_entries(self.inv, self.reg, switch[0], self.paths_of, seed=seed,
                                           avoid=self._down(now_ns), max_tuples=self.max_tuples * grow, tries=tries,
                                           avoid_links=named)
            return self._share(entries), "split" if entries else "none"
        entries = split_entries(self.inv, self.reg, switch, self.paths_of, seed=seed, tries=tries,
                                max_tuples=self.max_tuples * grow, per_member=self.per_member * grow, avoid=avoid,
                                avoid_links=named)
        def bounced(links: tuple[str, ...]) -> list[dict]:
            # the group's rate shared by its members, as for its 5-tuples: 200 bounced probes a window
            # (R-Pingmesh's 10/s) gave a link lossy at 0.8 % two or three failures, too few to set it
            # apart from its pair (seed 30467, scenario 178); 3,200 at 160/s give sixteen times as many
            try:
                return bounce_entries(self.inv, self.reg, links, seed=self.seed, generation=generation, avoid=avoid,
                                      avoid_links=named, per_link=BOUNCE_TUPLES * grow,
                                      pps=max(BOUNCE_PPS, self.group_pps / len(switch)),
                                      others=frozenset(switch) - set(links))
            except ValueError:  # no RNIC to bounce from under a member's lower end
                return []

        if entries:
            # a member no drawn tuple crosses without the rest (every path on through it crosses a link named
            # dead: a partial loss on P1S2->X4 beside a dead P0S2->X4 cable, only X4 reached pod 0) is bounced
            whole = set(switch)
            crossed = [set(ps) for ps in self.paths_of(entries)]
            alone = tuple(m for m in switch if not any(m in ps and not ps >= whole for ps in crossed))
            return self._share(entries) + (bounced(alone) if alone and self.bounce else []), "split"
        if self.bounce:  # structural, or no live RNIC pair splits it now (the far ToRs' hosts are down)
            entries = bounced(switch)
            return entries, "bounce" if entries else "none"
        return [], "none"

    def _share(self, entries: list[dict], pps: float | None = None) -> list[dict]:
        """The group's 5-tuples at ``pps`` (default ``group_pps``) in all, each at most the rate it was drawn at."""
        if not entries:
            return entries
        each = (self.group_pps if pps is None else pps) / len(entries)
        return [{**e, "rate_pps": min(float(e["rate_pps"]), each)} for e in entries]

    def on_named(self, links: Iterable[str], now_ns: int) -> None:
        """A window named these links: keep probing the groups that hold one (the fault is still there); new
        entries keep off them for ``lifetime_ns`` (a probe through a faulty link splits nothing else)."""
        named = set(links)
        for lk in named:
            self.named_until[lk] = max(self.named_until.get(lk, 0), now_ns + self.lifetime_ns)
        for a in self.active.values():
            if named & set(a.group):
                a.until_ns = max(a.until_ns, now_ns + self.lifetime_ns)

    def on_down(self, endpoints: Iterable[str], now_ns: int) -> None:
        """A window judged these RNICs or hosts down or busy (``rnic``, ``host_down``, ``host_unreachable``,
        ``busy_host``): new entries keep off their RNICs for ``lifetime_ns``. A probe to or from a dead RNIC
        fails on every link it crosses, so it splits nothing, and its failures (like every timeout at a busy
        host) are the triage's, not the vote's."""
        for x in endpoints:
            rnics = [x] if x in self.inv.rnics else self.inv.rnics_of_host(x) if x in self.inv.hosts else []
            for r in rnics:
                self.down_until[r] = max(self.down_until.get(r, 0), now_ns + self.lifetime_ns)

    def _down(self, now_ns: int) -> frozenset[str]:
        """The RNICs judged down within ``lifetime_ns`` before ``now_ns``."""
        return frozenset(r for r, until in self.down_until.items() if until > now_ns)

    def _named(self, now_ns: int) -> frozenset[str]:
        """The links named faulty within ``lifetime_ns`` before ``now_ns``."""
        return frozenset(lk for lk, until in self.named_until.items() if until > now_ns)

    def _expire(self, now_ns: int) -> None:
        for g in [g for g, a in self.active.items() if a.until_ns <= now_ns]:
            del self.active[g]
        for c in [c for c, a in self.verifying.items() if a.until_ns <= now_ns]:
            del self.verifying[c]
        for lk in [lk for lk, until in self.named_until.items() if until <= now_ns]:
            del self.named_until[lk]
        for r in [r for r, until in self.down_until.items() if until <= now_ns]:
            del self.down_until[r]

    def entries(self, now_ns: int) -> list[dict]:
        """The loop's entries in force at ``now_ns`` (expired groups withdrawn), in group order, then the
        verifications in claim order."""
        self._expire(now_ns)
        return [*(e for g in sorted(self.active) for e in self.active[g].entries),
                *(e for c in sorted(self.verifying) for e in self.verifying[c].entries)]
