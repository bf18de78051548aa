"""The one time parser and formatter (fabricscope.times): hand-computed instants and spans."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fabricscope.times import (
    NS,
    TimeError,
    format_columns,
    format_span,
    format_time,
    format_window,
    parse_since,
    parse_time,
)

NOW = 1_796_149_740 * NS  # 2026-12-01T18:29:00Z


def test_the_instant_used_here():
    assert datetime.fromtimestamp(NOW // NS, UTC).isoformat() == "2026-12-01T18:29:00+00:00"


@pytest.mark.parametrize(("text", "expect"), [
    ("now", NOW),
    ("NOW", NOW),
    ("-5m", NOW - 300 * NS),
    ("5m ago", NOW - 300 * NS),
    ("10 min ago", NOW - 600 * NS),
    ("2 hours ago", NOW - 7200 * NS),
    ("now-1h", NOW - 3600 * NS),
    ("now - 30 s", NOW - 30 * NS),
    ("-1.5h", NOW - 5400 * NS),
    ("2026-12-01T18:29:00Z", NOW),
    ("2026-12-01 18:29:00", NOW),                # no zone: UTC
    ("2026-12-01T19:29:00+01:00", NOW),
    ("2026-12-01T18:29:00.25Z", NOW + NS // 4),
    ("2026-12-01", NOW - (18 * 3600 + 29 * 60) * NS),
    ("1796149740000000000", NOW),                # ns, as --ns prints
])
def test_parse_time(text, expect):
    assert parse_time(text, now_ns=NOW) == expect


@pytest.mark.parametrize("text", ["", "yesterday-ish", "5 parsecs ago", "-5x", "2026-13-01T00:00:00Z", "now+5m"])
def test_parse_time_refuses_with_the_forms(text):
    with pytest.raises(TimeError, match="now, -5m, '10 min ago'"):
        parse_time(text, now_ns=NOW)


def test_local_reads_zone_less_times_in_the_local_zone(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30, no DST
    time.tzset()
    try:
        assert parse_time("2026-12-01 23:59:00", "local", NOW) == NOW
        assert format_time(NOW, "local") == "2026-12-01T23:59:00+05:30"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize(("text", "seconds"), [
    ("1h", 3600), ("30d", 30 * 86400), ("10 min", 600), ("90", 90), ("-2h", 7200), ("2 hours ago", 7200),
    ("2026-12-01T18:00:00Z", 29 * 60), ("1796149680000000000", 60),
])
def test_parse_since(text, seconds):
    assert parse_since(text, now_ns=NOW) == seconds


def test_since_in_the_future_is_refused():
    with pytest.raises(TimeError, match="in the future"):
        parse_since("2026-12-02T00:00:00Z", now_ns=NOW)
    with pytest.raises(TimeError, match="give a duration"):
        parse_since("5x", now_ns=NOW)


def test_format_time_and_window():
    assert format_time(NOW) == "2026-12-01T18:29:00Z"
    assert format_time(NOW + 5 * NS // 10) == "2026-12-01T18:29:00.500Z"
    assert format_window(NOW - 20 * NS, NOW) == "2026-12-01T18:28:40Z – 18:29:00Z (20 s)"
    assert format_window(NOW, NOW + 6 * 3600 * NS) == "2026-12-01T18:29:00Z – 2026-12-02T00:29:00Z (6 h)"


@pytest.mark.parametrize(("ns", "text"), [
    (250_000_000, "250 ms"), (1_500_000_000, "1.5 s"), (20 * NS, "20 s"), (300 * NS, "5 min"),
    (330 * NS, "5 min 30 s"), (5400 * NS, "1 h 30 min"), (3600 * NS, "1 h"), (30 * 86400 * NS, "30 d"),
    (27 * 3600 * NS, "1 d 3 h"),
])
def test_format_span(ns, text):
    assert format_span(ns) == text


def test_format_columns_uses_the_clickhouse_types():
    assert format_columns({"a": [[NOW // NS], []]}, {"a": "Array(Nullable(DateTime))"}) == {
        "a": [["2026-12-01T18:29:00Z"], []]}
    cols = {"t": [NOW // NS, None], "n": [NOW // NS, 1],
            "t64": [datetime(2026, 12, 1, 18, 29, tzinfo=UTC), None]}
    out = format_columns(cols, {"t": "Nullable(DateTime('UTC'))", "n": "UInt32"})
    assert out == {"t": ["2026-12-01T18:29:00Z", None], "n": [NOW // NS, 1], "t64": ["2026-12-01T18:29:00Z", None]}
    with pytest.raises(TimeError, match="utc or local"):
        format_columns(cols, {}, "mars")
