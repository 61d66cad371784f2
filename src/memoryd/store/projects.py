"""Adopting a project's rows under a new project key (``project.adopt``, operator socket).

Protocol 1.2 keys a project by its repository's identity (editors/project.py,
docs/projects.md); a store written before it holds rows whose ``project`` is a
folder name (``api``). Those rows stay readable by an explicit ``--project api``,
which is what they are; nothing maps a folder name to a key by itself, because
any repository of that name would then read them. The operator, who knows which
checkout wrote them, moves them to the checkout's key with ``memoryd project
adopt api --cwd PATH``: this module's :func:`adopt_batch`, run in batches.

A batch rewrites ``project`` (and ``owner``, for project-scope rows) on up to
``limit`` memories whose project is the old value, and records one audit
event (the ids it moved; the two project values as keyed hashes, as every
event holds owner values). The last batch (no memory left) moves what is keyed by the project-scope
owner without being a memory: tombstones (so forgotten text stays refused under
the new key), idempotency keys and entities.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table, and_, case, delete, exists, select, update

from memoryd.store import audit, keyed
from memoryd.store.backends import backend_for
from memoryd.store.schema import (
    entities,
    entity_aliases,
    entity_mentions,
    idempotency_keys,
    memories,
    tombstones,
)

#: Memories moved per batch (each batch is one short transaction through the group committer).
ADOPT_BATCH = 500
ACTION = "project.adopt"


def adopt_batch(conn: Connection, *, old: str, new: str, at: str, actor: str,
                limit: int = ADOPT_BATCH) -> dict[str, Any]:
    """Move up to ``limit`` memories of project ``old`` to ``new``; when none is left, move
    the project's tombstones, idempotency keys and entities too.

    Returns ``{"memories": n, "done": bool, "tombstones": n, "idempotency_keys": n,
    "entities": n}``; ``done`` is true once nothing of ``old`` is left to move.
    """
    seqs = list(conn.execute(select(memories.c.seq).where(memories.c.project == old)
                             .order_by(memories.c.seq).limit(limit)).scalars())
    out: dict[str, Any] = {"memories": len(seqs), "done": False, "tombstones": 0,
                           "idempotency_keys": 0, "entities": 0}
    if seqs:
        is_owner = and_(memories.c.scope == "project", memories.c.owner == old)
        conn.execute(update(memories).where(memories.c.seq.in_(seqs)).values(
            project=new, owner=case((is_owner, new), else_=memories.c.owner)))
        ids = list(conn.execute(select(memories.c.id).where(memories.c.seq.in_(seqs))).scalars())
        audit.append(conn, at=at, actor=actor, action=ACTION, memory_id=None,
                     detail={**_owners(conn, old, new), "memory_ids": ids})
        return out
    out["tombstones"] = _move_owned_rows(conn, tombstones, "content_hash",
                                         keyed.keyed(conn, old), keyed.keyed(conn, new))
    out["idempotency_keys"] = _move_owned_rows(conn, idempotency_keys, "key", old, new)
    out["entities"] = _move_entities(conn, old, new)
    if any(out[k] for k in ("tombstones", "idempotency_keys", "entities")):
        audit.append(conn, at=at, actor=actor, action=ACTION, memory_id=None,
                     detail={**_owners(conn, old, new), "tombstones": out["tombstones"],
                             "idempotency_keys": out["idempotency_keys"], "entities": out["entities"]})
    out["done"] = True
    return out


def _owners(conn: Connection, old: str, new: str) -> dict[str, str]:
    """The two project values as an audit event holds owner values: keyed hashes only
    (store/audit.py), so a later forget by subject never has history to rewrite."""
    return {"from": keyed.keyed(conn, old), "to": keyed.keyed(conn, new)}


def _move_owned_rows(conn: Connection, table: Table, match: str, old: str, new: str) -> int:
    """Re-key the project's rows of ``table`` (tombstones, idempotency keys: ``old`` and ``new``
    are the keyed hashes they hold, store/keyed.py); a row whose ``match`` column the new key
    already holds is dropped as a double (a tombstone twice, a key that keeps its first answer)."""
    other = table.alias("other")
    taken = exists().where(other.c.scope == "project", other.c.owner == new,
                           other.c[match] == table.c[match])
    mine = and_(table.c.scope == "project", table.c.owner == old)
    moved = conn.execute(update(table).where(mine, ~taken).values(owner=new)).rowcount
    conn.execute(delete(table).where(mine))
    return int(moved or 0)


def _move_entities(conn: Connection, old: str, new: str) -> int:
    """Re-key the project's entities; one the new project already knows (same name and type)
    takes over the old one's mentions and aliases, and the old one goes."""
    mine = and_(entities.c.scope == "project", entities.c.owner == old)
    pairs = _twins(conn, old, new)
    backend = backend_for(conn)
    for old_id, new_id in pairs:
        for table in (entity_mentions, entity_aliases):
            for row in conn.execute(select(table).where(table.c.entity_id == old_id)).mappings():
                conn.execute(backend.insert(table).values({**row, "entity_id": new_id})
                             .on_conflict_do_nothing())
            conn.execute(delete(table).where(table.c.entity_id == old_id))
        conn.execute(delete(entities).where(entities.c.id == old_id))
    moved = conn.execute(update(entities).where(mine).values(owner=new)).rowcount
    return int(moved or 0) + len(pairs)


def _twins(conn: Connection, old: str, new: str) -> list[tuple[int, int]]:
    """(old entity id, new entity id) for each entity both projects hold."""
    twin = entities.alias("twin")
    stmt = (select(entities.c.id, twin.c.id)
            .join(twin, and_(twin.c.scope == "project", twin.c.owner == new,
                             twin.c.norm == entities.c.norm, twin.c.type == entities.c.type))
            .where(entities.c.scope == "project", entities.c.owner == old))
    return [(int(a), int(b)) for a, b in conn.execute(stmt).all()]
