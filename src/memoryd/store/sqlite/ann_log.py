"""What the HNSW graphs beside a SQLite store read (store/annindex/source.py): the vector change
log, and the vectors in sqlite-vec's ``memory_vec`` with their owner ids from ``vector_owners``.

SQLite commits one writer at a time, so a log id issued first is committed
first, and the graphs stand at the last id they applied. Triggers
(:data:`LOG_DDL`) append the ``seq`` of every memory whose vector, status,
kind or owner changes, in the writer's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import numpy as np
from sqlalchemy import Connection, Engine

from memoryd.store.annindex.source import ScanChunk, VectorRow, VectorSource
from memoryd.store.lexindex.changelog import Position
from memoryd.store.sidecar import trim_log
from memoryd.store.sqlite.lex_log import SqliteLog, last_log_id

LOG_TABLE = "vector_index_log"
_TRIGGERS = ("vector_index_log_vi", "vector_index_log_vd", "vector_index_log_mu")
#: The log and its triggers, created at start (idempotent) on every SQLite store a daemon with the
#: vector index opens.
LOG_DDL = [
    f"CREATE TABLE IF NOT EXISTS {LOG_TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "memory_seq INTEGER NOT NULL)",
    f"CREATE TRIGGER IF NOT EXISTS {_TRIGGERS[0]} AFTER INSERT ON memory_vectors_meta BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq) VALUES (new.memory_seq); END",
    f"CREATE TRIGGER IF NOT EXISTS {_TRIGGERS[1]} AFTER DELETE ON memory_vectors_meta BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq) VALUES (old.memory_seq); END",
    f"CREATE TRIGGER IF NOT EXISTS {_TRIGGERS[2]} AFTER UPDATE OF status, kind, scope, owner "
    "ON memories WHEN (new.status IS NOT old.status OR new.kind IS NOT old.kind "
    "OR new.scope IS NOT old.scope OR new.owner IS NOT old.owner) "
    "AND EXISTS (SELECT 1 FROM memory_vectors_meta WHERE memory_seq = new.seq) BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq) VALUES (new.seq); END",
]


def ensure_log(conn: Connection) -> None:
    """Create the change log and its triggers if this store has none yet."""
    for statement in LOG_DDL:
        conn.exec_driver_sql(statement)


class SqliteVectorLog(SqliteLog):
    """Read as the lexical log is, by id; no state table (the log is never dropped while the
    index is on, and entries carry no erasure flag: a graph erases what leaves it)."""

    table = LOG_TABLE
    erased = "0"

    def ensure(self, conn: Connection) -> None:
        ensure_log(conn)

    def drop(self, conn: Connection) -> None:
        for name in _TRIGGERS:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {LOG_TABLE}")

    def history(self, conn: Connection) -> str:
        return ""  # one log for the store's life: the triggers are never dropped

    def holds(self, conn: Connection, position: Position) -> bool:
        # Trimmed only up to what a saved manifest holds; a position past the last id issued is
        # from a database restored from before it.
        return position.mark <= last_log_id(conn, LOG_TABLE)

    def trim(self, engine: Engine, position: Position, reader: str) -> None:
        trim_log(engine, [(f"DELETE FROM {LOG_TABLE} WHERE id <= ?", (position.mark,))])


class SqliteVectors(VectorSource):
    """sqlite-vec's ``memory_vec`` (its metadata columns hold owner id, status and kind)."""

    def __init__(self) -> None:
        self.log = SqliteVectorLog()

    def settings(self, conn: Connection) -> tuple[int | None, str | None]:
        values = {str(k): str(v) for k, v in conn.exec_driver_sql("SELECT key, value FROM vector_settings")}
        dim = values.get("dim")
        return (int(dim) if dim is not None else None), values.get("model")

    def top_seq(self, conn: Connection) -> int:
        top = conn.exec_driver_sql("SELECT max(memory_seq) FROM memory_vectors_meta").scalar()
        return int(top or 0)

    def scan(self, conn: Connection, chunk: int) -> Iterator[ScanChunk]:
        # From the tables, not the vec0 scan.
        result = conn.exec_driver_sql(
            "SELECT mm.memory_seq, o.id, m.kind FROM memory_vectors_meta mm "
            "JOIN memories m ON m.seq = mm.memory_seq "
            "JOIN vector_owners o ON o.scope_key = m.scope || ':' || m.owner")
        while rows := result.fetchmany(chunk):
            yield ScanChunk(np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                            np.fromiter((r[1] for r in rows), dtype=np.int32, count=len(rows)),
                            [r[2] for r in rows])

    def rows(self, conn: Connection, seqs: Sequence[int]) -> dict[int, VectorRow]:
        out: dict[int, VectorRow] = {}
        for seq in seqs:
            row = conn.exec_driver_sql("SELECT owner_id, status, kind, embedding FROM memory_vec "
                                       "WHERE memory_seq = ?", (seq,)).first()
            if row is not None:
                vec = np.frombuffer(row[3], dtype="<f4")
                out[int(seq)] = VectorRow(int(row[0]), str(row[1]), row[2], vec)
        return out

    def owner_ids(self, conn: Connection, keys: Sequence[str]) -> dict[str, int]:
        marks = ", ".join("?" * len(keys))
        return {str(key): int(i) for i, key in conn.exec_driver_sql(
            f"SELECT id, scope_key FROM vector_owners WHERE scope_key IN ({marks})", tuple(keys))}

    def owner_key(self, conn: Connection, owner: int) -> str:
        key = conn.exec_driver_sql("SELECT scope_key FROM vector_owners WHERE id = ?", (owner,)).scalar()
        return str(key or "")

    def active_seqs(self, conn: Connection, key: str, status: str) -> list[int]:
        scope, _, name = key.partition(":")
        # By scope and owner (the identity index), not by the joined key: 2.2 s a build at 1M.
        return [int(r[0]) for r in conn.exec_driver_sql(
            "SELECT m.seq FROM memories m JOIN memory_vectors_meta mm ON mm.memory_seq = m.seq "
            "WHERE m.scope = ? AND m.owner = ? AND m.status = ? ORDER BY m.seq", (scope, name, status))]

    def vectors(self, conn: Connection, seqs: Sequence[int]) -> tuple[list[int], np.ndarray]:
        rows = conn.exec_driver_sql(
            "SELECT j.value, v.embedding FROM json_each(?) AS j CROSS JOIN memory_vec AS v "
            "ON v.memory_seq = j.value", (json.dumps(list(seqs)),)).all()
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), -1)
        return [int(r[0]) for r in rows], vecs
