"""Time in one place: UTC now, and the RFC 3339 form memoryd writes and reads.

Logic takes ``now`` as an argument; only the edges (handlers, the scheduler)
call :func:`utcnow`, so tests drive time with freezegun.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(UTC)


def epoch() -> float:
    """Seconds since the epoch (the queue's time base)."""
    return time.time()


def to_rfc3339(dt: datetime) -> str:
    """``2026-11-29T18:57:19.000000Z``: UTC, microseconds, ``Z`` suffix.

    The fixed width makes stored timestamps compare correctly as strings.
    """
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    # isoformat pads the year to four digits; strftime's %Y writes year 999 as "999".
    return dt.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_rfc3339(text: str) -> datetime:
    """Parse any RFC 3339 timestamp (``Z`` or an offset) to aware UTC.

    Raises ValueError for anything else, including a timestamp with no zone.
    """
    if not isinstance(text, str):
        raise ValueError("expected an RFC 3339 string")
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    dt = datetime.fromisoformat(s.replace(" ", "T", 1) if "T" not in s and " " in s else s)
    if dt.tzinfo is None:
        raise ValueError("timestamp has no time zone; add Z or an offset")
    return dt.astimezone(UTC)


def normalize_rfc3339(text: str) -> str:
    """Any RFC 3339 input in memoryd's stored form."""
    return to_rfc3339(parse_rfc3339(text))


def rfc3339_from_epoch(epoch_s: float) -> str:
    """Epoch seconds in memoryd's stored timestamp form."""
    return to_rfc3339(datetime.fromtimestamp(epoch_s, UTC))
