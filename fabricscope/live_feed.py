"""A live verdict feed: each new problem as it arrives and when it clears, for `up` and `verdicts --follow`.

A problem is a verdict's ``(kind, location)``; its impact is the worst of its verdicts (one per job it lies
on). It is NEW when a verdict first names it, and CLEARED once ``clear_windows`` later windows closed in the
store (a verdict or coverage row of a later window arrived) without it; it comes back as NEW after that.
Probe noise (``stale_qpn``: a restarted host's old QPNs) is counted, never printed as a problem.

Only verdicts of one origin are followed (the running pipeline's, :mod:`sinks.origin`), so a demo beside
the lab never shows up in the lab's feed. Lines read::

    18:28:42 NEW P1 switch A->S3 (job job-lab)
    18:29:42 CLEARED switch A->S3 (last seen in the window 2026-12-01T18:28:20Z – 18:28:40Z (20 s))

``up`` calls :func:`tick` once a second (through :func:`fabricscope.up.read_stats`), ``fabricscope verdicts
--follow`` does the same for a pipeline running elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from fabricscope.times import format_clock, format_window
from schemas.verdicts import WINDOW_NS

NOISE_KINDS = frozenset({"stale_qpn"})
IMPACT_ORDER = {"P0": 0, "P1": 1, "P2": 2}
Query = Callable[[str], pa.Table]
FEED_COLUMNS = "verdict_id, window_start_ns, window_end_ns, kind, location, impact, job_id, emitted_ns"


@dataclass
class Problem:
    """One problem the feed follows: its worst impact, jobs and the last window a verdict named it."""

    kind: str
    location: str
    impact: str
    jobs: set[str] = field(default_factory=set)
    first_ns: int = 0
    last_window_ns: int = 0
    last_window_end_ns: int = 0


@dataclass(frozen=True)
class Event:
    """``NEW`` or ``CLEARED`` for ``problem``, at ``at_ns`` (the verdict's emission, or the closing window's)."""

    what: str
    problem: Problem
    at_ns: int


def format_event(ev: Event, tz: str = "utc") -> str:
    """``18:28:42 NEW P1 switch A->S3 (job job-lab)`` or ``18:29:42 CLEARED switch A->S3 (last seen ...)``."""
    p = ev.problem
    if ev.what == "NEW":
        jobs = f" (job {', '.join(sorted(p.jobs))})" if p.jobs else ""
        return f"{format_clock(ev.at_ns, tz)} NEW {p.impact} {p.kind} {p.location}{jobs}"
    seen = format_window(p.last_window_ns, p.last_window_end_ns, tz)
    return f"{format_clock(ev.at_ns, tz)} CLEARED {p.kind} {p.location} (last seen in the window {seen})"


class VerdictFeed:
    """Follows the verdicts emitted since ``since_ns`` (one origin, or all with ``origin=''``).

    Args:
        since_ns: verdicts emitted before this are not this feed's (ns since the epoch).
        origin: ``production``, ``lab``, ``sim``, ``demo``, or ``''`` for every origin.
        clear_windows: closed windows without a verdict after which a problem is cleared (3, as the alerts).
    """

    def __init__(self, since_ns: int, origin: str = "", clear_windows: int = 3) -> None:
        self.since_ns = since_ns
        self.cursor_ns = since_ns
        self.origin = origin
        self.clear_windows = clear_windows
        self.active: dict[tuple[str, str], Problem] = {}
        self.verdicts = 0  # this feed's verdicts, noise included
        self.noise = 0
        self.new = 0
        self.cleared = 0
        self._seen: dict[str, int] = {}  # verdict_id -> emitted_ns, for verdicts at the cursor's instant
        self.newest_window_ns = 0

    def counts(self) -> str:
        """``3 verdicts (1 noise): 2 problems new, 1 cleared, 1 active (P1 1)``."""
        by = {}
        for p in self.active.values():
            by[p.impact] = by.get(p.impact, 0) + 1
        active = ", ".join(f"{k} {v}" for k, v in sorted(by.items()))
        return (f"{self.verdicts:,} verdict{'' if self.verdicts == 1 else 's'}"
                + (f" ({self.noise:,} probe noise)" if self.noise else "")
                + f": {self.new} new, {self.cleared} cleared, {len(self.active)} active"
                + (f" ({active})" if active else ""))

    def update(self, rows: list[dict[str, Any]], newest_window_ns: int | None) -> list[Event]:
        """Fold in verdict rows (``FEED_COLUMNS``, oldest emission first) and the newest window the store has
        seen (a verdict's or a coverage row's start); returns the events, NEW before CLEARED."""
        events: list[Event] = []
        for r in rows:
            if r["verdict_id"] in self._seen:
                continue
            self._seen[r["verdict_id"]] = r["emitted_ns"]
            self.cursor_ns = max(self.cursor_ns, r["emitted_ns"])
            self.verdicts += 1
            if r["kind"] in NOISE_KINDS:
                self.noise += 1
                continue
            if r["kind"] == "undetermined":
                continue
            k = (r["kind"], r["location"])
            p = self.active.get(k)
            if p is None:
                p = self.active[k] = Problem(r["kind"], r["location"], r["impact"], first_ns=r["emitted_ns"])
                self.new += 1
                events.append(Event("NEW", p, r["emitted_ns"]))
            elif IMPACT_ORDER.get(r["impact"], 9) < IMPACT_ORDER.get(p.impact, 9):
                p.impact = r["impact"]
            if r.get("job_id"):
                p.jobs.add(r["job_id"])
            if r["window_start_ns"] >= p.last_window_ns:
                p.last_window_ns, p.last_window_end_ns = r["window_start_ns"], r["window_end_ns"]
        self._seen = {v: t for v, t in self._seen.items() if t >= self.cursor_ns}  # bounded: the cursor's instant
        self.newest_window_ns = max(self.newest_window_ns, newest_window_ns or 0,
                                    *(r["window_start_ns"] for r in rows))
        for k, p in list(self.active.items()):
            if self.newest_window_ns >= p.last_window_ns + self.clear_windows * WINDOW_NS:
                del self.active[k]
                self.cleared += 1
                events.append(Event("CLEARED", p, self.newest_window_ns + WINDOW_NS))
        return events

    def sql(self) -> tuple[str, str]:
        """The two queries of one poll: verdicts from the cursor on, and the newest window in the store."""
        where = f"emitted_ns >= {int(self.cursor_ns)}"
        if self.origin:
            where += f" AND origin = '{self.origin}'"  # one of sinks.origin.ORIGINS, checked by the caller
        verdicts = f"SELECT {FEED_COLUMNS} FROM verdicts WHERE {where} ORDER BY emitted_ns, verdict_id LIMIT 10000"
        scope = f" WHERE origin = '{self.origin}'" if self.origin else ""
        newest = (f"SELECT greatest((SELECT max(window_start_ns) FROM verdicts{scope}), "
                  f"(SELECT max(window_start_ns) FROM coverage{scope})) AS newest")
        return verdicts, newest

    def poll(self, query: Query) -> list[Event]:
        """Run :meth:`sql` through ``query`` and :meth:`update`; returns the events.

        Raises:
            whatever ``query`` raises (the store unreachable, a refused statement).
        """
        verdicts_sql, newest_sql = self.sql()
        rows = query(verdicts_sql).to_pylist()
        newest = query(newest_sql).to_pylist()
        return self.update(rows, int(newest[0]["newest"] or 0) if newest else None)


def tick(feed: VerdictFeed, query: Query, say: Callable[[str], None], tz: str = "utc") -> list[Event]:
    """One step of a live feed: poll the store and ``say`` each event's line; a store that does not answer
    this time is skipped (the next tick tries again). Returns the events."""
    try:
        events = feed.poll(query)
    except Exception:  # the writer is restarting or busy: the feed catches up on the next tick
        return []
    for ev in events:
        say(format_event(ev, tz))
    return events
