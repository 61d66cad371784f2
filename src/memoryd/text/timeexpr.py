"""Time expressions in a search query, read as UTC windows relative to a reference time.

``memory.search`` boosts rows whose ``occurred_at`` (or ``recorded_at`` when it
is null) falls inside a window read from the query (store/search.py). This
module only reads the text: no model, no I/O, a handful of regular
expressions, so it costs microseconds per query.

What it understands (case-insensitive; the reference is the request's
``time_ref``, else ``as_of``, else the server clock):

* ``today``, ``yesterday``, ``last night`` (yesterday);
* ``this week|month|year`` and ``last week|month|year`` (calendar weeks from
  Monday, calendar months and years);
* ``N days|weeks|months|years ago`` (N a number, ``a``/``an`` or one to
  twelve in words): that day, the 7 days around that day, that calendar
  month, that calendar year;
* ``in|during [early|mid|late] MONTH [YEAR]`` and ``MONTH YEAR``: the month
  (or its first, middle or last ten days); a month without a year is the most
  recent one that has begun by the reference (questions are mostly asked
  about the past);
* ``in|during YEAR``: the year;
* ``before|after|since|until MONTH [YEAR]`` or ``YEAR``: open-ended windows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")
_MONTH = "|".join(MONTHS) + "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
                 "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_NUMBER = r"\d{1,3}|" + "|".join(_NUMBER_WORDS)
_YEAR = r"(?:19|20)\d{2}"

#: One alternation, longest forms first, so "in late May 2024" is one expression, not three.
_PATTERN = re.compile(
    r"\b(?:"
    rf"(?P<bound>before|after|since|until)\s+(?:(?P<b_month>{_MONTH})\b\.?(?:\s+(?P<b_year>{_YEAR}))?"
    rf"|(?P<b_year_only>{_YEAR}))"
    rf"|(?:(?:in|during)\s+)?(?:(?P<part>early|mid|late)[\s-]+)?(?P<month>{_MONTH})\b\.?\s+(?P<year>{_YEAR})"
    rf"|(?:in|during)\s+(?:(?P<part2>early|mid|late)[\s-]+)?(?P<month2>{_MONTH})\b"
    rf"|(?:in|during)\s+(?P<year_only>{_YEAR})"
    rf"|(?P<n>{_NUMBER})\s+(?P<unit>day|week|month|year)s?\s+ago"
    r"|(?P<which>this|last)\s+(?P<span>week|month|year)"
    r"|(?P<day>today|yesterday|last\s+night)"
    r")\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class TimeWindow:
    """A span of time named in a query: ``start`` inclusive, ``end`` exclusive; None is open."""

    phrase: str
    start: datetime | None
    end: datetime | None

    def contains(self, when: datetime) -> bool:
        """Whether ``when`` falls inside the window."""
        return (self.start is None or when >= self.start) and (self.end is None or when < self.end)

    def describe(self) -> str:
        """``2026-05-01..2026-06-01`` (an open end is left empty)."""
        def day(dt: datetime | None) -> str:
            if dt is None:
                return ""
            return dt.date().isoformat() if dt.time() == datetime.min.time() else dt.isoformat()
        return f"{day(self.start)}..{day(self.end)}"


def _month_number(name: str) -> int:
    key = name.lower().rstrip(".")[:3]
    return next(i for i, m in enumerate(MONTHS, start=1) if m.startswith(key))


def _month_start(year: int, month: int) -> datetime:
    # Months past December roll into the next year; before January into the last.
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    return datetime(year, month, 1, tzinfo=UTC)


def _month_window(year: int, month: int, part: str | None) -> tuple[datetime, datetime]:
    start, end = _month_start(year, month), _month_start(year, month + 1)
    if part:
        part = part.lower()
        if part == "early":
            end = start + timedelta(days=10)
        elif part == "mid":
            start, end = start + timedelta(days=10), start + timedelta(days=20)
        else:
            start = start + timedelta(days=20)
    return start, end


def _recent_month_year(month: int, ref: datetime) -> int:
    """The year of the most recent ``month`` that has begun by ``ref``."""
    return ref.year if month <= ref.month else ref.year - 1


def _window(m: re.Match[str], ref: datetime) -> tuple[datetime | None, datetime | None]:
    today = datetime(ref.year, ref.month, ref.day, tzinfo=UTC)
    g = m.groupdict()
    if g["bound"]:
        if g["b_year_only"]:
            first, after = _month_start(int(g["b_year_only"]), 1), _month_start(int(g["b_year_only"]) + 1, 1)
        else:
            month = _month_number(g["b_month"])
            year = int(g["b_year"]) if g["b_year"] else _recent_month_year(month, ref)
            first, after = _month_start(year, month), _month_start(year, month + 1)
        bound = g["bound"].lower()
        if bound in ("before", "until"):
            return None, first if bound == "before" else after
        return (after, None) if bound == "after" else (first, None)
    if g["month"] or g["month2"]:
        month = _month_number(g["month"] or g["month2"])
        year = int(g["year"]) if g["year"] else _recent_month_year(month, ref)
        return _month_window(year, month, g["part"] or g["part2"])
    if g["year_only"]:
        year = int(g["year_only"])
        return _month_start(year, 1), _month_start(year + 1, 1)
    if g["n"]:
        word = g["n"].lower()
        n = _NUMBER_WORDS[word] if word in _NUMBER_WORDS else int(word)
        unit = g["unit"].lower()
        if unit == "day":
            day = today - timedelta(days=n)
            return day, day + timedelta(days=1)
        if unit == "week":
            centre = today - timedelta(weeks=n)
            return centre - timedelta(days=3), centre + timedelta(days=4)
        if unit == "month":
            return _month_start(ref.year, ref.month - n), _month_start(ref.year, ref.month - n + 1)
        return _month_start(ref.year - n, 1), _month_start(ref.year - n + 1, 1)
    if g["which"]:
        back = 1 if g["which"].lower() == "last" else 0
        span = g["span"].lower()
        if span == "week":
            monday = today - timedelta(days=today.weekday()) - timedelta(weeks=back)
            return monday, monday + timedelta(weeks=1)
        if span == "month":
            return _month_start(ref.year, ref.month - back), _month_start(ref.year, ref.month - back + 1)
        return _month_start(ref.year - back, 1), _month_start(ref.year - back + 1, 1)
    day = today if g["day"].lower() == "today" else today - timedelta(days=1)
    return day, day + timedelta(days=1)


def parse_time(query: str, ref: datetime) -> list[TimeWindow]:
    """Every time expression of ``query`` as a window relative to ``ref`` (aware, any zone).

    The windows are in UTC, in the order the expressions occur. An expression
    this module does not know ("before the move") yields nothing.
    """
    ref = ref.astimezone(UTC)
    out = []
    for m in _PATTERN.finditer(query):
        start, end = _window(m, ref)
        out.append(TimeWindow(" ".join(m.group(0).split()), start, end))
    return out
