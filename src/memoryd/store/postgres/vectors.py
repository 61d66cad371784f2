"""Vectors on PostgreSQL: ``memory_vectors.vector`` is a pgvector column with an HNSW index on
cosine distance (migration 0008); rows are plain rows, so a deleted memory takes its vector
with it (ON DELETE CASCADE) and an erased one is gone with its row version.

Nearest neighbours with the scope filter inside the search: one statement joins
each vector to its memory and keeps only rows whose (scope, owner), status and
kind the reader may see, ordered by distance, LIMIT k. pgvector 0.8's iterative
index scan (``hnsw.iterative_scan = relaxed_order``) keeps walking the HNSW
graph until k rows pass the filter, instead of filtering a fixed ``ef_search``
cut. If it still returns fewer than k (the reader sees fewer than k rows, or
the scan stopped at ``hnsw.max_scan_tuples``), the same query runs as an exact
scan over the reader's rows, so a visible row is never missed because others
crowded the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, Connection, Float, and_, bindparam, select, tuple_
from sqlalchemy.dialects import postgresql

from memoryd.store.annindex import index_set as ann_set
from memoryd.store.postgres.vector_type import VectorBytes
from memoryd.store.schema import memories, memory_vectors

#: The most rows one nearest-neighbour query returns.
MAX_KNN = 4096
#: hnsw.ef_search: 200 unless k asks for more (pgvector's default is 40; 1000 is its maximum).
#: On 20,000 real all-MiniLM-L6-v2 vectors (bench/studies/pg_hnsw_real.py) an index built with
#: :data:`HNSW_EF_CONSTRUCTION` found 0.97 - 0.98 of the exact top 10 at 200, against 0.78 -
#: 0.97 at 40 (the lower figure when one owner holds every row), for about 2 ms more a search.
MIN_EF_SEARCH = 200
MAX_EF_SEARCH = 1000
#: The HNSW index (migration 0008 made it; 0011 set its build parameter).
HNSW_INDEX = "ix_memory_vectors_hnsw"
#: The graph's degree (pgvector's default) and build beam (its default is 64, which left the
#: graph too sparse for real sentence vectors: 0.91 at ef_search 400 in the same study).
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 200
#: Those two as the index's storage parameters (CREATE INDEX ... WITH, ALTER INDEX ... SET).
HNSW_WITH = f"m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}"


def upsert(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """INSERT ... ON CONFLICT (memory_seq) DO UPDATE: a re-embed replaces the vector."""
    stmt = postgresql.insert(memory_vectors)
    cols = ("model", "dim", "vector", "content_hash", "embedded_at")
    stmt = stmt.on_conflict_do_update(
        index_elements=[memory_vectors.c.memory_seq], set_={c: stmt.excluded[c] for c in cols},
    )
    conn.execute(stmt, list(rows))


def erase(conn: Connection, seqs: Sequence[int]) -> int:
    """Delete the vectors of ``seqs``; return how many there were."""
    wanted = [int(s) for s in seqs]
    deleted = conn.execute(memory_vectors.delete().where(memory_vectors.c.memory_seq.in_(wanted)))
    return int(deleted.rowcount or 0)


def _statement(pairs: Sequence[tuple[str, str]], statuses: Sequence[str], kind: str | None,
               exact: bool) -> Any:
    query = bindparam("query", type_=VectorBytes())
    distance = memory_vectors.c.vector.op("<=>", return_type=Float)(query)
    conds: list[ColumnElement[bool]] = [tuple_(memories.c.scope, memories.c.owner).in_(list(pairs)),
                                        memories.c.status.in_(list(statuses))]
    if kind:
        conds.append(memories.c.kind == kind)
    # "+ 0" hides the ORDER BY from the HNSW index: the exact scan reads the reader's rows by
    # the scope index and sorts them, instead of walking the graph.
    order = distance + 0 if exact else distance
    return (select(memory_vectors.c.memory_seq, distance.label("distance"))
            .join(memories, memories.c.seq == memory_vectors.c.memory_seq)
            .where(and_(*conds)).order_by(order).limit(bindparam("k")))


def knn(conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
        statuses: Sequence[str], kind: str | None) -> list[tuple[int, float]]:
    """The ``k`` nearest visible vectors, nearest first. A daemon keeps HNSW graphs of bounded
    size for its large owners (store/annindex/index_set.py); they answer for those owners, an
    exact scan for the rest, and pgvector's index (:func:`pgvector_knn`) until they are ready."""
    keys = list(dict.fromkeys(scope_keys))
    if not keys or k <= 0:
        return []
    ann = ann_set.attached(conn.engine)
    if ann is None:
        return pgvector_knn(conn, query, k=k, scope_keys=keys, statuses=statuses, kind=kind)

    def exact(some_keys: Sequence[str], n: int) -> list[tuple[int, float]]:
        return _run(conn, query, min(n, MAX_KNN), some_keys, statuses, kind, exact=True)

    def fallback(some_keys: Sequence[str], n: int) -> list[tuple[int, float]]:
        return pgvector_knn(conn, query, k=n, scope_keys=some_keys, statuses=statuses, kind=kind)

    return ann.knn(conn, query, k=k, scope_keys=keys, statuses=statuses, kind=kind, exact=exact,
                   fallback=fallback)


