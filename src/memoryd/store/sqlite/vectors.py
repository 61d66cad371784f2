"""Vectors on SQLite: the sqlite-vec (vec0) index ``memory_vec`` and its ``memory_vectors`` view.

Each float32 vector is stored once, in the vec0 table ``memory_vec`` that the
nearest-neighbour search scans; ``memory_vectors`` (migration 0007) is a view
over ``memory_vectors_meta`` (model, dim, content hash, time) that reads the
vector out of ``memory_vec``. Inserting into the view stores or replaces a
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
from sqlalchemy import Connection, Engine, insert, text

from memoryd.store.annindex import index_set as ann_set
from memoryd.store.schema import memory_vectors

log = structlog.get_logger(__name__)

#: vec0's largest k.
MAX_KNN = 4096
#: Partitions of the vector index; an owner's vectors live in partition owner_id % BUCKETS.
#: Part of the schema (the triggers compute it too): changing it takes a migration that
#: rebuilds memory_vec and its triggers.
BUCKETS = 16
#: Vectors per vec0 chunk (sqlite-vec's default is 1,024): the most a partly filled chunk wastes.
CHUNK_SIZE = 128


def to_blob(vector: np.ndarray) -> bytes:
    """float32 little-endian bytes (sqlite-vec's native layout)."""
    return np.asarray(vector, dtype="<f4").tobytes()


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


def upsert(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """An insert into the ``memory_vectors`` view replaces (its trigger erases the old vector
    first) and files the vector under its owner's partition."""
    conn.execute(insert(memory_vectors), list(rows))


def erase(conn: Connection, seqs: Sequence[int]) -> int:
    """Zero, then delete, the vec0 entries of ``seqs`` and their metadata; return how many there were."""
    wanted = [int(s) for s in seqs]
    params = {"seqs": json.dumps(wanted)}
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


def knn(conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
        statuses: Sequence[str], kind: str | None) -> list[tuple[int, float]]:
    """vec0 KNN: each visible ``scope:owner`` key is searched in its own bucket with its
    ``owner_id``, status and kind applied inside the scan, and the per-owner top-k lists
    are merged.

    One statement: ``vector_owners`` is the outer loop of a CROSS JOIN, and each of its rows
    hands vec0 its bucket and owner_id as constraints, so ``k`` applies per owner as it
    would in a query per owner. On the driver: through Connection.execute, the statement's
    compile and result plumbing cost about as much as the scan of a small partition.
    """
    keys = list(dict.fromkeys(scope_keys))
    if not keys or k <= 0:
        return []

    def exact(some_keys: Sequence[str], n: int) -> list[tuple[int, float]]:
        sql, params = knn_query(query, k=min(n, MAX_KNN), scope_keys=some_keys, statuses=statuses, kind=kind)
        return [(int(seq), float(d)) for seq, d in conn.exec_driver_sql(sql, params).all()]

    # A daemon keeps HNSW graphs for its large owners (store/annindex/index_set.py); they answer
    # for those owners and this scan for the rest.
    ann = ann_set.attached(conn.engine)
    if ann is not None:
        return ann.knn(conn, query, k=k, scope_keys=keys, statuses=statuses, kind=kind, exact=exact)
    return exact(keys, k)


def knn_query(query: np.ndarray, *, k: int, scope_keys: Sequence[str], statuses: Sequence[str],
              kind: str | None) -> tuple[str, tuple[Any, ...]]:
    """The SQL and driver parameters of :func:`knn`'s one statement (bench/search.py times the
    same statement as its raw baseline)."""
    sql = ("SELECT v.memory_seq, v.distance FROM vector_owners AS o CROSS JOIN memory_vec AS v "
           f"ON v.bucket = o.id % {BUCKETS} AND v.owner_id = o.id "
           f"WHERE o.scope_key IN ({', '.join('?' * len(scope_keys))}) AND v.embedding MATCH ? "
           f"AND v.k = ? AND v.status IN ({', '.join('?' * len(statuses))})")
    params: tuple[Any, ...] = (*scope_keys, to_blob(query), k, *statuses)
    if kind:
        sql += " AND v.kind = ?"
        params += (kind,)
    return sql + " ORDER BY v.distance LIMIT ?", (*params, k)


def rebuild_index(conn: Connection, dim: int) -> None:
    """Drop the vec0 table and every vector, and create it again at ``dim`` dimensions.

    No float survives in the file: under ``secure_delete`` the DROP zeroes the
    pages it frees, and without it the chunks are zeroed first.
    """
    if conn.exec_driver_sql("PRAGMA secure_delete").scalar() != 1:
        conn.exec_driver_sql(zero_index_sql())
    conn.exec_driver_sql("DROP TABLE memory_vec")
    conn.exec_driver_sql("DELETE FROM memory_vectors_meta")
    conn.exec_driver_sql("DELETE FROM vector_owners")
    conn.exec_driver_sql(index_ddl(dim))


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
