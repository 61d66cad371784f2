"""Decay and retention on a real clock window, observed over the socket and in the database.

The intervals are cut from hours and days to seconds through the daemon's own
configuration; nothing calls a pass function or moves a clock. The expected
times come from the documented rules and the values set here:

* docs/protocol.md: ``ttl_s`` sets ``expires_at = recorded_at + ttl_s``; the
  retention sweep archives such rows, and session rows after ``session_ttl_s``;
* docs/operations.md: archived rows are hard-deleted after ``archive_window_s``;
  ``importance = min(1, importance_raw × 0.5^(idle_days / decay_half_life_days)
  × (1 + 0.1 × ln(1 + access_count)))``, idle counted from the last read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from memoryd.service.client import ClientError
from tests.e2e.conftest import E2EDaemon
from tests.e2e.helpers import get

pytestmark = pytest.mark.slow

TTL_S = 2.0
SESSION_TTL_S = 3.0
ARCHIVE_WINDOW_S = 3.0
HALF_LIFE_S = 4.0
CLOCK_CONFIG: dict[str, Any] = {
    "tick_interval_s": 0.5, "retention_interval_s": 1.0, "decay_interval_s": 1.0,
    "session_ttl_s": SESSION_TTL_S, "archive_window_s": ARCHIVE_WINDOW_S,
    "decay_half_life_days": HALF_LIFE_S / 86400.0,
}
#: RFC 3339 stamps carry microseconds; the client's clock and the daemon's are the same clock.
SLACK_S = 0.01
#: A hang guard for the whole window on a loaded machine, never a speed claim.
WINDOW_TIMEOUT_S = 90.0
#: How late the decay pass may see the row: it runs every second, but a loaded machine can
#: hold the daemon back for a few. Halving later than this means the half-life is wrong.
DECAY_LAG_S = 10.0


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def _status_or_gone(d: E2EDaemon, memory_id: str) -> dict[str, Any] | None:
    try:
        return get(d, memory_id)
    except ClientError as exc:
        assert exc.code == 1002, exc
        return None


@dataclass
class Seen:
    """One memory's first sightings: archived (with the row as read then) and gone."""

    archived_at: datetime | None = None
    archived_row: dict[str, Any] | None = None
    gone_at: datetime | None = None

    def observe(self, row: dict[str, Any] | None, at: datetime) -> None:
        if row is None:
            self.gone_at = self.gone_at or at
        elif row["status"] == "archived" and self.archived_at is None:
            self.archived_at, self.archived_row = at, row
        else:
            assert row["status"] in ("active", "archived"), row


def _poll(until: Callable[[], bool], step: Callable[[], None]) -> None:
    deadline = time.monotonic() + WINDOW_TIMEOUT_S
    while not until():
        assert time.monotonic() < deadline, "the clock window did not close in time"
        step()
        time.sleep(0.1)


def test_retention_archives_then_purges_ttl_and_session_rows_and_importance_decays_on_the_clock(
        start_e2e: Callable[..., E2EDaemon]) -> None:
    d = start_e2e("clock", config=CLOCK_CONFIG)
    ttl = d.write("The preview deploy pr-4812.preview.acme.dev is up for review", agent_id="e2e-clock",
                  ttl_s=TTL_S)["id"]
    session = d.write("Bisecting the parser leak; the suspect is commit 3f2a9c1", scope="session",
                      session_id="e2e-clock-session")["id"]
    idle = d.write("The parser lives in src/parse.py", agent_id="e2e-clock")["id"]
    read = d.write("The lexer lives in src/lex.py", agent_id="e2e-clock")["id"]
    for _ in range(5):  # reads reinforce: access_count 5, idle time counted from the last read
        get(d, read)

    ttl_row, session_row = get(d, ttl), get(d, session)
    assert _at(ttl_row["expires_at"]) == _at(ttl_row["recorded_at"]) + timedelta(seconds=TTL_S)
    idle_recorded = _at(d.scalar("SELECT recorded_at FROM memories WHERE id = ?", (idle,)))

    seen = {ttl: Seen(), session: Seen()}
    importance: list[tuple[datetime, float]] = []  # the idle row, read from the file (a get is a read)

    def step() -> None:
        at = datetime.now().astimezone()
        for memory_id, record in seen.items():
            record.observe(_status_or_gone(d, memory_id), at)
        importance.append((datetime.now().astimezone(), float(
            d.scalar("SELECT importance FROM memories WHERE id = ?", (idle,)))))

    _poll(lambda: all(r.gone_at for r in seen.values()) and bool(importance) and importance[-1][1] <= 0.25,
          step)

    # The ttl row: archived once expires_at had passed, purged once the archive window had.
    expires = _at(ttl_row["expires_at"])
    record = seen[ttl]
    assert record.archived_at is not None and record.archived_row is not None, "never seen archived"
    retired = _at(record.archived_row["retired_at"])
    assert retired >= expires - timedelta(seconds=SLACK_S)
    assert record.archived_row["content"] == ttl_row["content"]  # archived keeps the text until purged
    assert record.gone_at is not None and record.gone_at >= retired + timedelta(seconds=ARCHIVE_WINDOW_S)
    # The session row: the same two steps, from recorded_at + session_ttl_s.
    record = seen[session]
    assert record.archived_at is not None and record.archived_row is not None, "never seen archived"
    retired = _at(record.archived_row["retired_at"])
    session_due = _at(session_row["recorded_at"]) + timedelta(seconds=SESSION_TTL_S)
    assert retired >= session_due - timedelta(seconds=SLACK_S)
    assert record.gone_at is not None and record.gone_at >= retired + timedelta(seconds=ARCHIVE_WINDOW_S)
    for memory_id in (ttl, session):
        assert d.scalar("SELECT count(*) FROM memories WHERE id = ?", (memory_id,)) == 0
        actions = [r[0] for r in d.query(
            "SELECT action FROM audit_events WHERE memory_id = ? AND actor = 'pass:retention' ORDER BY seq",
            (memory_id,))]
        assert actions == ["memory.expire", "memory.purge"]

    # The idle row halved no sooner than one half-life of real time (nor much later), and never
    # fell faster than the clock allows; the read row, decayed at the same instant, kept more.
    halved_at = next(at for at, value in importance if value <= 0.25)
    assert halved_at - idle_recorded >= timedelta(seconds=HALF_LIFE_S - SLACK_S)
    assert halved_at - idle_recorded <= timedelta(seconds=HALF_LIFE_S + DECAY_LAG_S)
    for at, value in importance:
        elapsed = (at - idle_recorded).total_seconds()
        assert value >= 0.5 * 0.5 ** (elapsed / HALF_LIFE_S) - 1e-6, (elapsed, value)
    values = [value for _, value in importance]
    assert values == sorted(values, reverse=True), "importance went up without a read"
    # Read from the file: a memory.get would be a read, which resets the idle time.
    assert d.query("SELECT status, importance_raw FROM memories WHERE id = ?", (idle,)) == [("active", 0.5)]
    idle_now, read_now, reads = d.query(
        "SELECT a.importance, b.importance, b.access_count FROM memories a, memories b "
        "WHERE a.id = ? AND b.id = ?", (idle, read))[0]
    assert reads >= 5
    assert read_now > idle_now
    assert d.scalar("SELECT count(*) FROM audit_events WHERE action = 'memory.decay'") >= 1
