"""Embedding vectors: where they live, how they are searched, and how they are erased.

``memory_vectors`` is what the rest of memoryd reads and writes: one row per
embedded memory (``memory_seq``, ``model``, ``dim``, ``vector``,
``content_hash``, ``embedded_at``). On PostgreSQL it is a plain table. On
SQLite (migration 0007) each float32 vector is stored once, in the vec0 table
``memory_vec`` that the nearest-neighbour search scans, and ``memory_vectors``
is a view over ``memory_vectors_meta`` (the other columns) that reads the
vector out of ``memory_vec``; inserting into the view stores or replaces a
memory's vector, deleting from it erases one. Keeping a second copy of every
vector cost 1.5 KB a memory (bench/bytes.py).

Layout of ``memory_vec`` (chosen by bench/bytes.py and bench/search.py; see
docs/architecture.md): each (scope, owner) pair gets an integer ``owner_id`` in
``vector_owners``, and its vectors live in partition ``bucket = owner_id %
BUCKETS`` with ``owner_id`` as a metadata column the KNN filters on inside the
scan. A search scans only the buckets of the pairs it may see; a store spread
over thousands of sessions costs at most BUCKETS partly filled chunks, where
a partition per pair cost a 1,024-vector chunk (1.6 MB) per session.

Triggers (migration 0007) keep ``memory_vec`` in step with ``memories``:
status and kind follow the row, a change of scope or owner moves the vector to
its new owner, and a deleted row or changed content erases it. Every erasure
overwrites the vector's bytes with zeros before the delete, whatever the
sqlite-vec version (0.1.6 left them in the chunk).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import structlog
from sqlalchemy import Column, Connection, Engine, MetaData, String, Table, func, insert, select, text
from sqlalchemy.dialects import postgresql

from memoryd.errors import MemorydError
from memoryd.store.schema import memories, memory_vectors

log = structlog.get_logger(__name__)

#: vec0's largest k.
MAX_KNN = 4096
#: Partitions of the vector index; an owner's vectors live in partition owner_id % BUCKETS.
#: Part of the schema (the triggers compute it too): changing it takes a migration that
#: rebuilds memory_vec and its triggers.
BUCKETS = 16
#: Vectors per vec0 chunk (sqlite-vec's default is 1,024): the most a partly filled chunk wastes.
CHUNK_SIZE = 128
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


def to_blob(vector: np.ndarray) -> bytes:
    """float32 little-endian bytes (sqlite-vec's native layout)."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


# -- SQLite objects (migration 0007 creates them; reembed rebuilds the index) ------------------------
def index_ddl(dim: int) -> str:
    """The vec0 table at ``dim`` dimensions."""
    return ("CREATE VIRTUAL TABLE memory_vec USING vec0("
            f"memory_seq integer primary key, embedding float[{int(dim)}] distance_metric=cosine, "
            "bucket integer partition key, owner_id integer, status text, kind text, "
            f"chunk_size={CHUNK_SIZE})")


def zero_index_sql() -> str:
    """Overwrite every vector the vec0 table holds, live or deleted, in one statement per chunk
    (its shadow table; an UPDATE through vec0 itself would visit every row)."""
    return "UPDATE memory_vec_vector_chunks00 SET vectors = zeroblob(length(vectors))"


# -- writing and erasing --------------------------------------------------------------------------------
def upsert(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert or replace vectors (``memory_seq``, ``model``, ``dim``, ``vector``,
    ``content_hash``, ``embedded_at``); replacing is what makes re-embedding idempotent.

    On SQLite an insert into the ``memory_vectors`` view replaces (its trigger
    erases the old vector first) and files the vector under its owner's partition.
    """
    if not rows:
        return
    if setting(conn, "model") is None:
        # The store's embedder is decided by its first vectors (check_dimension reads this).
        set_setting(conn, "model", str(rows[0]["model"]))
    if conn.dialect.name == "sqlite":
        conn.execute(insert(memory_vectors), list(rows))
        return
    stmt = postgresql.insert(memory_vectors)
    cols = ("model", "dim", "vector", "content_hash", "embedded_at")
    stmt = stmt.on_conflict_do_update(
        index_elements=[memory_vectors.c.memory_seq], set_={c: stmt.excluded[c] for c in cols},
    )
    conn.execute(stmt, list(rows))


def erase(conn: Connection, seqs: Sequence[int]) -> int:
    """Erase the vectors of memories ``seqs``: overwrite the stored floats with zeros,
    then delete them. Returns how many vectors there were.

    Call it inside the transaction that forgets the rows. The memories' own
    triggers also erase a vector when its row is deleted or its content
    changes or is cleared (a forget); this is for callers that drop vectors
    while keeping the row. Old page images stay in the WAL until a checkpoint.
    """
    if not seqs:
        return 0
    wanted = [int(s) for s in seqs]
    as_json = json.dumps(wanted)
    if conn.dialect.name != "sqlite":
        deleted = conn.execute(memory_vectors.delete().where(memory_vectors.c.memory_seq.in_(wanted)))
        return int(deleted.rowcount or 0)
    params = {"seqs": as_json}
    found = int(conn.execute(text(
        "SELECT count(*) FROM memory_vectors_meta WHERE memory_seq IN (SELECT value FROM json_each(:seqs))"),
        params).scalar_one())
    # One statement per vec0 row: a vec0 UPDATE or DELETE by a set of keys scans the whole index.
    for seq in wanted:
        conn.exec_driver_sql(
            "UPDATE memory_vec SET embedding = zeroblob(length(embedding)) WHERE memory_seq = ?", (seq,))
        conn.exec_driver_sql("DELETE FROM memory_vec WHERE memory_seq = ?", (seq,))
    conn.execute(text("DELETE FROM memory_vectors_meta WHERE memory_seq IN "
                      "(SELECT value FROM json_each(:seqs))"), params)
    return found


# -- searching ------------------------------------------------------------------------------------------
def knn(conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
        statuses: Sequence[str], kind: str | None) -> list[tuple[int, float]]:
    """(memory_seq, cosine distance) of the ``k`` nearest vectors that pass the
    scope, status and kind filters, nearest first.

    ``scope_keys`` are the visible ``scope:owner`` pairs. Each is searched in
    its own bucket with its ``owner_id``, status and kind applied inside the
    scan (never a fixed cut filtered afterwards), and the per-owner top-k
    lists are merged.
    """
    keys = list(dict.fromkeys(scope_keys))
    if not keys or k <= 0:
        return []
    k = min(k, MAX_KNN)
    owners = conn.exec_driver_sql(
        f"SELECT id FROM vector_owners WHERE scope_key IN ({', '.join('?' * len(keys))})",
        tuple(keys)).all()
    if not owners:
        return []
    sql = ("SELECT memory_seq, distance FROM memory_vec WHERE embedding MATCH ? AND k = ? "
           f"AND bucket = ? AND owner_id = ? AND status IN ({', '.join('?' * len(statuses))})")
    tail: tuple[str, ...] = tuple(statuses)
    if kind:
        sql += " AND kind = ?"
        tail += (kind,)
    blob = to_blob(query)
    hits: list[tuple[int, float]] = []
    for (owner_id,) in owners:
        # On the driver: through Connection.execute, the statement's compile and result
        # plumbing cost about as much as the scan of a small partition.
        hits.extend(conn.exec_driver_sql(sql, (blob, k, owner_id % BUCKETS, owner_id, *tail)).all())
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
    if conn.dialect.name == "sqlite":
        if conn.exec_driver_sql("PRAGMA secure_delete").scalar() != 1:
            # Under secure_delete (memoryd's connections set it) the DROP zeroes its pages.
            conn.exec_driver_sql(zero_index_sql())
        conn.exec_driver_sql("DROP TABLE memory_vec")
        conn.exec_driver_sql("DELETE FROM memory_vectors_meta")
        conn.exec_driver_sql("DELETE FROM vector_owners")
        conn.exec_driver_sql(index_ddl(dim))
    else:
        conn.execute(memory_vectors.delete())
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
#: reclaim_space vacuums when at least this much of the file is free pages...
RECLAIM_MIN_FREE_BYTES = 16 << 20
#: ...and at most this much is live data (a vacuum copies the live pages: ~1 s for 4 MB live
#: out of 464 MB, bench/bytes.py); a larger store is told how to do it.
RECLAIM_MAX_LIVE_BYTES = 1 << 30


def reclaim_space(engine: Engine) -> tuple[int, int] | None:
    """Give free pages back to the file system when they are most of the file.

    Migration 0007 (and ``memoryd reembed``) free the old index's pages: a store
    that grew 1.6 MB a session keeps its size until vacuumed. Run at start,
    before serving. Returns (bytes before, bytes after) when it vacuumed.
    """
    if engine.dialect.name != "sqlite":
        return None
    raw = engine.raw_connection()
    try:
        dbapi = raw.driver_connection
        assert dbapi is not None
        page = int(dbapi.execute("PRAGMA page_size").fetchone()[0])
        pages = int(dbapi.execute("PRAGMA page_count").fetchone()[0])
        free = int(dbapi.execute("PRAGMA freelist_count").fetchone()[0])
        free_bytes, live_bytes = free * page, (pages - free) * page
        if free_bytes < RECLAIM_MIN_FREE_BYTES or free_bytes < live_bytes:
            return None
        if live_bytes > RECLAIM_MAX_LIVE_BYTES:
            log.warning("store.space_reclaimable", free_bytes=free_bytes, live_bytes=live_bytes,
                        fix="stop the daemon, then run: sqlite3 memoryd.db 'VACUUM'")
            return None
        try:
            dbapi.execute("VACUUM")
            dbapi.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except Exception as exc:  # e.g. no room for the copy: the store works as it is
            log.warning("store.vacuum_failed", error=f"{type(exc).__name__}: {exc}",
                        free_bytes=free_bytes)
            return None
        after = int(dbapi.execute("PRAGMA page_count").fetchone()[0]) * page
    finally:
        raw.close()
    log.info("store.vacuumed", bytes_before=pages * page, bytes_after=after)
    return pages * page, after
