"""Correction and removal: supersede, forget (mark + tombstone), erase, expire, purge.

Every function runs inside the caller's write transaction and appends its
audit events there, so a change and its record commit together or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, select, update

from memoryd.clock import to_rfc3339
from memoryd.errors import Conflict, Forbidden, InvalidParams, NotFound
from memoryd.queue import jobs as jobq
from memoryd.store import audit, entities, groupwrite, links, proposals, turns
from memoryd.store.backends import backend_for
from memoryd.store.ids import is_memory_id, new_id
from memoryd.store.memories import (
    NewMemory,
    WriteContext,
    add_tombstone,
    get_row,
    lock_name,
    loose_hash,
    write_memory,
)
from memoryd.store.schema import LIVE_STATUSES, forget_requests, idempotency_keys, jobs, memories
from memoryd.store.scope import Reader

#: Statuses that still hold their text (anything but deleting/forgotten).
TEXT_STATUSES = ("active", "candidate", "superseded", "rejected", "archived")


def _live_row(conn: Connection, memory_id: str, field: str) -> Any:
    if not is_memory_id(memory_id):
        raise NotFound(f"no memory with id {memory_id!r}", data={"field": field})
    row = get_row(conn, memory_id)
    if row is None:
        raise NotFound(f"no memory with id {memory_id!r}", data={"field": field})
    return row


def _check_owner(row: Any, reader: Reader, field: str) -> None:
    if row.scope != "org" and reader.key_for(row.scope) != row.owner:
        raise Forbidden(
            f"memory {row.id} belongs to another {row.scope} owner; pass its "
            f"{'agent_id' if row.scope == 'agent' else row.scope + ' key'} to change it",
            data={"field": field},
        )


@dataclass
class SupersedeRequest:
    old_id: str
    reader: Reader
    reason: str | None = None
    new_id: str | None = None
    new: NewMemory | None = None  # content + write params (owner fields inherited by the handler)


def supersede(conn: Connection, req: SupersedeRequest, now: datetime, ctx: WriteContext) -> dict[str, Any]:
    """Close ``old`` and link the new row to it, exactly once (a compare-and-set).

    Raises NotFound, Forbidden (another owner, or a scope change), or
    Conflict when the old row is no longer live (a lost race); the caller's
    savepoint then leaves no orphan new row behind.
    """
    old = _live_row(conn, req.old_id, "old_id")
    _check_owner(old, req.reader, "old_id")
    if old.status not in LIVE_STATUSES:
        raise Conflict(f"memory {old.id} is {old.status}, not live; it cannot be superseded again",
                       data={"field": "old_id"})
    stamp = to_rfc3339(now)
    if req.new_id is not None:
        new = _live_row(conn, req.new_id, "new_id")
        if new.id == old.id:
            raise InvalidParams("new_id", "must differ from old_id")
        if (new.scope, new.owner) != (old.scope, old.owner):
            raise Forbidden("the new memory must have the old one's scope and owner",
                            data={"field": "new_id"})
        if new.status not in LIVE_STATUSES:
            raise Conflict(f"memory {new.id} is {new.status}, not live", data={"field": "new_id"})
        new_id, valid_from = new.id, new.valid_from
    else:
        assert req.new is not None
        if (req.new.scope, req.new.owner) != (old.scope, old.owner):
            raise Forbidden("a superseding memory may not change scope or owner", data={"field": "scope"})
        result = write_memory(conn, req.new, now, ctx)
        if result["id"] == old.id:
            raise Conflict("the new content is identical to the old memory", data={"field": "content"})
        new_id = result["id"]
        valid_from = conn.execute(select(memories.c.valid_from).where(memories.c.id == new_id)).scalar_one()
    closed = conn.execute(
        update(memories)
        .where(memories.c.id == old.id, memories.c.status.in_(LIVE_STATUSES))
        .values(status="superseded", valid_to=valid_from, retired_at=stamp)
    ).rowcount
    if closed != 1:
        raise Conflict(f"memory {old.id} was superseded concurrently", data={"field": "old_id"})
    links.add(conn, new_id, old.id, links.SUPERSEDES, stamp)
    audit.append(conn, at=stamp, actor=ctx.actor, action="memory.supersede", memory_id=old.id,
                 detail={"before": {"status": old.status, "valid_to": old.valid_to, "retired_at": None},
                         "after": {"status": "superseded", "valid_to": valid_from, "retired_at": stamp},
                         "new_id": new_id, "reason": req.reason})
    return {"old_id": old.id, "new_id": new_id}


#: The columns forget needs of a row (never its content, which may be large and many).
_FORGET_COLS = (memories.c.seq, memories.c.id, memories.c.scope, memories.c.owner,
                memories.c.content_hash, memories.c.status)
#: Rows one forget-by-subject batch marks (PROTOCOL 1.1: bounded, never holding the writer).
SUBJECT_BATCH = 500


def copies_of(conn: Connection, row: Any) -> list[Any]:
    """Rows that hold ``row``'s text in other places: its collapsed duplicates and
    the rows it was collapsed into (``merged_into`` links, both ways, transitively),
    and rows of the same scope and owner whose text is the same after loose
    normalisation (a copy consolidate has not reached yet), found by their
    ``loose_hash`` whatever their length. Forgetting a memory forgets these too,
    or its words would stay readable."""
    if row.content is None:
        return []
    target = loose_hash(row.content)
    same_owner = (memories.c.scope == row.scope) & (memories.c.owner == row.owner)
    seen, out, frontier = {row.id}, [], [row.id]
    while frontier:
        current = frontier.pop()
        for other_id in links.sources(conn, current, links.MERGED_INTO) + links.targets(
                conn, current, links.MERGED_INTO):
            if other_id in seen:
                continue
            seen.add(other_id)
            other = conn.execute(select(memories).where(memories.c.id == other_id, same_owner)).first()
            if other is not None and other.content is not None and loose_hash(other.content) == target:
                out.append(other)
                frontier.append(other_id)
    out += conn.execute(select(memories).where(
        same_owner, memories.c.loose_hash == target, memories.c.id.not_in(seen))).all()
    return [r for r in out if r.status not in ("deleting", "forgotten")]


def _lock_and_catch_up(conn: Connection, rows: list[Any], subject: dict[str, str] | None) -> list[Any]:
    """Take the write path's lock on each row's content identity (store/memories.py
    lock_name), then add the live rows of those identities a write committed before
    the lock was ours (for a forget by subject, those carrying the subject's value).
    From here to the commit no write of these identities can pass its tombstone
    check: it waits for the lock, then finds the tombstone (PostgreSQL; SQLite's
    single writer already serialises them)."""
    backend_for(conn).lock_identities(conn, (lock_name(r.scope, r.owner, r.content_hash) for r in rows))
    if not rows:
        return rows
    taken = {r.id for r in rows}
    found = [r for r in groupwrite.rows_of(conn, {(r.scope, r.owner, r.content_hash) for r in rows})
             if r.id not in taken and r.status not in ("deleting", "forgotten")]
    if found and subject is not None:
        (field, value), = subject.items()
        carrying = set(conn.execute(select(memories.c.id).where(
            memories.c.id.in_([r.id for r in found]), memories.c[field] == value)).scalars())
        found = [r for r in found if r.id in carrying]
    return rows + found


def forget(conn: Connection, *, memory_id: str | None, subject: dict[str, str] | None,
           reason: str | None, tombstone: bool, now: datetime, actor: str,
           max_attempts: int, after_seq: int = 0, limit: int | None = None) -> dict[str, Any]:
    """Mark matching rows ``deleting``, lay their tombstones, withdraw the
    proposals that involve them, and queue the erasure.

    All in the caller's transaction, so the reply means the erasure is durably
    queued and a rewrite of the same content is already refused. By id, the
    row's copies (:func:`copies_of`) go with it. By subject, at most ``limit``
    rows past ``after_seq`` are taken (in seq order); the result's
    ``next_seq`` says where the next batch starts (None when none is left).
    """
    stamp = to_rfc3339(now)
    next_seq: int | None = None
    if memory_id is not None:
        row = _live_row(conn, memory_id, "id")
        rows = [row, *copies_of(conn, row)]
    else:
        assert subject is not None
        (field, value), = subject.items()
        stmt = (select(*_FORGET_COLS)
                .where(memories.c[field] == value, memories.c.seq > after_seq,
                       memories.c.status.not_in(("deleting", "forgotten")))
                .order_by(memories.c.seq))
        if limit is not None:
            stmt = stmt.limit(limit + 1)
        rows = list(conn.execute(stmt))
        if limit is not None and len(rows) > limit:
            rows = rows[:limit]
            next_seq = rows[-1].seq
    matched = _lock_and_catch_up(conn, [r for r in rows if r.status not in ("deleting", "forgotten")],
                                 subject)
    ids = [r.id for r in matched]
    if ids:
        conn.execute(update(memories).where(memories.c.id.in_(ids)).values(status="deleting"))
        conn.execute(update(memories).where(memories.c.id.in_(ids), memories.c.retired_at.is_(None))
                     .values(retired_at=stamp))
        proposals.withdraw_citing(conn, ids, now)
    for r in matched:
        if tombstone:
            add_tombstone(conn, r.scope, r.owner, r.content_hash, now, reason)
        audit.append(conn, at=stamp, actor=actor, action="memory.forget", memory_id=r.id,
                     detail={"content_hash": r.content_hash, "before": {"status": r.status},
                             "after": {"status": "deleting"}, "tombstone": tombstone, "reason": reason})
    request_id = new_id("fgt_")
    conn.execute(forget_requests.insert().values(
        # A forget by subject keeps the field, not the value: nothing needs to match it again.
        id=request_id, subject={"id": memory_id} if memory_id else dict.fromkeys(subject or {}),
        memory_ids=ids,
        reason=reason, tombstone=tombstone, matched=len(ids), status="pending", created_at=stamp,
    ))
    jobq.enqueue(conn, "retention", f"forget:{request_id}", now=now.timestamp(), max_attempts=max_attempts)
    return {"request_id": request_id, "matched": len(ids), "memory_ids": ids, "next_seq": next_seq}


def count_subject(conn: Connection, subject: dict[str, str], after_seq: int) -> int:
    """Live rows carrying the subject's owner value past ``after_seq`` (forget's progress)."""
    (field, value), = subject.items()
    return int(conn.execute(select(func.count()).select_from(memories).where(
        memories.c[field] == value, memories.c.seq > after_seq,
        memories.c.status.not_in(("deleting", "forgotten")))).scalar_one())


def erase(conn: Connection, memory_id: str, now: datetime, actor: str) -> int:
    """Remove a memory's text everywhere; return how many rows were erased.

    Clears content (the FTS and vector triggers drop their entries), owner
    fields and metadata; drops idempotency rows that answer with its id;
    erases derived memories whose every citation is gone and un-cites it from
    the others. The row stays as ``forgotten`` with its id and content hash.
    """
    row = get_row(conn, memory_id)
    if row is None or row.status == "forgotten":
        return 0
    stamp = to_rfc3339(now)
    # Only the transaction that turns the row forgotten goes on: on PostgreSQL a second worker
    # erasing the same request (its lease lost meanwhile) waits on the row's lock here, then
    # matches nothing, and adds no second audit event.
    done = conn.execute(update(memories).where(
        memories.c.id == memory_id, memories.c.status != "forgotten").values(
        content=None, loose_hash=None, metadata={}, status="forgotten", owner="", agent_id=None, user_id=None,
        project=None, session_id=None, retired_at=row.retired_at or stamp,
    ))
    if not done.rowcount:
        return 0
    # The turn after a forgotten turn was embedded with its text as context: embed it again.
    after = turns.following(conn, row)
    if after is not None:
        jobq.enqueue(conn, "embed", after.id, now=now.timestamp())
    conn.execute(delete(idempotency_keys).where(idempotency_keys.c.result["id"].as_string() == memory_id))
    entities.erase_mentions(conn, memory_id)
    proposals.withdraw_citing(conn, [memory_id], now)
    # A failed job's error text is the one place a pass may have quoted the row.
    conn.execute(update(jobs).where(jobs.c.target == memory_id, jobs.c.last_error.is_not(None))
                 .values(last_error="(erased: the memory was forgotten)"))
    audit.append(conn, at=stamp, actor=actor, action="memory.erase", memory_id=memory_id,
                 detail={"content_hash": row.content_hash, "before": {"status": row.status},
                         "after": {"status": "forgotten"}})
    erased = 1
    for derived_id in links.sources(conn, memory_id, links.CITES):
        links.remove(conn, derived_id, memory_id, links.CITES)
        remaining = [s for s in links.targets(conn, derived_id, links.CITES)
                     if (get_row(conn, s) or row).status not in ("deleting", "forgotten")]
        if not remaining:
            erased += erase(conn, derived_id, now, actor)
    return erased


def _pending_request(conn: Connection, request_id: str) -> Any:
    """The forget request's row, or None when there is none or it is done."""
    req = conn.execute(select(forget_requests).where(forget_requests.c.id == request_id)).first()
    return None if req is None or req.status == "done" else req


