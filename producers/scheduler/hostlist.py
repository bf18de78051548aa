"""Slurm hostlist expressions: ``node[01-04,07]``, ``gpu[1-2]-ib[0-1]``, ``a1,b[2-3]`` (stdlib only).

Slurm writes a job's nodes as a hostlist (``squeue`` ``%N``, ``NodeList=`` in the job completion log):
comma-separated items, each a name with zero or more bracketed range lists. A range keeps the width
of its lower bound (``[08-10]`` -> ``08 09 10``) as Slurm's ``hostlist_expand`` does; several brackets
in one name are a cartesian product, the leftmost varying slowest (Slurm's order).
"""

from __future__ import annotations

import itertools
import re

MAX_HOSTS = 100_000
"""A hostlist naming more hosts than this is refused (a typo like ``[1-99999999]`` would eat memory)."""

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    """A hostlist that is not well formed; the message quotes it and says what is wrong."""


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    items, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"hostlist {text!r}: nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"hostlist {text!r}: ']' without '['")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"hostlist {text!r}: '[' without ']'")
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def _ranges(body: str, text: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise HostlistError(f"hostlist {text!r}: {part!r} in brackets is not N or N-M")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"hostlist {text!r}: range {part!r} runs backwards")
        if len(out) + hi - lo + 1 > MAX_HOSTS:
            raise HostlistError(f"hostlist {text!r} names more than {MAX_HOSTS} hosts")
        width = len(lo_s)
        out.extend(str(v).zfill(width) for v in range(lo, hi + 1))
    return out


def expand(text: str) -> list[str]:
    """Host names of a Slurm hostlist, in Slurm's order, duplicates kept out.

    Args:
        text: e.g. ``"node[01-04,07],login1"``; ``""`` or ``"(null)"`` (no nodes yet) gives ``[]``.

    Returns:
        ``["node01", "node02", "node03", "node04", "node07", "login1"]``.

    Raises:
        HostlistError: unbalanced or nested brackets, a bracket item that is not ``N``/``N-M``, a
            backwards range, or more than :data:`MAX_HOSTS` names.
    """
    text = (text or "").strip()
    if text in ("", "(null)", "None"):
        return []
    seen: dict[str, None] = {}
    for item in _split_top(text):
        pieces = re.split(r"(\[[^\]]*\])", item)
        choices = [_ranges(p[1:-1], text) if p.startswith("[") else [p] for p in pieces if p]
        n = 1
        for c in choices:
            n *= len(c)
        if len(seen) + n > MAX_HOSTS:
            raise HostlistError(f"hostlist {text!r} names more than {MAX_HOSTS} hosts")
        for combo in itertools.product(*choices):
            seen["".join(combo)] = None
    return list(seen)
