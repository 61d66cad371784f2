"""Entities, their aliases and their mentions (per scope and owner)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, delete, select, update

from memoryd.store.backends import backend_for
from memoryd.store.schema import entities, entity_aliases, entity_mentions, memories
from memoryd.text.entities import normalise


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
    """Drop a memory's mentions, and with them whatever the memory gave its entities.

    An entity no memory mentions any more is deleted (its aliases and name vector
    with it). One that other memories still mention is rebuilt from their mentions
    (:func:`rebuild`), so a forgotten memory leaves neither the name it gave, nor an
    alias, nor the name's vector.
    """
    ids = sorted({r[0] for r in conn.execute(select(entity_mentions.c.entity_id)
                                             .where(entity_mentions.c.memory_id == memory_id))})
    conn.execute(delete(entity_mentions).where(entity_mentions.c.memory_id == memory_id))
    for entity_id in ids:
        rebuild(conn, entity_id)


def rebuild(conn: Connection, entity_id: int) -> None:
    """Make an entity what its remaining mentions say, or delete it when none remains.

    Its name stays when a remaining mention has that surface (and so does the name's
    vector, which was computed from it); otherwise the name becomes the surface of the
    oldest remaining mention and the vector is dropped (the extract pass gives a new
    entity one; this one is found again by name and aliases). The aliases are the
    normalised surfaces of the remaining mentions. When the new name's key is another
    entity's, the two become one: the mentions move to that entity.
    """
    entity = conn.execute(select(entities).where(entities.c.id == entity_id)).first()
    if entity is None:
        return
    remaining = conn.execute(
        select(entity_mentions.c.memory_id, entity_mentions.c.surface)
        .join(memories, memories.c.id == entity_mentions.c.memory_id, isouter=True)
        .where(entity_mentions.c.entity_id == entity_id)
        .order_by(memories.c.seq, entity_mentions.c.surface)).all()
    surfaces = [r.surface for r in remaining]
    if not surfaces:
        _delete(conn, entity_id)
        return
    name, vector = entity.name, entity.vector
    if name not in surfaces:
        name, vector = surfaces[0], None
    norm = normalise(name)
    other = find(conn, entity.scope, entity.owner, norm, entity.type)
    target = entity_id
    if other is not None and other != entity_id:
        # Another entity already answers to this name: it takes the remaining mentions.
        target = other
        for memory_id, surface in remaining:
            mention(conn, other, memory_id, surface)
        _delete(conn, entity_id)
    else:
        conn.execute(update(entities).where(entities.c.id == entity_id)
                     .values(name=name, norm=norm, vector=vector))
    if target == entity_id:
        conn.execute(delete(entity_aliases).where(entity_aliases.c.entity_id == entity_id))
    target_norm = norm if target == entity_id else conn.execute(
        select(entities.c.norm).where(entities.c.id == target)).scalar_one()
    for alias in sorted({normalise(s) for s in surfaces} - {target_norm}):
        add_alias(conn, target, alias)


def _delete(conn: Connection, entity_id: int) -> None:
    # Aliases and mentions by hand as well as by the foreign keys' cascade: a store copied
    # without them enforced must not keep an alias of a deleted entity.
    conn.execute(delete(entity_aliases).where(entity_aliases.c.entity_id == entity_id))
    conn.execute(delete(entity_mentions).where(entity_mentions.c.entity_id == entity_id))
    conn.execute(delete(entities).where(entities.c.id == entity_id))