def finish_forget_request(conn: Connection, request_id: str, now: datetime, actor: str) -> int:
    """Erase every row of one forget request and mark it done; return rows erased."""
    req = _pending_request(conn, request_id)
    if req is None:
        return 0
    erased = sum(erase(conn, mid, now, actor) for mid in req.memory_ids)
    conn.execute(update(forget_requests).where(forget_requests.c.id == request_id)
                 .values(status="done", finished_at=to_rfc3339(now)))
    return erased


def erase_request_in_chunks(engine: Engine, request_id: str, now: datetime, actor: str, *,
                            chunk: int) -> int:
    """Erase the rows of a pending forget request, ``chunk`` rows to a transaction; return rows
    erased. The request stays pending for :func:`finish_forget_request` to mark done."""
    with engine.connect() as conn:
        req = _pending_request(conn, request_id)
    if req is None:
        return 0
    ids = list(req.memory_ids)
    erased = 0
    for start in range(0, len(ids), chunk):
        with engine.begin() as conn:
            erased += sum(erase(conn, mid, now, actor) for mid in ids[start:start + chunk])
    return erased


def expire(conn: Connection, now: datetime, *, session_ttl_s: float, limit: int, actor: str) -> int:
    """Archive live rows past their ``ttl_s`` and session rows past the session window."""
    stamp = to_rfc3339(now)
    session_cutoff = to_rfc3339(now - timedelta(seconds=session_ttl_s))
    due = select(memories.c.id, memories.c.status).where(
        memories.c.status.in_(LIVE_STATUSES),
        (memories.c.expires_at <= stamp)
        | ((memories.c.scope == "session") & (memories.c.recorded_at <= session_cutoff)),
    ).limit(limit)
    rows = conn.execute(due).all()
    for r in rows:
        conn.execute(update(memories).where(memories.c.id == r.id)
                     .values(status="archived", retired_at=stamp))
        audit.append(conn, at=stamp, actor=actor, action="memory.expire", memory_id=r.id,
                     detail={"before": {"status": r.status}, "after": {"status": "archived"}})
    return len(rows)


