"""SqliteBackend: the SQLite implementation of store/backend.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Connection, Select, Table
from sqlalchemy.dialects import sqlite

from memoryd.store.backend import Backend
from memoryd.store.sqlite import crossjoin, lexical, vectors

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
        return crossjoin.by_seq(columns, name)

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
