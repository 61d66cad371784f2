"""memoryd.text.timeexpr: time expressions of a query read as UTC windows, against literal dates.

The reference is Wednesday 2026-06-10 15:00 UTC unless a test says otherwise;
every expected window is written out by hand from a calendar.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memoryd.text.timeexpr import parse_time

REF = datetime(2026, 6, 10, 15, 0, tzinfo=UTC)  # a Wednesday


def d(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("query", "phrase", "start", "end"), [
    ("what did I say yesterday", "yesterday", "2026-06-09", "2026-06-10"),
    ("anything today?", "today", "2026-06-10", "2026-06-11"),
    ("what happened last night", "last night", "2026-06-09", "2026-06-10"),
    ("what did we decide last week", "last week", "2026-06-01", "2026-06-08"),
    ("plans for this week", "this week", "2026-06-08", "2026-06-15"),
    ("the bug from last month", "last month", "2026-05-01", "2026-06-01"),
    ("what changed this year", "this year", "2026-01-01", "2027-01-01"),
    ("what did we ship last year", "last year", "2025-01-01", "2026-01-01"),
    ("the call 3 days ago", "3 days ago", "2026-06-07", "2026-06-08"),
    ("the call three days ago", "three days ago", "2026-06-07", "2026-06-08"),
    ("what we said a week ago", "a week ago", "2026-05-31", "2026-06-07"),
    ("the outage two months ago", "two months ago", "2026-04-01", "2026-05-01"),
    ("the move 2 years ago", "2 years ago", "2024-01-01", "2025-01-01"),
    ("what did Maya cook in May", "in May", "2026-05-01", "2026-06-01"),
    ("the trip in December", "in December", "2025-12-01", "2026-01-01"),  # December 2026 has not begun
    ("the offsite in June", "in June", "2026-06-01", "2026-07-01"),  # the current month counts
    ("the release in May 2024", "in May 2024", "2024-05-01", "2024-06-01"),
    ("the release during Sept. 2023", "during Sept. 2023", "2023-09-01", "2023-10-01"),
    ("a steakhouse for March 2025?", "March 2025", "2025-03-01", "2025-04-01"),
    ("how far could she swim in late March", "in late March", "2026-03-21", "2026-04-01"),
    ("shifts in early November", "in early November", "2025-11-01", "2025-11-11"),
    ("what broke in mid-April", "in mid-April", "2026-04-11", "2026-04-21"),
    ("what did we build in 2025", "in 2025", "2025-01-01", "2026-01-01"),
    ("what was the plan before March", "before March", None, "2026-03-01"),
    ("what happened after May", "after May", "2026-06-01", None),
    ("since January", "since January", "2026-01-01", None),
    ("until June 2025", "until June 2025", None, "2025-07-01"),
    ("before 2024", "before 2024", None, "2024-01-01"),
])
def test_expression_reads_as_window(query: str, phrase: str, start: str | None, end: str | None) -> None:
    windows = parse_time(query, REF)
    assert len(windows) == 1, windows
    (w,) = windows
    assert w.phrase.lower() == phrase.lower()
    assert w.start == (d(start) if start else None)
    assert w.end == (d(end) if end else None)


@pytest.mark.parametrize("query", [
    "How may I help with the deploy?",  # the modal verb is not the month
    "which port does the staging database listen on",
    "what happened before the move",  # an event, not a time this reader knows
    "the 2024 roadmap doc",  # a year without a preposition names a thing as often as a time
    "ran 3 laps",
])
def test_no_time_expression(query: str) -> None:
    assert parse_time(query, REF) == []


def test_two_expressions_in_order() -> None:
    windows = parse_time("what changed between last week and yesterday", REF)
    assert [(w.phrase, w.start, w.end) for w in windows] == [
        ("last week", d("2026-06-01"), d("2026-06-08")),
        ("yesterday", d("2026-06-09"), d("2026-06-10")),
    ]


def test_reference_in_another_zone_is_read_in_utc() -> None:
    # 2026-01-01 01:30 at +02:00 is still 2025-12-31 in UTC: "yesterday" is 2025-12-30.
    ref = datetime(2026, 1, 1, 1, 30, tzinfo=timezone(timedelta(hours=2)))
    (w,) = parse_time("yesterday", ref)
    assert (w.start, w.end) == (d("2025-12-30"), d("2025-12-31"))


def test_month_ago_crosses_the_year() -> None:
    (w,) = parse_time("two months ago", datetime(2026, 1, 15, tzinfo=UTC))
    assert (w.start, w.end) == (d("2025-11-01"), d("2025-12-01"))


def test_window_contains_and_describe() -> None:
    (w,) = parse_time("in May", REF)
    assert w.describe() == "2026-05-01..2026-06-01"
    assert w.contains(d("2026-05-01")) and w.contains(d("2026-05-31T23:59:59"))
    assert not w.contains(d("2026-06-01")) and not w.contains(d("2026-04-30T23:59:59"))
    (open_end,) = parse_time("after May", REF)
    assert open_end.describe() == "2026-06-01.."
    assert open_end.contains(d("2030-01-01")) and not open_end.contains(d("2026-05-31"))