def _run(conn: Connection, query: np.ndarray, k: int, scope_keys: Sequence[str], statuses: Sequence[str],
         kind: str | None, *, exact: bool) -> list[tuple[int, float]]:
    pairs = [(key.split(":", 1)[0], key.split(":", 1)[1]) for key in dict.fromkeys(scope_keys)]
    params = {"query": np.asarray(query, dtype="<f4").tobytes(), "k": k}
    return [(int(s), float(d)) for s, d in conn.execute(_statement(pairs, statuses, kind, exact), params)]


def pgvector_knn(conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
                 statuses: Sequence[str], kind: str | None) -> list[tuple[int, float]]:
    """The ``k`` nearest visible vectors by pgvector's HNSW index, nearest first (see the module
    docstring)."""
    if not scope_keys or k <= 0:
        return []
    k = min(k, MAX_KNN)
    # SET LOCAL: for this transaction only (a search's read transaction, or a pass's).
    conn.exec_driver_sql("SET LOCAL hnsw.iterative_scan = relaxed_order")
    conn.exec_driver_sql(f"SET LOCAL hnsw.ef_search = {max(MIN_EF_SEARCH, min(k, MAX_EF_SEARCH))}")
    hits = _run(conn, query, k, scope_keys, statuses, kind, exact=False)
    if len(hits) < k:
        hits = _run(conn, query, k, scope_keys, statuses, kind, exact=True)
    # relaxed_order may return a few rows out of order.
    hits.sort(key=lambda h: h[1])
    return hits


def rebuild_index(conn: Connection, dim: int) -> None:
    """Drop every vector and retype the column (and its HNSW index) to ``dim`` dimensions."""
    conn.exec_driver_sql("DELETE FROM memory_vectors")
    drop_index(conn)
    conn.exec_driver_sql(f"ALTER TABLE memory_vectors ALTER COLUMN vector TYPE vector({int(dim)}) USING NULL")
    create_index(conn)


def drop_index(conn: Connection) -> None:
    """Drop the HNSW index (a bulk load then builds it once: bench/store_copy.py measured
    10,000 vectors copied in 38.7 s with the index kept up to date row by row)."""
    conn.exec_driver_sql(f"DROP INDEX IF EXISTS {HNSW_INDEX}")


def create_index(conn: Connection, with_: str = HNSW_WITH) -> None:
    """The HNSW index on cosine distance, unless it exists: with the daemon's build parameters,
    or the storage parameters ``with_`` (bench/studies/pg_hnsw_real.py compares them)."""
    conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {HNSW_INDEX} ON memory_vectors "
                         f"USING hnsw (vector vector_cosine_ops) WITH ({with_})")


def index_exists(conn: Connection) -> bool:
    """Whether the HNSW index is there (a bulk load drops it until its end)."""
    return conn.exec_driver_sql(f"SELECT to_regclass('{HNSW_INDEX}')").scalar() is not None


def set_build_parameters(conn: Connection) -> None:
    """Give the existing index the daemon's build parameters, for its next build to use."""
    conn.exec_driver_sql(f"ALTER INDEX {HNSW_INDEX} SET ({HNSW_WITH})")


def reindex(conn: Connection) -> None:
    """Build the HNSW index again with the current parameters, while searches and writes go on
    (``REINDEX ... CONCURRENTLY``: ``conn`` must be in autocommit)."""
    if not index_exists(conn):
        create_index(conn)
        return
    set_build_parameters(conn)
    conn.exec_driver_sql(f"REINDEX INDEX CONCURRENTLY {HNSW_INDEX}")
