"""Proposals: changes a pass suggests and an operator approves or rejects.

A proposal's ``pair_key`` (its kind and the rows involved) is unique over
every status, so a rejected proposal is never raised again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Text, cast, func, or_, select, update

from memoryd.clock import to_rfc3339
from memoryd.store.backends import backend_for
from memoryd.store.ids import new_id
from memoryd.store.schema import proposals

KINDS = ("supersede", "merge", "promote")
#: open -> approved | rejected | stale (decided or overtaken), or withdrawn (a row was forgotten).
STATUSES = ("open", "approved", "rejected", "stale", "withdrawn")


def pair_key(kind: str, memory_ids: Sequence[str], ordered: bool = False) -> str:
    """The identity of a proposal: its kind and its rows (order-free unless ``ordered``)."""
    ids = list(memory_ids) if ordered else sorted(memory_ids)
    return hashlib.sha256(f"{kind}:{','.join(ids)}".encode()).hexdigest()


def propose(conn: Connection, *, kind: str, memory_ids: Sequence[str], reason: str,
            payload: dict[str, Any], created_by: str, now: datetime) -> str | None:
    """Open a proposal unless the same one was ever raised; return its id or None."""
    assert kind in KINDS
    pid = new_id("prp_")
    stmt = backend_for(conn).insert(proposals).values(
        id=pid, kind=kind, memory_ids=list(memory_ids), pair_key=pair_key(kind, memory_ids),
        reason=reason, payload=payload, status="open", created_at=to_rfc3339(now), created_by=created_by,
    ).on_conflict_do_nothing().returning(proposals.c.id)
    # RETURNING, not rowcount: SQLAlchemy reports -1 for a psycopg INSERT's rowcount.
    return pid if conn.execute(stmt).first() is not None else None


def exists(conn: Connection, kind: str, memory_ids: Sequence[str]) -> bool:
    """Whether this proposal was ever raised (open, approved or rejected)."""
    return conn.execute(select(proposals.c.id).where(
        proposals.c.pair_key == pair_key(kind, memory_ids))).first() is not None


def get(conn: Connection, proposal_id: str) -> Any:
    return conn.execute(select(proposals).where(proposals.c.id == proposal_id)).first()


def to_public(row: Any) -> dict[str, Any]:
    return {
        "id": row.id, "kind": row.kind, "memory_ids": row.memory_ids, "reason": row.reason,
        "created_at": row.created_at, "created_by": row.created_by, "status": row.status,
        "payload": row.payload, "decided_at": row.decided_at, "decided_by": row.decided_by,
        "note": row.note,
    }


#: Payload keys that hold ids or labels, never text: what a withdrawn proposal keeps.
_ID_KEYS = ("old_id", "new_id", "relation")


#: Memory ids per query when looking for the proposals that cite them.
CITING_CHUNK = 200


def citing(conn: Connection, memory_ids: Sequence[str]) -> list[Any]:
    """Every proposal (any status) whose rows include one of ``memory_ids``."""
    wanted = set(memory_ids)
    if not wanted:
        return []
    text_ids = cast(proposals.c.memory_ids, Text)
    ordered = sorted(wanted)
    found: dict[str, Any] = {}
    # In chunks: one OR of a thousand terms is deeper than SQLite's expression limit (a forget
    # by subject marks up to 5,000 rows at once).
    for at in range(0, len(ordered), CITING_CHUNK):
        chunk = ordered[at:at + CITING_CHUNK]
        for r in conn.execute(select(proposals).where(or_(*[text_ids.contains(m) for m in chunk]))):
            if wanted & set(r.memory_ids):
                found.setdefault(r.id, r)
    return list(found.values())


def withdraw_citing(conn: Connection, memory_ids: Sequence[str], now: datetime) -> int:
    """Withdraw open proposals that involve a forgotten memory, and strip the text
    (``reason``, ``merged_text``) from every proposal that does, whatever its status.

    The proposal keeps its id, kind, rows and ``pair_key``, so it is never
    raised again; its words are gone. Idempotent. Returns proposals changed.
    """
    changed = 0
    stamp = to_rfc3339(now)
    for row in citing(conn, memory_ids):
        values: dict[str, Any] = {
            "reason": "withdrawn: a memory it involves was forgotten",
            "payload": {k: v for k, v in (row.payload or {}).items() if k in _ID_KEYS},
        }
        if row.status == "open":
            values.update(status="withdrawn", decided_at=stamp, decided_by="forget",
                          note="a memory it involves was forgotten")
        if row.reason == values["reason"] and row.payload == values["payload"] and row.status != "open":
            continue
        conn.execute(update(proposals).where(proposals.c.id == row.id).values(**values))
        changed += 1
    return changed


def list_(conn: Connection, status: str, limit: int) -> list[dict[str, Any]]:
    rows = conn.execute(select(proposals).where(proposals.c.status == status)
                        .order_by(proposals.c.created_at).limit(limit))
    return [to_public(r) for r in rows]


def count_open(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(proposals)
                            .where(proposals.c.status == "open")).scalar_one())


def close(conn: Connection, proposal_id: str, status: str, actor: str, note: str | None,
          now: datetime) -> bool:
    """Mark an open proposal decided; False when it was no longer open (a lost race)."""
    return bool(conn.execute(update(proposals).where(
        proposals.c.id == proposal_id, proposals.c.status == "open"
    ).values(status=status, decided_at=to_rfc3339(now), decided_by=actor, note=note)).rowcount)
