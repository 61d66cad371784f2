"""A conversation turn's neighbours in its session: the turn said just before it, and just after.

A turn is a ``conversation`` memory with a ``session_id``. Its session is every
turn of the same scope, owner and ``session_id``, in the order they were said:
``occurred_at`` when the turn has one (else ``recorded_at``), then ``seq``. The
embed pass encodes a turn together with the turn before it (passes/embed.py),
so "Yes, it went great" is found by what it answers.

Only turns that still hold their text count (statuses the embed pass embeds),
and only within CONTEXT_WINDOW of the turn: a session resumed the next day
starts without context, and the lookup walks the time index from the turn
(a short range scan that stops at the first match) instead of every row the
owner has.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NamedTuple

from sqlalchemy import Connection, TextClause, text

from memoryd.clock import parse_rfc3339, to_rfc3339

#: The kind whose memories are turns of a conversation.
TURN_KIND = "conversation"
#: Statuses whose rows hold text a neighbour may read as context (the embed pass's EMBEDDABLE).
CONTEXT_STATUSES = ("active", "candidate", "superseded", "archived")
#: How far apart in time two turns may be and still be neighbours.
CONTEXT_WINDOW = timedelta(days=1)

#: The time index each clock is walked by.
_INDEX = {"occurred_at": "ix_memories_occurred_at", "recorded_at": "ix_memories_recorded_at"}


def _statement(conn: Connection, clock: str, before: bool) -> TextClause:
    """The neighbour lookup, one constant statement per clock and direction (values are bound).

    Text, not Core: SQLAlchemy renders no table hint for SQLite, and without
    ``INDEXED BY`` SQLite picks the (scope, owner) index and visits every row
    the owner has (18 ms a lookup at 20,000 turns in one project; 0.2 ms by the
    time index).
    """
    cmp, edge_cmp, order = ("<", ">=", "DESC") if before else (">", "<=", "ASC")
    hint = f" INDEXED BY {_INDEX[clock]}" if conn.dialect.name == "sqlite" else ""
    return text(
        f"SELECT id, seq, content, content_hash FROM memories{hint} "
        f"WHERE {clock} {edge_cmp} :edge AND {clock} {cmp}= :at AND ({clock} {cmp} :at OR seq {cmp} :seq) "
        "AND scope = :scope AND owner = :owner AND session_id = :session_id AND kind = :kind "
        "AND status IN (:s0, :s1, :s2, :s3) AND content IS NOT NULL "
        f"ORDER BY {clock} {order}, seq {order} LIMIT 1")


class Neighbour(NamedTuple):
    """A neighbouring turn: enough to embed it as context, to re-queue it, and to notice a change."""

    id: str
    seq: int
    content: str
    content_hash: str


def is_turn(row: Any) -> bool:
    """Whether a memory row is a conversation turn with a session (it has neighbours to look for)."""
    return bool(row.kind == TURN_KIND and row.session_id)


def previous(conn: Connection, row: Any) -> Neighbour | None:
    """The turn said just before ``row`` in its session (``row`` needs seq, kind, scope, owner,
    session_id, occurred_at and recorded_at), or None."""
    return _neighbour(conn, row, before=True)


def following(conn: Connection, row: Any) -> Neighbour | None:
    """The turn said just after ``row`` in its session, or None."""
    return _neighbour(conn, row, before=False)


def _neighbour(conn: Connection, row: Any, *, before: bool) -> Neighbour | None:
    if not is_turn(row):
        return None
    # A turn is placed by occurred_at when it has one; its neighbours are looked for on the same clock.
    clock = "occurred_at" if row.occurred_at else "recorded_at"
    at = row.occurred_at or row.recorded_at
    edge = to_rfc3339(parse_rfc3339(at) + (-CONTEXT_WINDOW if before else CONTEXT_WINDOW))
    stmt = _statement(conn, clock, before)
    found = conn.execute(stmt, {
        "edge": edge, "at": at, "seq": row.seq, "scope": row.scope, "owner": row.owner,
        "session_id": row.session_id, "kind": TURN_KIND,
        **{f"s{i}": status for i, status in enumerate(CONTEXT_STATUSES)}}).first()
    return None if found is None else Neighbour(found.id, found.seq, found.content, found.content_hash)
