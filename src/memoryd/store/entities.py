"""Entities, their aliases and their mentions (per scope and owner)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, delete, select

from memoryd.store.backend import backend_for
from memoryd.store.schema import entities, entity_aliases, entity_mentions


def find(conn: Connection, scope: str, owner: str, norm: str, type_: str) -> int | None:
    """An entity by its normalised key or one of its aliases."""
    row = conn.execute(select(entities.c.id).where(
        entities.c.scope == scope, entities.c.owner == owner, entities.c.type == type_,
        entities.c.norm == norm)).first()
    if row:
        return int(row[0])
    row = conn.execute(select(entities.c.id).join(entity_aliases).where(
        entities.c.scope == scope, entities.c.owner == owner, entities.c.type == type_,
        entity_aliases.c.alias == norm)).first()
    return int(row[0]) if row else None


def candidates(conn: Connection, scope: str, owner: str, type_: str) -> Sequence[Any]:
    """Entities of one type in one scope that carry a name vector (for embedding matches)."""
    return conn.execute(select(entities.c.id, entities.c.vector).where(
        entities.c.scope == scope, entities.c.owner == owner, entities.c.type == type_,
        entities.c.vector.is_not(None))).all()


def create(conn: Connection, scope: str, owner: str, name: str, norm: str, type_: str,
           vector: bytes | None, at: str) -> int:
    res = conn.execute(entities.insert().values(scope=scope, owner=owner, name=name, norm=norm, type=type_,
                                                vector=vector, created_at=at))
    return int(res.inserted_primary_key[0])  # type: ignore[index]


def add_alias(conn: Connection, entity_id: int, alias: str) -> None:
    conn.execute(backend_for(conn).insert(entity_aliases).values(entity_id=entity_id, alias=alias)
                 .on_conflict_do_nothing())


def mention(conn: Connection, entity_id: int, memory_id: str, surface: str) -> None:
    conn.execute(backend_for(conn).insert(entity_mentions).values(entity_id=entity_id, memory_id=memory_id,
                                                       surface=surface).on_conflict_do_nothing())


def for_memory(conn: Connection, memory_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(select(entities.c.name, entities.c.type, entity_mentions.c.surface)
                        .join(entity_mentions, entity_mentions.c.entity_id == entities.c.id)
                        .where(entity_mentions.c.memory_id == memory_id))
    return [{"name": r.name, "type": r.type, "surface": r.surface} for r in rows]


def erase_mentions(conn: Connection, memory_id: str) -> None:
    """Drop a memory's mentions, and entities no memory mentions any more."""
    ids = [r[0] for r in conn.execute(select(entity_mentions.c.entity_id)
                                      .where(entity_mentions.c.memory_id == memory_id))]
    conn.execute(delete(entity_mentions).where(entity_mentions.c.memory_id == memory_id))
    for entity_id in ids:
        if conn.execute(select(entity_mentions.c.entity_id)
                        .where(entity_mentions.c.entity_id == entity_id).limit(1)).first() is None:
            conn.execute(delete(entities).where(entities.c.id == entity_id))