def purge_archived(conn: Connection, now: datetime, *, window_s: float, limit: int, actor: str) -> int:
    """Hard-delete archived rows retired longer ago than ``window_s``."""
    cutoff = to_rfc3339(now - timedelta(seconds=window_s))
    rows = conn.execute(select(memories.c.id, memories.c.content_hash).where(
        memories.c.status == "archived", memories.c.retired_at <= cutoff).limit(limit)).all()
    stamp = to_rfc3339(now)
    for r in rows:
        conn.execute(delete(idempotency_keys).where(idempotency_keys.c.result["id"].as_string() == r.id))
        links.remove_all(conn, r.id)
        conn.execute(delete(memories).where(memories.c.id == r.id))
        audit.append(conn, at=stamp, actor=actor, action="memory.purge", memory_id=r.id,
                     detail={"content_hash": r.content_hash, "before": {"status": "archived"}})
    return len(rows)


def merge(conn: Connection, memory_ids: list[str], merged_text: str, now: datetime,
          ctx: WriteContext) -> str:
    """Write the merged memory and retire the merged rows into it (kept, linked ``merged_into``).

    The rows must share scope, owner and kind and all be live (Conflict otherwise).
    """
    rows = [_live_row(conn, mid, "memory_ids") for mid in memory_ids]
    first = rows[0]
    if any((r.scope, r.owner, r.kind) != (first.scope, first.owner, first.kind) for r in rows):
        raise Forbidden("merged memories must share scope, owner and kind", data={"field": "memory_ids"})
    if any(r.status not in LIVE_STATUSES for r in rows):
        raise Conflict("a memory in the merge is no longer live", data={"field": "memory_ids"})
    stamp = to_rfc3339(now)
    merged = NewMemory(
        content=merged_text, kind=first.kind, scope=first.scope, owner=first.owner,
        agent_id=first.agent_id, user_id=first.user_id, project=first.project,
        session_id=first.session_id, importance=max(r.importance_raw for r in rows),
        metadata={"merged_from": [r.id for r in rows]},
    )
    new_id_ = write_memory(conn, merged, now, ctx)["id"]
    conn.execute(update(memories).where(memories.c.id == new_id_).values(
        corroboration=sum(r.corroboration for r in rows)))
    for r in rows:
        if r.id == new_id_:
            continue  # the merged text equals one of the rows: that row stays live
        conn.execute(update(memories).where(memories.c.id == r.id)
                     .values(status="superseded", retired_at=stamp, valid_to=stamp))
        links.add(conn, r.id, new_id_, links.MERGED_INTO, stamp)
        audit.append(conn, at=stamp, actor=ctx.actor, action="memory.merge", memory_id=r.id,
                     detail={"before": {"status": r.status}, "after": {"status": "superseded"},
                             "merged_into": new_id_})
    return new_id_


