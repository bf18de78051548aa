"""The probe protocol both probe backends share (R-Pingmesh §4.2.1): probes in flight, the
500 ms timeout, the responder's admission rule and the ``probe.v1`` row of a finished probe.

The udp backend (:mod:`producers.udp_prober`, kernel socket timestamps) and the verbs
backend (:mod:`producers.verbs_prober`, RNIC completion timestamps) differ only in how
packets travel and where t2..t5 come from; what a probe is, when it times out, whom a
responder answers and what row it yields are defined here once.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

TIMEOUT_NS = 500_000_000  # R-Pingmesh §4: a reply later than 500 ms is a timeout


@dataclass
class TokenBucket:
    """Per-source rate limit of the responder: ``rate`` packets/s, ``burst`` packets."""

    rate: float
    burst: float
    tokens: float = 0.0
    last: float = 0.0

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate) if self.last else self.burst
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass(slots=True)
class PendingProbe:
    """A probe in flight: its pinglist entry, timestamps so far and deadline (monotonic ns).

    Slotted: an agent holds one per probe of an upload interval (6,000 at 8 RNICs x 150/s and 5 s)."""

    entry: dict[str, Any]
    seq: int
    t1: int
    deadline: int
    hardware: bool
    t2: int | None = None
    t3: int | None = None
    t4: int | None = None
    t5: int | None = None
    t6: int | None = None
    responder_hw: bool | None = None


def pop_expired(deadlines: deque[tuple[int, int]], pending: dict[int, PendingProbe], now_ns: int
                ) -> list[PendingProbe]:
    """Take every deadline at or before ``now_ns`` (monotonic ns) off the front of ``deadlines``; return the
    probes still pending.

    ``deadlines`` holds ``(deadline, seq)`` in deadline order beside ``pending`` (see :class:`InFlight`).
    """
    out = []
    while deadlines and deadlines[0][0] <= now_ns:
        _, seq = deadlines.popleft()
        p = pending.get(seq)
        if p is not None:
            out.append(p)
    return out


# probe.v1 fields a probe takes from its pinglist entry (the same for every probe of the entry)
ENTRY_FIELDS = ("pinglist", "prober_host", "prober_rnic", "responder_host", "responder_rnic", "src_ip", "dst_ip",
                "src_port", "dst_port", "flow_label", "traffic_class", "priority", "qpn", "gid_index", "job_id")


def _entry_values(e: dict[str, Any], host: str) -> tuple[Any, ...]:
    return (e.get("pinglist", "tor_mesh"), e.get("prober_host", host), e["prober_rnic"], e.get("responder_host", ""),
            e.get("responder_rnic", ""), e["src_ip"], e["dst_ip"], e["src_port"], e["dst_port"],
            int(e.get("flow_label") or 0), int(e.get("traffic_class") or 0), int(e.get("priority") or 0),
            int(e.get("qpn") or 0), int(e.get("gid_index") or 0), e.get("job_id"))


_ABSENT = -(2**63)  # a reading a probe did not get, in FinishedProbes' arrays
_OK, _HW, _RESPONDER_HW = 1, 2, 4


class FinishedProbes:
    """Finished probes waiting for their upload, kept as machine integers (``array.array`` columns), not as
    objects: what an agent holds between uploads (6,000 probes at 8 RNICs x 150/s and 5 s) costs ~60 bytes
    a probe instead of a :class:`PendingProbe` and its six ints. Entries are kept once each.

    :meth:`add` each finished probe; :meth:`columns` gives their ``probe.v1`` columns (:func:`probe_columns`).
    """

    def __init__(self) -> None:
        self._entries: list[dict[str, Any]] = []
        self._slot: dict[int, int] = {}  # id(entry) -> its place in _entries (which keeps it alive)
        self._entry = array("I")
        self._seq = array("Q")
        self._t = [array("q") for _ in range(6)]  # t1..t6, _ABSENT where a probe has none
        self._flags = array("B")

    def __len__(self) -> int:
        return len(self._seq)

    def add(self, p: PendingProbe) -> None:
        """Keep finished probe ``p`` (its row as :func:`probe_columns` would give it)."""
        self.add_many((p,))

    def add_many(self, probes: Sequence[PendingProbe]) -> None:
        """Keep finished probes, in order (:meth:`add` of each; one call per wakeup, not per probe)."""
        slot, entries, entry, seqs, flags = self._slot, self._entries, self._entry, self._seq, self._flags
        t1, t2, t3, t4, t5, t6 = self._t
        for p in probes:
            e = p.entry
            i = slot.get(id(e))
            if i is None:
                i = slot[id(e)] = len(entries)
                entries.append(e)
            entry.append(i)
            seqs.append(p.seq)
            t1.append(p.t1)
            t2.append(_ABSENT if p.t2 is None else p.t2)
            if p.t5 is not None and p.t3 is not None and p.t4 is not None:
                t3.append(p.t3)
                t4.append(p.t4)
                t5.append(p.t5)
                t6.append(_ABSENT if p.t6 is None else p.t6)
                flags.append(_OK | (_HW if p.hardware else 0) | (_RESPONDER_HW if p.responder_hw else 0))
            else:
                t3.append(_ABSENT)
                t4.append(_ABSENT)
                t5.append(_ABSENT)
                t6.append(_ABSENT)
                flags.append((_HW if p.hardware else 0) | (_RESPONDER_HW if p.responder_hw else 0))

    def columns(self, agent_id: str, host: str) -> dict[str, Sequence[Any]]:
        """The ``probe.v1`` columns (name -> one value per probe, in the order added); see :func:`probe_columns`.
        ``seq`` and ``t1`` are the ``array.array`` kept (never null), ``t2``..``t6`` a
        :class:`schemas.arrow_nano.MaskedInts` over the arrays kept (null where a probe has no reading):
        :func:`schemas.arrow_nano.encode_columns` reads them as buffers. The rest are lists."""
        from schemas.arrow_nano import MaskedInts  # here: the simulator imports this module without nanoarrow

        n = len(self)
        static = [_entry_values(e, host) for e in self._entries]
        if n:
            rows = [static[i] for i in self._entry]
            cols: dict[str, list[Any]] = dict(zip(ENTRY_FIELDS, map(list, zip(*rows, strict=True)), strict=True))
        else:
            cols = {name: [] for name in ENTRY_FIELDS}
        cols["agent_id"] = [agent_id] * n
        cols["seq"] = self._seq
        cols["t1"] = self._t[0]
        for k, name in enumerate(("t2", "t3", "t4", "t5", "t6"), start=1):
            cols[name] = MaskedInts(self._t[k], _ABSENT)
        both = _HW | _RESPONDER_HW
        cols["ts_source"] = ["hardware" if f & both == both else "software" for f in self._flags]
        cols["status"] = ["ok" if f & _OK else "timeout" for f in self._flags]
        return cols


def probe_columns(agent_id: str, host: str, probes: list[PendingProbe]) -> dict[str, list[Any]]:
    """The ``probe.v1`` columns (name -> one value per probe, in order) of finished probes.

    Status ``ok`` when ACK1 and ACK2 both came in time. Either reply missing at the 500 ms deadline makes
    the probe a ``timeout`` (R-Pingmesh: a reply later than 500 ms is a timeout), its t3-t6 null: without
    ACK2 the responder delay t4 - t3 is unknown, so the row cannot be decomposed, and ACK2 crossed the same
    reverse path as ACK1, so its loss is that path's to vote on (an ACK2 alone proves nothing about the
    probe's round trip either). ``ts_source`` is ``hardware`` only when both ends used NIC clocks, so
    hardware and software readings never meet in one row.

    The entry's fields are read once per entry object (an agent's probes share their entry's), so a batch
    costs a few list passes, not a dict per probe (:class:`FinishedProbes`, which an agent fills as probes
    finish).
    """
    done = FinishedProbes()
    for p in probes:
        done.add(p)
    return {name: list(col) for name, col in done.columns(agent_id, host).items()}


def probe_row(agent_id: str, host: str, p: PendingProbe) -> dict[str, Any]:
    """The ``probe.v1`` row of one finished probe (:func:`probe_columns` of ``[p]``, as a dict)."""
    return {name: col[0] for name, col in probe_columns(agent_id, host, [p]).items()}


class InFlight:
    """A prober's probes in flight: ``pending`` by seq, and their ``(deadline, seq)`` in deadline order beside it.

    A finished probe (:meth:`finish`, or :meth:`expire` at its deadline) leaves ``pending``
    and its ``probe.v1`` row (:func:`probe_row`) goes to ``on_probe``; or, with ``on_finished``, the
    probes themselves go there, a list at a time (an agent that builds its batch's columns at once,
    :class:`FinishedProbes`).
    ``pending`` may be cleared from outside; a cleared probe's deadline entry is skipped when it falls due.

    Args:
        agent_id, host: names for the rows.
        on_probe: called with each finished row.
        pending: the dict to keep probes in (default: a new one).
        on_finished: when given, called with lists of finished :class:`PendingProbe` instead of ``on_probe``
            with each row (a list per :meth:`finish_many` or :meth:`expire`, in the order they finished).
    """

    def __init__(
        self,
        agent_id: str,
        host: str,
        on_probe: Callable[[dict[str, Any]], None],
        pending: dict[int, PendingProbe] | None = None,
        on_finished: Callable[[list[PendingProbe]], None] | None = None,
    ) -> None:
        self.agent_id, self.host, self.on_probe = agent_id, host, on_probe
        self.on_finished = on_finished
        self.pending: dict[int, PendingProbe] = {} if pending is None else pending
        # (deadline, seq) in deadline order: every probe's deadline is its send time plus the one timeout, so
        # they come in order and a deque does what a heap would, without its comparisons
        self._deadlines: deque[tuple[int, int]] = deque()

    def add(self, p: PendingProbe) -> None:
        """Track ``p`` until it finishes or its deadline passes."""
        self.add_many((p,))

    def add_many(self, probes: Sequence[PendingProbe]) -> None:
        """Track each of ``probes`` (:meth:`add` of each)."""
        pending, deadlines = self.pending, self._deadlines
        for p in probes:
            pending[p.seq] = p
            if deadlines and p.deadline < deadlines[-1][0]:  # out of order (a caller's own deadline): sorted in
                self._deadlines = deadlines = deque(sorted([*deadlines, (p.deadline, p.seq)]))
            else:
                deadlines.append((p.deadline, p.seq))

    def finish(self, p: PendingProbe) -> None:
        """``p`` is done (answered, or past its deadline): emit its row."""
        self.finish_many([p])

    def finish_many(self, probes: list[PendingProbe]) -> None:
        """Each of ``probes`` is done, in order (:meth:`finish` of each; those still in ``pending`` leave it)."""
        pop = self.pending.pop
        for p in probes:
            pop(p.seq, None)
        if self.on_finished is not None:
            if probes:
                self.on_finished(probes)
        else:
            for p in probes:
                self.on_probe(probe_row(self.agent_id, self.host, p))

    def expire(self, now_ns: int) -> int:
        """Finish every probe whose deadline is at or before ``now_ns`` (monotonic ns); returns how many."""
        expired = pop_expired(self._deadlines, self.pending, now_ns)
        self.finish_many(expired)
        return len(expired)


@dataclass
class Admission:
    """Whom a responder answers: registered sources only, each at most ``rate_limit`` packets/s.

    A probe from an unregistered source, or beyond its source's token bucket (burst =
    ``rate_limit`` packets), is dropped and counted in ``counters`` under
    ``dropped_unregistered`` / ``dropped_rate``.
    """

    allowed: set[str]
    rate_limit: float
    counters: dict[str, int]
    buckets: dict[str, TokenBucket] = field(default_factory=dict)

    def admit(self, src: str, now: float) -> bool:
        """Whether to answer a packet from ``src`` (address or GID) at ``now`` (monotonic seconds)."""
        if src not in self.allowed:
            self.counters["dropped_unregistered"] += 1
            return False
        b = self.buckets.get(src)
        if b is None:
            b = self.buckets[src] = TokenBucket(self.rate_limit, self.rate_limit)
        if not b.take(now):
            self.counters["dropped_rate"] += 1
            return False
        return True


REPLY_FACTOR = 2.0  # the protocol answers one probe with ACK1 + ACK2: 2x in packets and bytes
REPLY_WINDOW_S = 10.0


@dataclass
class ReplyBudget:
    """What a responder may send to one address: at most ``factor`` x the bytes that address sent
    it over the trailing ``window_s`` seconds, checked at every send (no amplification, even from
    a spoofed source). The udp engine counts the packets it answers (probes and traces): the replies
    to its own probes and traces add nothing to what it may answer.

    Every packet the responder sends in answer to a packet (ACK1, ACK2, trace replies) is charged
    to the address it goes to; the agent's own probes and traces (forward, and reverse toward peers
    it probes itself) are not. Sources are tracked in one-second buckets, at most ``max_sources`` of them (the
    least recently seen is forgotten first, so state stays bounded).
    """

    factor: float = REPLY_FACTOR
    window_s: float = REPLY_WINDOW_S
    max_sources: int = 65_536
    # source -> [buckets [second, in, out], bytes in, bytes out over the buckets]; running sums, so a
    # probe costs O(1) however busy the source
    _per: OrderedDict[str, list] = field(default_factory=OrderedDict)

    def _state(self, src: str, now: float) -> list:
        st = self._per.get(src)
        if st is None:
            st = self._per[src] = [deque(), 0.0, 0.0]
            if len(self._per) > self.max_sources:
                self._per.popitem(last=False)
        else:
            self._per.move_to_end(src)
        buckets = st[0]
        while buckets and buckets[0][0] <= now - self.window_s:
            _, got, sent = buckets.popleft()
            st[1] -= got
            st[2] -= sent
        sec = float(int(now))
        if not buckets or buckets[-1][0] != sec:
            buckets.append([sec, 0.0, 0.0])
        return st

    def received(self, src: str, nbytes: int, now: float) -> None:
        """Count ``nbytes`` of payload that arrived from ``src`` at ``now`` (monotonic seconds)."""
        st = self._state(src, now)
        st[0][-1][1] += nbytes
        st[1] += nbytes

    def allow(self, dst: str, nbytes: int, now: float) -> bool:
        """Whether ``nbytes`` more to ``dst`` stay within the budget; if so they are counted as sent."""
        st = self._state(dst, now)
        if st[2] + nbytes > self.factor * st[1]:
            return False
        st[0][-1][2] += nbytes
        st[2] += nbytes
        return True
