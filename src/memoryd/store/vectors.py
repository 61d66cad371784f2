"""Embedding vectors: ``memory_vectors`` holds them durably (any backend); on
SQLite the ``memory_vec`` vec0 table indexes them for nearest-neighbour search.

Both are written in the embed pass's transaction, and migration 0002's
triggers keep the index's filter columns equal to the row's and drop the
vector when the row goes or its content changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection, func, select, text
from sqlalchemy.dialects import postgresql, sqlite

from memoryd.store.schema import memories, memory_vectors

#: vec0's largest k.
MAX_KNN = 4096


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
    cols = ("model", "dim", "vector", "content_hash", "embedded_at")
    stmt = stmt.on_conflict_do_update(
        index_elements=[memory_vectors.c.memory_seq], set_={c: stmt.excluded[c] for c in cols},
    )
    conn.execute(stmt, list(rows))
    if conn.dialect.name == "sqlite":
        # vec0 has no upsert: replace the index entry.
        params = [{"seq": r["memory_seq"], "vec": r["vector"]} for r in rows]
        conn.execute(text("DELETE FROM memory_vec WHERE memory_seq = :seq"), params)
        conn.execute(
            text(
                "INSERT INTO memory_vec(memory_seq, embedding, scope_key, status, kind) "
                "SELECT seq, :vec, scope || ':' || owner, status, kind FROM memories WHERE seq = :seq"
            ),
            params,
        )


def knn(conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
        statuses: Sequence[str], kind: str | None) -> list[tuple[int, float]]:
    """(memory_seq, cosine distance) of the ``k`` nearest vectors that pass the
    scope, status and kind filters, nearest first.

    ``scope_key`` is the index's partition key (migration 0005): each visible
    (scope, owner) pair is searched on its own partition, with status and kind
    applied inside the scan, and the per-partition top-k lists are merged.
    """
    if not scope_keys or k <= 0:
        return []
    k = min(k, MAX_KNN)
    sql = ("SELECT memory_seq, distance FROM memory_vec WHERE embedding MATCH ? AND k = ? "
           f"AND scope_key = ? AND status IN ({', '.join('?' * len(statuses))})")
    tail: tuple[str, ...] = tuple(statuses)
    if kind:
        sql += " AND kind = ?"
        tail += (kind,)
    blob = to_blob(query)
    hits: list[tuple[int, float]] = []
    for key in dict.fromkeys(scope_keys):
        # On the driver: through Connection.execute, the statement's compile and result
        # plumbing cost about as much as the scan of a small partition.
        hits.extend(conn.exec_driver_sql(sql, (blob, k, key, *tail)).all())
    hits.sort(key=lambda h: h[1])
    return hits[:k]


def count_unembedded(conn: Connection, where: Any = None) -> int:
    """Rows (matching ``where``) that have no vector yet."""
    stmt = (
        select(func.count()).select_from(memories)
        .outerjoin(memory_vectors, memory_vectors.c.memory_seq == memories.c.seq)
        .where(memory_vectors.c.memory_seq.is_(None))
    )
    if where is not None:
        stmt = stmt.where(where)
    return int(conn.execute(stmt).scalar_one())