def promote(conn: Connection, memory_id: str, now: datetime, actor: str) -> None:
    """Candidate → active (a compare-and-set)."""
    row = _live_row(conn, memory_id, "id")
    done = conn.execute(update(memories).where(memories.c.id == memory_id, memories.c.status == "candidate")
                        .values(status="active")).rowcount
    if not done:
        raise Conflict(f"memory {memory_id} is {row.status}, not a candidate", data={"field": "id"})
    audit.append(conn, at=to_rfc3339(now), actor=actor, action="memory.promote", memory_id=memory_id,
                 detail={"before": {"status": "candidate"}, "after": {"status": "active"}})


def reject_candidate(conn: Connection, memory_id: str, now: datetime, actor: str, reason: str | None) -> None:
    """A rejected candidate becomes ``rejected`` and its value is tombstoned in its scope."""
    row = _live_row(conn, memory_id, "id")
    if row.status != "candidate":
        raise Conflict(f"memory {memory_id} is {row.status}, not a candidate", data={"field": "id"})
    backend_for(conn).lock_identities(conn, [lock_name(row.scope, row.owner, row.content_hash)])
    conn.execute(update(memories).where(memories.c.id == memory_id)
                 .values(status="rejected", retired_at=to_rfc3339(now)))
    add_tombstone(conn, row.scope, row.owner, row.content_hash, now, reason or "rejected in review")
    audit.append(conn, at=to_rfc3339(now), actor=actor, action="memory.reject", memory_id=memory_id,
                 detail={"content_hash": row.content_hash, "before": {"status": "candidate"},
                         "after": {"status": "rejected"}, "tombstone": True})
