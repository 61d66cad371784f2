"""Embedding vectors: what the rest of memoryd reads and writes, on any backend.

``memory_vectors`` holds one row per embedded memory (``memory_seq``,
``model``, ``dim``, ``vector``, ``content_hash``, ``embedded_at``); passes read
``vector`` as float32 little-endian bytes (:func:`from_blob`) on both backends.
How a backend stores, searches and erases them lives in its own folder:
store/sqlite/vectors.py (a sqlite-vec vec0 index behind a view) and
store/postgres/vectors.py (a pgvector column with an HNSW index). This module
keeps the backend-neutral parts: the index's recorded dimension and model
(``vector_settings``), the check at start, and the calls that dispatch to the
backend (store/backend.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import structlog
from sqlalchemy import Column, Connection, Engine, MetaData, String, Table, func, select

from memoryd.errors import MemorydError
from memoryd.store.backends import backend_for
from memoryd.store.schema import memories, memory_vectors
from memoryd.store.sqlite import vectors as sqlite_vectors
from memoryd.store.sqlite.vectors import BUCKETS, CHUNK_SIZE, MAX_KNN, index_ddl, to_blob, zero_index_sql

log = structlog.get_logger(__name__)

#: The dimension migrations 0002 and 0005 gave the index, before the store recorded one.
LEGACY_DIM = 384

_settings_metadata = MetaData()
#: Facts about the vector index (migration 0007): ``dim`` and ``model``.
vector_settings = Table(
    "vector_settings", _settings_metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(1024), nullable=False),
)


class DimensionMismatch(MemorydError):
    """The embedder makes vectors of another dimension than the store's index holds."""

    code = 1003


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


# -- writing, erasing, searching: the backend's ---------------------------------------------------------
__all__ = ["BUCKETS", "CHUNK_SIZE", "MAX_KNN", "index_ddl", "to_blob", "zero_index_sql"]


def upsert(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert or replace vectors (``memory_seq``, ``model``, ``dim``, ``vector``,
    ``content_hash``, ``embedded_at``); replacing is what makes re-embedding idempotent."""
    if not rows:
        return
    if setting(conn, "model") is None:
        # The store's embedder is decided by its first vectors (check_dimension reads this).
        set_setting(conn, "model", str(rows[0]["model"]))
    backend_for(conn).upsert_vectors(conn, rows)


def erase(conn: Connection, seqs: Sequence[int]) -> int:
    """Erase the vectors of memories ``seqs`` (on SQLite the stored floats are overwritten with
    zeros first); return how many vectors there were.

    Call it inside the transaction that forgets the rows. A deleted row, or a
    row whose content changes or is cleared (a forget), loses its vector with
    it on both backends; this is for callers that drop vectors while keeping
    the row. Old page images stay in the WAL until a checkpoint.
    """
    if not seqs:
        return 0
    return backend_for(conn).erase_vectors(conn, seqs)


def knn(conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
        statuses: Sequence[str], kind: str | None) -> list[tuple[int, float]]:
    """(memory_seq, cosine distance) of the ``k`` nearest vectors that pass the
    scope, status and kind filters, nearest first.

    ``scope_keys`` are the visible ``scope:owner`` pairs (store/scope.py
    scope_keys). The backend applies the filters inside its nearest-neighbour
    search, never to a fixed cut afterwards.
    """
    if k <= 0 or not scope_keys:
        return []
    return backend_for(conn).knn(conn, query, k=k, scope_keys=scope_keys, statuses=statuses, kind=kind)


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


def embedded_seqs(conn: Connection, seqs: Sequence[int]) -> set[int]:
    """Those of the memories ``seqs`` that have a vector."""
    if not seqs:
        return set()
    stmt = select(memory_vectors.c.memory_seq).where(memory_vectors.c.memory_seq.in_(list(seqs)))
    return {int(r[0]) for r in conn.execute(stmt)}


# -- the index's dimension ------------------------------------------------------------------------------
def setting(conn: Connection, key: str) -> str | None:
    """One value of ``vector_settings`` (None when unset)."""
    value = conn.execute(select(vector_settings.c.value).where(vector_settings.c.key == key)).scalar()
    return None if value is None else str(value)


def set_setting(conn: Connection, key: str, value: str) -> None:
    conn.execute(vector_settings.delete().where(vector_settings.c.key == key))
    conn.execute(vector_settings.insert().values(key=key, value=value))


def index_dim(conn: Connection) -> int | None:
    """The dimension the store's vectors have (None on a store without the setting)."""
    value = setting(conn, "dim")
    return int(value) if value is not None else None


def stored_count(conn: Connection) -> int:
    """How many memories have a vector."""
    return int(conn.execute(select(func.count()).select_from(memory_vectors)).scalar_one())


def rebuild_index(conn: Connection, dim: int, model: str) -> int:
    """Drop every vector and recreate the index at ``dim`` dimensions; return how many were dropped.

    No float survives in the file: under ``secure_delete`` the DROP zeroes the
    pages it frees, and without it the chunks are zeroed first. Memories keep
    their rows; the caller queues them for embedding.
    """
    dropped = stored_count(conn)
    backend_for(conn).rebuild_vector_index(conn, dim)
    set_setting(conn, "dim", str(int(dim)))
    set_setting(conn, "model", model)
    return dropped


def check_dimension(engine: Engine, dim: int | None, model: str, spec: str) -> None:
    """At daemon start: make sure the embedder's vectors fit the store's index.

    ``dim`` is the configured embedder's dimension (None when it is off or
    unknown: the embed pass then checks each batch). A store whose embedder
    is not decided yet (no vectors, no model recorded: a new store) adopts
    this one: its empty index is rebuilt at ``dim`` and the model recorded.
    Otherwise another dimension is refused with the way out; ``memoryd
    reembed`` records its model, so a store it emptied keeps its new dimension.
    """
    if dim is None:
        return
    with engine.begin() as conn:
        stored = index_dim(conn)
        if stored == dim:
            return
        count = stored_count(conn)
        decided = setting(conn, "model")
        if count == 0 and decided is None:
            rebuild_index(conn, dim, model)
            log.info("store.vector_index_rebuilt", dim=dim, previous_dim=stored, model=model)
            return
    made_by = f", made by {decided!r}" if decided else ""
    raise DimensionMismatch(
        f"the embedder {model!r} makes {dim}-dimensional vectors, but this store's vector index "
        f"holds {stored}-dimensional ones ({count} stored{made_by}); run `memoryd reembed "
        f"--embedder {spec}` with the daemon stopped to re-embed every memory with it, or start "
        "with the embedder the store was built with"
    )


# -- space ----------------------------------------------------------------------------------------------
def reclaim_space(engine: Engine) -> tuple[int, int] | None:
    """Give free pages back to the file system when they are most of a SQLite file (see
    store/sqlite/vectors.py reclaim_space); nothing to do on PostgreSQL (autovacuum)."""
    if engine.dialect.name != "sqlite":
        return None
    return sqlite_vectors.reclaim_space(engine)
