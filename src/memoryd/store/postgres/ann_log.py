"""What the HNSW graphs beside a PostgreSQL store read (store/annindex/source.py): the vector
change log, and pgvector's ``memory_vectors`` with each row's owner, status and kind.

pgvector's own HNSW index is one graph over every row. At a million real
all-MiniLM-L6-v2 sentence vectors it found 0.372 of the exact top 10 through
the daemon, and at most 0.445 at its widest beam (``ef_search`` 1,000): one
graph loses recall as it grows (docs/postgresql.md). So each daemon keeps the
graphs SQLite's daemon keeps, split by ``seq`` into parts of bounded size,
beside the database as it keeps its lexical shards, and pgvector's index
answers until they are ready.

The log is the lexical index's kind (store/postgres/lex_log.py: entries carry
their writer's transaction id, every daemon records its position, and the log
is trimmed to what every reader seen in the last day has applied), in tables of
its own, fed by its own triggers: a vector written or replaced (one statement
logs a whole batch), a vector deleted (a forgotten memory's: ``erased``), and a
memory whose status, kind or owner changes while it has a vector.

Owner ids are this daemon's own: the small integers its arrays and file names
use, given to each ``scope:owner`` key as it is first seen and kept in the
graphs' manifest.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection, text

from memoryd.store.annindex.source import ScanChunk, VectorRow, VectorSource
from memoryd.store.postgres.lex_log import PostgresLog, tables_ddl

LOG_TABLE = "vector_index_log"
STATE_TABLE = "vector_index_state"
READERS_TABLE = "vector_index_readers"
#: pg_advisory_xact_lock key for creating and dropping the log (store/postgres/backend.py's namespace).
LOG_LOCK = 0x6D656D6F_0005
_FUNCTIONS = ("memoryd_vector_log_rows", "memoryd_vector_log_gone", "memoryd_vector_log_memory")
_TRIGGERS = ("vector_index_log_vi", "vector_index_log_vu", "vector_index_log_vd", "vector_index_log_mu")

LOG_DDL = [
    *tables_ddl(LOG_TABLE, STATE_TABLE, READERS_TABLE),
    f"CREATE OR REPLACE FUNCTION {_FUNCTIONS[0]}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq) SELECT memory_seq FROM new_rows; RETURN NULL; END $$",
    f"CREATE OR REPLACE FUNCTION {_FUNCTIONS[1]}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq, erased) SELECT memory_seq, true FROM old_rows; "
    "RETURN NULL; END $$",
    f"CREATE OR REPLACE FUNCTION {_FUNCTIONS[2]}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF EXISTS (SELECT 1 FROM memory_vectors WHERE memory_seq = NEW.seq) THEN "
    f"INSERT INTO {LOG_TABLE} (memory_seq) VALUES (NEW.seq); END IF; RETURN NULL; END $$",
]
_TRIGGER_TABLES = {_TRIGGERS[0]: "memory_vectors", _TRIGGERS[1]: "memory_vectors",
                   _TRIGGERS[2]: "memory_vectors", _TRIGGERS[3]: "memories"}
_TRIGGER_SQL = {
    # An upsert (INSERT ... ON CONFLICT DO UPDATE) fires both statement triggers, each with its rows.
    _TRIGGERS[0]: f"CREATE TRIGGER {_TRIGGERS[0]} AFTER INSERT ON memory_vectors REFERENCING NEW TABLE "
                  f"AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {_FUNCTIONS[0]}()",
    _TRIGGERS[1]: f"CREATE TRIGGER {_TRIGGERS[1]} AFTER UPDATE ON memory_vectors REFERENCING NEW TABLE "
                  f"AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {_FUNCTIONS[0]}()",
    _TRIGGERS[2]: f"CREATE TRIGGER {_TRIGGERS[2]} AFTER DELETE ON memory_vectors REFERENCING OLD TABLE "
                  f"AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {_FUNCTIONS[1]}()",
    _TRIGGERS[3]: f"CREATE TRIGGER {_TRIGGERS[3]} AFTER UPDATE OF status, kind, scope, owner ON memories "
                  "FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.kind IS DISTINCT "
                  "FROM OLD.kind OR NEW.scope IS DISTINCT FROM OLD.scope OR NEW.owner IS DISTINCT FROM "
                  f"OLD.owner) EXECUTE FUNCTION {_FUNCTIONS[2]}()",
}

_ROWS = ("SELECT m.seq, m.scope || ':' || m.owner, m.status, m.kind, v.vector FROM memory_vectors v "
         "JOIN memories m ON m.seq = v.memory_seq WHERE v.memory_seq = ANY(%s)")
_VECTORS = "SELECT memory_seq, vector FROM memory_vectors WHERE memory_seq = ANY(%s) ORDER BY memory_seq"


class PostgresVectorLog(PostgresLog):
    table = LOG_TABLE
    state_table = STATE_TABLE
    readers_table = READERS_TABLE
    lock_key = LOG_LOCK
    ddl = LOG_DDL
    trigger_tables = _TRIGGER_TABLES
    trigger_sql = _TRIGGER_SQL
    functions = _FUNCTIONS


def _binary_rows(conn: Connection, sql: str, seqs: Sequence[int]) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` (one ``%s``: the seqs) read in binary, in ``conn``'s transaction: pgvector
    sends a vector as two int16 (dimension, unused) and big-endian float4s, read here by numpy
    (its text form costs a float parse per element)."""
    raw: Any = conn.connection.driver_connection
    with raw.cursor(binary=True) as cur:
        cur.execute(sql, ([int(s) for s in seqs],))
        return list(cur.fetchall())


