"""SqliteBackend: the SQLite implementation of store/backend.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Connection, Select, Table, bindparam, func, select
from sqlalchemy.dialects import sqlite

from memoryd.store.backend import Backend
from memoryd.store.schema import memories
from memoryd.store.sqlite import lexical, vectors
from memoryd.store.sqlite.crossjoin import CrossJoin

if TYPE_CHECKING:
    import numpy as np

    from memoryd.store.search_request import SearchRequest


class SqliteBackend(Backend):
    """SQLite with FTS5 and sqlite-vec (store/sqlite/lexical.py, store/sqlite/vectors.py)."""

    name = "sqlite"
    max_knn = vectors.MAX_KNN
    one_writer = True

    def insert(self, table: Table) -> sqlite.Insert:
        return sqlite.insert(table)

    def by_seq(self, columns: Sequence[ColumnElement[Any]], name: str) -> Select[Any]:
        # A JSON array read by json_each (an expanding IN would recompile per list length),
        # as the outer loop of a CROSS JOIN, which SQLite never reorders: each seq is one
        # rowid lookup. As `seq IN (SELECT value FROM json_each(?))` with a status or scope
        # condition, the planner walked ix_memories_status (or the reader's rows by
        # ix_memories_identity, once ANALYZE had run) instead: 0.51 against 0.33 ms for
        # the 200 candidates of a lexical leg at 10k memories.
        wanted = func.json_each(bindparam(name, "[]")).table_valued("value").alias("wanted")
        return select(*columns).select_from(
            CrossJoin(wanted, memories, memories.c.seq == wanted.c.value))

    def seq_values(self, seqs: Sequence[int]) -> Any:
        return json.dumps([int(s) for s in seqs])

    def lock_claim(self, pick: Select[Any]) -> Select[Any]:
        # The claim's transaction began IMMEDIATE (store/engine.py): no other writer runs.
        return pick

    def lexical(self, conn: Connection, req: SearchRequest, now: str, limit: int) -> list[dict[str, Any]]:
        return lexical.lexical(conn, req, now, limit)

    def knn(self, conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
            statuses: Sequence[str], kind: str | None) -> list[tuple[int, float]]:
        return vectors.knn(conn, query, k=k, scope_keys=scope_keys, statuses=statuses, kind=kind)

    def upsert_vectors(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        vectors.upsert(conn, rows)

    def erase_vectors(self, conn: Connection, seqs: Sequence[int]) -> int:
        return vectors.erase(conn, seqs)

    def rebuild_vector_index(self, conn: Connection, dim: int) -> None:
        vectors.rebuild_index(conn, dim)
