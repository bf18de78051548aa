"""What every ``verdict.v1`` producer shares: the analysis window and the verdict id.

Both analyzers write ``verdict.v1`` rows: R-Pingmesh's (:mod:`streams.pingmesh.analyzer`)
and Hostping's (:mod:`streams.hostping.hostping_stream`). A row covers one epoch-aligned
window of :data:`WINDOW_NS` and is named by :func:`verdict_id`, so the sink's dedup and
an operator's feedback see the same id on every replay.
"""

from __future__ import annotations

import hashlib

WINDOW_NS = 20_000_000_000
"""Analysis period of R-Pingmesh §5: 20 s, in ns (``window_end_ns - window_start_ns`` of a verdict)."""


def verdict_id(window_start_ns: int, kind: str, location: str, job_id: str | None, revision_of: str | None) -> str:
    """Deterministic id of a verdict (16 hex digits of SHA-1), equal across replays."""
    key = f"{window_start_ns}|{kind}|{location}|{job_id or ''}|{revision_of or ''}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]
