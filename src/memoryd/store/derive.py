"""Derived memories: facts extracted from sources, as candidates that cite them.

A candidate becomes active when a second independent source (a source with
different content) yields the same fact, or when an operator approves it.
The same source extracted again is not corroboration.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from memoryd.clock import to_rfc3339
from memoryd.errors import Tombstoned
from memoryd.store import lifecycle, links, proposals
from memoryd.store.memories import NewMemory, WriteContext, get_row, write_memory
from memoryd.store.schema import memories


def derive_fact(conn: Connection, source: Any, text: str, now: datetime, ctx: WriteContext,
                propose_promotion: bool = True) -> tuple[str | None, str]:
    """Record one grounded fact from ``source``; return (memory id, outcome).

    Outcomes: ``created`` (a new candidate), ``cited`` (an existing candidate
    gained this source), ``promoted`` (…and that made it active), ``exists``
    (an active memory already says it), ``tombstoned`` (refused).
    """
    new = NewMemory(
        content=text, kind="fact", scope=source.scope, owner=source.owner, agent_id=source.agent_id,
        user_id=source.user_id, project=source.project, session_id=source.session_id,
        importance=round(source.importance_raw * 0.8, 6), metadata={"derived_from": [source.id]},
        status="candidate", derived=True,
    )
    try:
        result = write_memory(conn, new, now, ctx)
    except Tombstoned:
        return None, "tombstoned"
    memory_id: str = result["id"]
    stamp = to_rfc3339(now)
    if memory_id == source.id:
        return None, "exists"
    row = get_row(conn, memory_id)
    assert row is not None
    if not row.derived:
        return memory_id, "exists"  # a client already wrote this fact directly
    links.add(conn, memory_id, source.id, links.CITES, stamp)
    if result.get("duplicate_of") is None:
        if propose_promotion:
            proposals.propose(conn, kind="promote", memory_ids=[memory_id],
                              reason=f"fact extracted from {source.id}; promote it to active",
                              payload={"source_ids": [source.id]}, created_by="extract", now=now)
        return memory_id, "created"
    if row.status == "candidate" and independent_sources(conn, memory_id) >= 2:
        lifecycle.promote(conn, memory_id, now, "pass:extract")
        return memory_id, "promoted"
    return memory_id, "cited"


def independent_sources(conn: Connection, memory_id: str) -> int:
    """Distinct contents among the live sources a derived memory cites."""
    ids = links.targets(conn, memory_id, links.CITES)
    if not ids:
        return 0
    rows = conn.execute(select(memories.c.content_hash).where(
        memories.c.id.in_(ids), memories.c.status.not_in(["deleting", "forgotten"])))
    return len({r[0] for r in rows})
