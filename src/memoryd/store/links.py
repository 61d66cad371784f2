"""Links between memories: supersedes, merged_into, cites."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, or_, select

from memoryd.store.backends import backend_for
from memoryd.store.schema import memory_links

SUPERSEDES, MERGED_INTO, CITES = "supersedes", "merged_into", "cites"


def add(conn: Connection, src_id: str, dst_id: str, kind: str, at: str) -> None:
    """Link ``src`` to ``dst`` (idempotent)."""
    stmt = backend_for(conn).insert(memory_links).values(
        src_id=src_id, dst_id=dst_id, kind=kind, created_at=at)
    conn.execute(stmt.on_conflict_do_nothing())


def targets(conn: Connection, src_id: str, kind: str) -> list[str]:
    """Ids ``src`` links to with ``kind`` (e.g. the sources a derived memory cites)."""
    rows = conn.execute(select(memory_links.c.dst_id).where(
        memory_links.c.src_id == src_id, memory_links.c.kind == kind).order_by(memory_links.c.id))
    return [r[0] for r in rows]


def sources(conn: Connection, dst_id: str, kind: str) -> list[str]:
    """Ids that link to ``dst`` with ``kind`` (e.g. the derived memories citing a source)."""
    rows = conn.execute(select(memory_links.c.src_id).where(
        memory_links.c.dst_id == dst_id, memory_links.c.kind == kind).order_by(memory_links.c.id))
    return [r[0] for r in rows]


def all_for(conn: Connection, memory_id: str) -> list[dict[str, Any]]:
    """Every link touching one memory, as the protocol shows them."""
    rows = conn.execute(select(memory_links).where(
        or_(memory_links.c.src_id == memory_id, memory_links.c.dst_id == memory_id)
    ).order_by(memory_links.c.id))
    return [{"kind": r.kind, "from": r.src_id, "to": r.dst_id, "created_at": r.created_at} for r in rows]


def remove(conn: Connection, src_id: str, dst_id: str, kind: str) -> None:
    conn.execute(delete(memory_links).where(memory_links.c.src_id == src_id,
                                            memory_links.c.dst_id == dst_id, memory_links.c.kind == kind))


def remove_all(conn: Connection, memory_id: str) -> None:
    conn.execute(delete(memory_links).where(
        or_(memory_links.c.src_id == memory_id, memory_links.c.dst_id == memory_id)))
