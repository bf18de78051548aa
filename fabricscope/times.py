"""Times for people: the one parser and the one formatter every command uses.

Parsing (:func:`parse_time`, :func:`parse_since`) takes what an operator types:

- ``now``;
- ISO 8601: ``2026-12-01T18:29:00Z``, ``2026-12-01 18:29:00`` (no zone: UTC, or local time
  with ``tz="local"``), ``2026-12-01T19:29:00+01:00``, a date ``2026-12-01`` (midnight);
- relative to now: ``-5m``, ``5m ago``, ``10 min ago``, ``now-2h``, ``1 hour ago``, ``90s``;
- a bare integer: ns since the epoch (what scripts and ``--ns`` output hand back).

Formatting (:func:`format_time`, :func:`format_span`, :func:`format_window`) prints ISO 8601
in UTC (``2026-12-01T18:28:42Z``) or local time with its offset (``tz="local"``), durations as
``30 s`` / ``5 min`` / ``1 h 30 min``, and a window as its start, end and span.

:func:`format_columns` turns a query result's time columns into ISO strings: ClickHouse hands
``DateTime`` over Arrow as plain ``uint32`` seconds, so the column types come from the result's
``DESCRIBE`` (the caller passes them); ``DateTime64`` and ``Date`` arrive as Arrow timestamps/dates.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

import typer

NS = 1_000_000_000
TZ_CHOICES = ("utc", "local")

_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}
# "5m", "10 min", "1.5 hours", "90" (seconds)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
_NS_INSTANT = 1e15  # seconds back no one means (31 million years); as ns since the epoch: 1970-01-12
_EXAMPLES = "now, -5m, '10 min ago', 2026-12-01T18:29:00Z or ns since the epoch"


class TimeError(ValueError):
    """A time or duration an operator typed that means nothing; the message shows what would."""


def _check_tz(tz: str) -> str:
    if tz not in TZ_CHOICES:
        raise TimeError(f"--tz {tz!r}: choose utc or local")
    return tz


def parse_duration_s(text: str) -> float:
    """Seconds in a duration: ``90d``, ``12h``, ``30m``, ``45s``, ``2w``, ``10 min``, ``1.5 hours``, ``90``.

    Raises:
        TimeError: ``text`` is not a duration; the message lists the forms.
    """
    m = _DURATION.match(text.lower())
    if not m or m.group(2) not in {"", *_UNITS}:
        raise TimeError(f"{text!r} is not a duration; write 90d, 12h, 30m, 45s, 2w or '10 min'")
    return float(m.group(1)) * _UNITS.get(m.group(2), 1)


def _relative_s(text: str) -> float | None:
    """Seconds back for ``-5m``, ``5m ago``, ``now-5m``, ``now - 10 min``; None when not relative."""
    t = text.strip().lower()
    if t.startswith("now"):
        rest = t[3:].strip()
        if not rest:
            return 0.0
        if not rest.startswith("-"):
            return None
        t = rest
    if t.startswith("-"):
        return parse_duration_s(t[1:])
    if t.endswith(" ago") or t.endswith("ago"):
        return parse_duration_s(t.removesuffix("ago"))
    return None


def parse_time(text: str, tz: str = "utc", now_ns: int | None = None) -> int:
    """An instant as ns since the epoch.

    Args:
        text: see the module docstring (``now``, ISO 8601, ``-5m``, ``10 min ago``, an integer of ns).
        tz: how to read an ISO time without a zone: ``utc`` or ``local``.
        now_ns: "now" for relative times (default: the wall clock).

    Raises:
        TimeError: none of the forms; the message shows them.
    """
    _check_tz(tz)
    now_ns = time.time_ns() if now_ns is None else now_ns
    s = text.strip()
    if not s:
        raise TimeError(f"an empty time; give one of {_EXAMPLES}")
    if s.lstrip("-").isdigit() and not s.startswith("-"):
        return int(s)
    try:
        back = _relative_s(s)
    except TimeError:
        raise TimeError(f"{text!r} is not a time; give one of {_EXAMPLES}") from None
    if back is not None:
        return now_ns - int(back * NS)
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise TimeError(f"{text!r} is not a time; give one of {_EXAMPLES}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC) if tz == "utc" else dt.astimezone()
    return int(dt.timestamp()) * NS + dt.microsecond * 1000


def parse_since(text: str, tz: str = "utc", now_ns: int | None = None) -> int:
    """Whole seconds back from now for ``--since``: a duration (``1h``, ``30d``, ``10 min``), a relative time
    (``-1h``, ``1h ago``) or an instant (ISO 8601, or an integer of at least 10**15: ns since the epoch):
    the seconds from it to now (at least 1). A smaller bare integer is seconds back.

    Raises:
        TimeError: none of these, or an instant in the future.
    """
    now_ns = time.time_ns() if now_ns is None else now_ns
    try:
        seconds = parse_duration_s(text)
        if seconds < _NS_INSTANT:  # a bare integer this large is an instant in ns (what --ns prints)
            return max(1, round(seconds))
    except TimeError:
        pass
    try:
        at = parse_time(text, tz, now_ns)
    except TimeError:
        raise TimeError(f"--since {text!r}: give a duration (1h, 30d, '10 min'), a relative time (-1h, "
                        "'2 hours ago') or a time (2026-12-01T18:00:00Z)") from None
    if at > now_ns:
        raise TimeError(f"--since {text!r} is in the future ({format_time(at, tz)})")
    return max(1, (now_ns - at) // NS)


def zone(tz: str) -> Any:  # noqa: ANN401 - a tzinfo
    return UTC if _check_tz(tz) == "utc" else datetime.now().astimezone().tzinfo


def _iso(dt: datetime, tz: str) -> str:
    dt = dt.astimezone(zone(tz))
    text = dt.isoformat(timespec="milliseconds" if dt.microsecond else "seconds")
    return text.replace("+00:00", "Z") if tz == "utc" else text


def format_time(ns: int, tz: str = "utc") -> str:
    """ISO 8601 of an instant in ns: ``2026-12-01T18:28:42Z`` (milliseconds when not whole seconds);
    local time with its offset for ``tz="local"``."""
    return _iso(datetime.fromtimestamp(ns // NS, UTC) + timedelta(microseconds=(ns % NS) // 1000), tz)


def format_clock(ns: int, tz: str = "utc") -> str:
    """The time of day of an instant, ``18:28:42`` (for feeds whose date is obvious)."""
    return datetime.fromtimestamp(ns / NS, zone(tz)).strftime("%H:%M:%S")


def format_span(ns: int) -> str:
    """A duration for people: ``250 ms``, ``30 s``, ``5 min``, ``1 h 30 min``, ``2 d 3 h``."""
    s = ns / NS
    if s < 1:
        return f"{ns / 1e6:.0f} ms"
    if s < 60:
        return f"{s:.0f} s" if s == int(s) or s >= 10 else f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m} min" + (f" {sec} s" if sec else "")
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h" + (f" {m} min" if m else "")
    d, h = divmod(h, 24)
    return f"{d} d" + (f" {h} h" if h else "")


def format_window(start_ns: int, end_ns: int, tz: str = "utc") -> str:
    """A window as people read it: ``2026-12-01T18:28:30Z – 18:29:00Z (30 s)``."""
    start, end = format_time(start_ns, tz), format_time(end_ns, tz)
    if start[:10] == end[:10]:
        end = end[11:]
    return f"{start} – {end} ({format_span(end_ns - start_ns)})"


def _base_type(ch_type: str) -> str:
    t = ch_type
    for wrap in ("LowCardinality(", "Nullable("):
        while t.startswith(wrap):
            t = t[len(wrap):-1]
    return t


def is_datetime_type(ch_type: str) -> bool:
    """Whether a ClickHouse type (``Nullable(DateTime('UTC'))``, ``Array(DateTime)`` ...) holds DateTime or
    DateTime64 values."""
    t = _base_type(ch_type)
    while t.startswith("Array("):
        t = _base_type(t[len("Array("):-1])
    return t.startswith("DateTime")


def _cell(v: Any, seconds: bool, tz: str) -> Any:  # noqa: ANN401
    if v is None:
        return None
    if isinstance(v, list):
        return [_cell(x, seconds, tz) for x in v]
    if isinstance(v, datetime):
        return _iso(v if v.tzinfo else v.replace(tzinfo=UTC), tz)
    if isinstance(v, date):
        return v.isoformat()
    if seconds and isinstance(v, int):
        return format_time(v * NS, tz)
    return v


def format_columns(columns: Mapping[str, list[Any]], ch_types: Mapping[str, str] | None = None,
                   tz: str = "utc") -> dict[str, list[Any]]:
    """``columns`` (name -> Python values of a query result) with every time column as ISO 8601 strings.

    Args:
        columns: e.g. ``table.to_pydict()``; Arrow timestamps arrive as ``datetime``, dates as ``date``.
        ch_types: name -> ClickHouse type (from ``DESCRIBE``); a ``DateTime`` column's integers are
            seconds since the epoch and become ISO strings. Columns not named are left alone.
        tz: ``utc`` or ``local``.

    Raises:
        TimeError: ``tz`` is neither utc nor local.
    """
    _check_tz(tz)
    types = ch_types or {}
    return {name: [_cell(v, is_datetime_type(types.get(name, "")), tz) for v in values]
            for name, values in columns.items()}


def tz_option() -> Any:  # noqa: ANN401 - a typer OptionInfo
    """The ``--tz utc|local`` option every command that prints or reads times takes."""
    return typer.Option("utc", "--tz", help="print (and read zone-less) times in utc or local time",
                        callback=lambda v: _typer_tz(v))


def _typer_tz(v: str) -> str:
    try:
        return _check_tz(v)
    except TimeError as e:
        raise typer.BadParameter(str(e)) from None


def typer_time(text: str, tz: str = "utc", option: str = "--at") -> int:
    """:func:`parse_time` for a command: a bad value is a usage error naming ``option``.

    Raises:
        typer.BadParameter: the text is not a time.
    """
    try:
        return parse_time(text, tz)
    except TimeError as e:
        raise typer.BadParameter(str(e), param_hint=f"'{option}'") from None


def typer_since(text: str, tz: str = "utc", option: str = "--since") -> int:
    """:func:`parse_since` for a command: a bad value is a usage error naming ``option``.

    Raises:
        typer.BadParameter: the text is neither a duration nor a time.
    """
    try:
        return parse_since(text, tz)
    except TimeError as e:
        raise typer.BadParameter(str(e), param_hint=f"'{option}'") from None