def _floats(value: bytes) -> np.ndarray:
    return np.frombuffer(value, dtype=">f4", offset=4).astype("<f4")


class PostgresVectors(VectorSource):
    """``memory_vectors`` (pgvector) joined to ``memories``, and owner ids of this daemon's own."""

    def __init__(self) -> None:
        self.log = PostgresVectorLog()
        self._ids: dict[str, int] = {}
        self._keys: dict[int, str] = {}

    def _id(self, key: str) -> int:
        found = self._ids.get(key)
        if found is None:
            found = len(self._ids) + 1
            self._ids[key] = found
            self._keys[found] = key
        return found

    def settings(self, conn: Connection) -> tuple[int | None, str | None]:
        values = {str(k): str(v) for k, v in conn.execute(text("SELECT key, value FROM vector_settings"))}
        dim = values.get("dim")
        return (int(dim) if dim is not None else None), values.get("model")

    def top_seq(self, conn: Connection) -> int:
        return int(conn.execute(text("SELECT coalesce(max(memory_seq), 0) FROM memory_vectors")).scalar_one())

    def scan(self, conn: Connection, chunk: int) -> Iterator[ScanChunk]:
        result = conn.execution_options(stream_results=True, yield_per=chunk).execute(text(
            "SELECT v.memory_seq, m.scope || ':' || m.owner, m.kind FROM memory_vectors v "
            "JOIN memories m ON m.seq = v.memory_seq"))
        for rows in result.partitions(chunk):
            yield ScanChunk(np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                            np.fromiter((self._id(r[1]) for r in rows), dtype=np.int32, count=len(rows)),
                            [r[2] for r in rows])

    def rows(self, conn: Connection, seqs: Sequence[int]) -> dict[int, VectorRow]:
        return {int(seq): VectorRow(self._id(str(key)), str(status), kind, _floats(vec))
                for seq, key, status, kind, vec in _binary_rows(conn, _ROWS, seqs)}

    def owner_ids(self, conn: Connection, keys: Sequence[str]) -> dict[str, int]:
        return {key: self._ids[key] for key in keys if key in self._ids}

    def owner_key(self, conn: Connection, owner: int) -> str:
        return self._keys.get(owner, "")

    def active_seqs(self, conn: Connection, key: str, status: str) -> list[int]:
        scope, _, name = key.partition(":")
        return [int(r[0]) for r in conn.execute(text(
            "SELECT m.seq FROM memories m JOIN memory_vectors v ON v.memory_seq = m.seq "
            "WHERE m.scope = :scope AND m.owner = :owner AND m.status = :status ORDER BY m.seq"),
            {"scope": scope, "owner": name, "status": status})]

    def vectors(self, conn: Connection, seqs: Sequence[int]) -> tuple[list[int], np.ndarray]:
        rows = _binary_rows(conn, _VECTORS, seqs)
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        return [int(r[0]) for r in rows], np.stack([_floats(r[1]) for r in rows])

    def manifest_state(self) -> dict[str, Any]:
        return {"owner_ids": dict(self._ids)}

    def restore(self, manifest: dict[str, Any] | None) -> bool:
        saved = None if manifest is None else manifest.get("owner_ids")
        if manifest is not None and not isinstance(saved, dict):
            return False
        self._ids = {str(k): int(v) for k, v in (saved or {}).items()}
        self._keys = {v: k for k, v in self._ids.items()}
        return True
