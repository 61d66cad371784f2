"""The audit log: one hash-chained event per mutation, in the mutation's transaction.

An event holds ids, content hashes and changed fields, never memory text, and
owner values only as keyed hashes (store/keyed.py), so an erasure never has
to rewrite history (and never breaks the chain): an event's hash covers
exactly what the row stores, and no erasure changes a stored event.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select

from memoryd.store.backend import backend_for
from memoryd.store.prepared import fetch, prepare, run_many
from memoryd.store.schema import audit_events

GENESIS = "0" * 64


def digest(prev_hash: str, at: str, actor: str, action: str, memory_id: str | None,
           detail: dict[str, Any]) -> str:
    """One event's hash: over the previous hash and the event's stored fields."""
    body = json.dumps(
        {"at": at, "actor": actor, "action": action, "memory_id": memory_id, "detail": detail},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(f"{prev_hash}\n{body}".encode()).hexdigest()


def last_hash(conn: Connection) -> str:
    """The hash of the newest event (the genesis hash for an empty log)."""
    stmt = prepare(conn, "audit-head", lambda: select(audit_events.c.hash)
                   .order_by(audit_events.c.seq.desc()).limit(1))
    rows = fetch(conn, stmt, {})
    return rows[0][0] if rows else GENESIS


def append(conn: Connection, *, at: str, actor: str, action: str, memory_id: str | None,
           detail: dict[str, Any]) -> str:
    """Append one event chained to the previous one; return its hash.

    Call inside the write transaction of the mutation it records (the
    transaction's write lock keeps the chain linear).
    """
    return append_many(conn, [Event(at, actor, action, memory_id, detail)])


@dataclass(frozen=True)
class Event:
    """An audit event not yet chained."""

    at: str
    actor: str
    action: str
    memory_id: str | None
    detail: dict[str, Any]


def append_many(conn: Connection, events: Sequence[Event]) -> str:
    """Chain ``events`` in order after the newest one, insert them in one statement; return the last hash.

    One read of the chain's head and one executemany, however many events:
    the group committer's path for a batch of writes.
    """
    # Concurrent daemons on one PostgreSQL database would otherwise both chain after one head.
    backend_for(conn).serialize_audit(conn)
    prev = last_hash(conn)
    rows = []
    for ev in events:
        digest_ = digest(prev, ev.at, ev.actor, ev.action, ev.memory_id, ev.detail)
        rows.append({"at": ev.at, "actor": ev.actor, "action": ev.action, "memory_id": ev.memory_id,
                     "detail": json.dumps(ev.detail), "prev_hash": prev, "hash": digest_})
        prev = digest_
    stmt = prepare(conn, "audit-append", lambda: insert(audit_events).values(
        {name: bindparam(name) for name in _EVENT_COLUMNS}))
    run_many(conn, stmt, rows)
    return prev


_EVENT_COLUMNS = ("at", "actor", "action", "memory_id", "detail", "prev_hash", "hash")


def verify(conn: Connection) -> tuple[int, int | None]:
    """Check the whole chain; return (events checked, seq of the first break or None)."""
    prev = GENESIS
    checked = 0
    for row in conn.execute(select(audit_events).order_by(audit_events.c.seq)):
        expected = digest(prev, row.at, row.actor, row.action, row.memory_id, row.detail)
        if row.prev_hash != prev or row.hash != expected:
            return checked, row.seq
        prev = row.hash
        checked += 1
    return checked, None


def events_for(conn: Connection, memory_id: str) -> list[dict[str, Any]]:
    """The events that name one memory, oldest first (its history)."""
    rows = conn.execute(
        select(audit_events).where(audit_events.c.memory_id == memory_id).order_by(audit_events.c.seq)
    )
    return [
        {"at": r.at, "actor": r.actor, "action": r.action, "detail": r.detail} for r in rows
    ]
