"""Importance decay: ``importance`` falls from ``importance_raw`` with time since
the last read, and reads reinforce it. ``importance_raw`` never changes.

    importance = min(1, importance_raw × 0.5^(idle_days / half_life_days)
                        × (1 + 0.1 × ln(1 + access_count)))

Runs incrementally: each call updates one bounded batch after a cursor kept in
the ``meta`` table, wrapping around, so no run rewrites the whole table.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from memoryd.clock import parse_rfc3339, to_rfc3339
from memoryd.store import audit
from memoryd.store.backends import backend_for
from memoryd.store.schema import memories, meta

CURSOR_KEY = "decay.cursor"
REINFORCE = 0.1


def decayed(importance_raw: float, idle_days: float, access_count: int, half_life_days: float) -> float:
    """The decayed importance of one row (a pure function)."""
    value = importance_raw * 0.5 ** (max(0.0, idle_days) / half_life_days)
    value *= 1.0 + REINFORCE * math.log1p(max(0, access_count))
    return round(min(1.0, value), 6)


def _cursor(conn: Connection) -> int:
    row = conn.execute(select(meta.c.value).where(meta.c.key == CURSOR_KEY)).first()
    return int(row[0]) if row else 0


def _set_cursor(conn: Connection, value: int) -> None:
    stmt = backend_for(conn).insert(meta).values(key=CURSOR_KEY, value=str(value))
    conn.execute(stmt.on_conflict_do_update(index_elements=[meta.c.key], set_={"value": str(value)}))


def run_batch(conn: Connection, now: datetime, *, half_life_days: float, limit: int,
              actor: str) -> dict[str, Any]:
    """Decay one batch of live rows after the cursor; record one audit event for it."""
    start = _cursor(conn)
    rows = conn.execute(
        select(memories.c.seq, memories.c.id, memories.c.importance, memories.c.importance_raw,
               memories.c.access_count, memories.c.last_accessed_at, memories.c.recorded_at)
        .where(memories.c.seq > start, memories.c.status.in_(["active", "candidate"]))
        .order_by(memories.c.seq).limit(limit)
    ).all()
    changes = []
    for r in rows:
        since = parse_rfc3339(r.last_accessed_at or r.recorded_at)
        value = decayed(r.importance_raw, (now - since).total_seconds() / 86400.0, r.access_count,
                        half_life_days)
        if abs(value - r.importance) > 1e-6:
            changes.append({"s": r.seq, "v": value})
    if changes:
        conn.execute(update(memories).where(memories.c.seq == bindparam("s"))
                     .values(importance=bindparam("v")), changes)
    end = rows[-1].seq if len(rows) == limit else 0  # wrap around after the last row
    _set_cursor(conn, end)
    if changes:
        audit.append(conn, at=to_rfc3339(now), actor=actor, action="memory.decay", memory_id=None,
                     detail={"first_seq": rows[0].seq, "last_seq": rows[-1].seq, "scanned": len(rows),
                             "changed": len(changes)})
    return {"scanned": len(rows), "changed": len(changes), "wrapped": end == 0}
