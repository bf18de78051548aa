"""Probe requests: what the analyzer asks the controller to probe after an ``undetermined`` window.

A tie in the vote (:func:`streams.pingmesh.tomography.vote_step`) names a group of switch links that
explain the same failures: what was probed cannot tell them apart. The analyzer does not guess; it
asks for probes that would (the controller's :class:`producers.controller_loop.SplitLoop` answers
with 5-tuples, or bounced probes, that cross one member and not the others), and the next window
names the link. A request is a plain record (``probe_request``)::

    request_id      the verdict_id it answers
    window_start_ns the window that ended undetermined
    links           the group, sorted (switch links ``lower->upper``)
    why             the verdict's reason

A claim whose evidence names ``verify_links`` (the other switch links its failing probes crossed,
:mod:`streams.pingmesh.verify`) makes a *verification* request: ``links`` = those links, ``verify`` = the
claimed link, ``why`` = ``"verify"``; the loop probes each of them off the claimed link. A lossy claim whose
failing probes crossed another claim (``verify_self`` in its evidence) asks the same, ``verify_self`` = True:
the loop probes the claimed link too, off the other claims.

Only ties over two or more links make a split request (the loop answers those with a switch link among them;
a tie may hold access links too, :meth:`producers.controller_loop.SplitLoop.on_requests`): an
``undetermined`` over one access link (RNIC, cable or ToR port), over a pseudo-link ``X->*`` or over
``unexplained`` timeouts has no group to split.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pyarrow as pa

from streams.pingmesh.links import LINK_SEP, NO_ANSWER


def _evidence(v: dict) -> dict:
    """A verdict's evidence as a dict ({} when absent or not JSON: a request then goes without it)."""
    try:
        ev = json.loads(v.get("evidence") or "{}")
    except json.JSONDecodeError:
        return {}
    return ev if isinstance(ev, dict) else {}


def requests_from_verdicts(verdicts: pa.Table | Iterable[dict]) -> list[dict]:
    """``probe_request`` records for the verdicts that ended ``undetermined`` over a group of links.

    Args:
        verdicts: ``verdict.v1`` rows (a table or dicts); revisions are skipped.

    Returns:
        One record per such verdict (and per claim with ``verify_links``), in input order.
    """
    rows = verdicts.to_pylist() if isinstance(verdicts, pa.Table) else list(verdicts)
    out = []
    for v in rows:
        if v.get("revision_of") is not None:
            continue
        if v["kind"] == "switch":
            ev = _evidence(v)
            verify = ev.get("verify_links") or []
            if verify or ev.get("verify_self"):
                req = {"request_id": v["verdict_id"], "window_start_ns": int(v["window_start_ns"]),
                       "links": sorted(map(str, verify)), "why": "verify", "verify": str(v["location"])}
                out.append({**req, "verify_self": True} if ev.get("verify_self") else req)
            continue
        if v["kind"] != "undetermined":
            continue
        parts = str(v["location"]).split("|")
        if len(parts) < 2 or not all(LINK_SEP in p and not p.endswith(LINK_SEP + NO_ANSWER) for p in parts):
            continue
        why = _evidence(v).get("why", "")
        out.append({"request_id": v["verdict_id"], "window_start_ns": int(v["window_start_ns"]),
                    "links": sorted(parts), "why": why})
    return out


def named_links(verdicts: pa.Table | Iterable[dict]) -> list[str]:
    """The switch links the verdicts claim (``switch`` and ``switch_latency``), for the loop's renewal."""
    rows = verdicts.to_pylist() if isinstance(verdicts, pa.Table) else list(verdicts)
    return [str(v["location"]) for v in rows if v["kind"] in ("switch", "switch_latency")
            and v.get("revision_of") is None]


def down_endpoints(verdicts: pa.Table | Iterable[dict]) -> list[str]:
    """The RNICs (``rnic``) and hosts (``host_down``, ``host_unreachable``, ``busy_host``) the verdicts judge
    down or busy, for the loop to keep its probes off them: the triage takes every timeout at them before
    the vote, so a probe to or from one splits nothing."""
    rows = verdicts.to_pylist() if isinstance(verdicts, pa.Table) else list(verdicts)
    return [str(v["location"]) for v in rows if v["kind"] in ("rnic", "host_down", "host_unreachable", "busy_host")
            and v.get("revision_of") is None]
