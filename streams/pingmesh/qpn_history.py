"""The RNIC registry over event time: which QPN each RNIC answered on when (R-Pingmesh §5, stale QPNs).

A restarted host registers new QPNs; probers keep using the old ones until their pinglists refresh,
and those probes time out: ``stale_qpn`` noise. Whether a probe's QPN was stale depends on the registry
*at the probe's time*, not at the time the reducer closes its window: a window closed after a restart
that happened later must still judge its probes against the QPNs registered then.
"""

from __future__ import annotations

from collections.abc import Iterable


class QpnHistory:
    """QPN registrations per RNIC ordered by ``upload_ns`` (ns, event time of the ``registry.v1`` row).

    Only RNICs that registered more than once in the last ``keep_ns`` keep more than one entry, so
    :meth:`at` costs a dict copy plus the few RNICs that changed. An RNIC whose only known entries are newer
    than the time asked (a registry replayed from the compacted topic holds the newest QPN only) is given
    its oldest known QPN.

    Args:
        keep_ns: how long a superseded QPN stays known after its successor registered (ns; 10 min: windows
            close well within it).
    """

    def __init__(self, keep_ns: int = 600_000_000_000) -> None:
        self.keep_ns = keep_ns
        self.latest: dict[str, int] = {}
        self._history: dict[str, list[tuple[int, int]]] = {}
        self._newest_ns: dict[str, int] = {}

    def update(self, rows: Iterable[tuple[str, int, int]]) -> None:
        """Apply registrations ``(rnic, qpn, upload_ns)`` in any order; an older row than the newest known
        for its RNIC goes into the history without replacing the latest QPN."""
        for rnic, qpn, at_ns in rows:
            newest = self._newest_ns.get(rnic)
            if newest is None:
                self.latest[rnic], self._newest_ns[rnic] = qpn, at_ns
                continue
            if qpn == self.latest[rnic] and at_ns >= newest:
                continue  # the same registration again (agent restarts without a host restart)
            hist = self._history.setdefault(rnic, [(newest, self.latest[rnic])])
            hist.append((at_ns, qpn))
            hist.sort()
            self._newest_ns[rnic], self.latest[rnic] = hist[-1]
            cut = hist[-1][0] - self.keep_ns
            while len(hist) > 1 and hist[1][0] <= cut:
                hist.pop(0)
            if len(hist) == 1:
                del self._history[rnic]

    def at(self, t_ns: int) -> dict[str, int]:
        """RNIC → QPN registered at event time ``t_ns``: the newest registration not after it."""
        out = dict(self.latest)
        for rnic, hist in self._history.items():
            valid = [q for at_ns, q in hist if at_ns <= t_ns]
            out[rnic] = valid[-1] if valid else hist[0][1]
        return out
