"""Embedding vectors, stored beside the rows they describe."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection, func, select
from sqlalchemy.dialects import postgresql, sqlite

from memoryd.store.schema import memories, memory_vectors


def to_blob(vector: np.ndarray) -> bytes:
    """float32 little-endian bytes (sqlite-vec's native layout)."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


def upsert(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert or replace vectors (``memory_seq``, ``model``, ``dim``, ``vector``,
    ``content_hash``, ``embedded_at``); replacing is what makes re-embedding idempotent."""
    if not rows:
        return
    mod: Any = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = mod.insert(memory_vectors)
    stmt = stmt.on_conflict_do_update(
        index_elements=[memory_vectors.c.memory_seq],
        set_={c: stmt.excluded[c] for c in ("model", "dim", "vector", "content_hash", "embedded_at")},
    )
    conn.execute(stmt, list(rows))


def count_unembedded(conn: Connection) -> int:
    """Live rows that have no vector yet."""
    return int(conn.execute(
        select(func.count()).select_from(memories)
        .outerjoin(memory_vectors, memory_vectors.c.memory_seq == memories.c.seq)
        .where(memory_vectors.c.memory_seq.is_(None),
               memories.c.status.in_(["active", "candidate"]))
    ).scalar_one())
