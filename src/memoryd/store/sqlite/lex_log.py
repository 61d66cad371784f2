"""The lexical index's change log in a SQLite store (store/lexindex/changelog.py): ids in commit order.

SQLite commits one writer at a time, so a log id issued first is committed
first, and an index stands at the last id it applied. Triggers
(:data:`LOG_DDL`) append the ``seq`` of every memory whose content, status,
kind or owner changes, in the writer's transaction.
"""

from __future__ import annotations

import uuid

from sqlalchemy import Connection, Engine

from memoryd.store.lexindex.changelog import ChangeLog, Entry, Position
from memoryd.store.sidecar import trim_log

LOG_TABLE = "lexical_index_log"
#: One row: the log's history (a random id made with the log) and the id it was trimmed to (the
#: entries up to it are gone: a manifest older than that missed them).
STATE_TABLE = "lexical_index_state"
_TRIGGERS = ("lexical_index_log_mi", "lexical_index_log_md", "lexical_index_log_mu")
#: The change log and its triggers, created when the store first reaches ``min_rows`` (a small
#: store's writes pay nothing for an index it does not have).
LOG_DDL = [
    f"CREATE TABLE IF NOT EXISTS {LOG_TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "memory_seq INTEGER NOT NULL, erased INTEGER NOT NULL DEFAULT 0)",
    f"CREATE TRIGGER IF NOT EXISTS {_TRIGGERS[0]} AFTER INSERT ON memories "
    f"WHEN new.content IS NOT NULL BEGIN INSERT INTO {LOG_TABLE} (memory_seq) VALUES (new.seq); END",
    f"CREATE TRIGGER IF NOT EXISTS {_TRIGGERS[1]} AFTER DELETE ON memories BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq, erased) VALUES (old.seq, 1); END",
    f"CREATE TRIGGER IF NOT EXISTS {_TRIGGERS[2]} AFTER UPDATE OF content, status, kind, scope, owner "
    "ON memories WHEN new.content IS NOT old.content OR new.status IS NOT old.status "
    "OR new.kind IS NOT old.kind OR new.scope IS NOT old.scope OR new.owner IS NOT old.owner BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq, erased) VALUES (new.seq, new.content IS NOT old.content); END",
    f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "history TEXT NOT NULL, trimmed_to INTEGER NOT NULL)",
]


def last_log_id(conn: Connection, table: str = LOG_TABLE) -> int:
    """The last id the log ``table`` issued (SQLite's AUTOINCREMENT counter: it stays when the
    log is trimmed, where max(id) would fall back to 0)."""
    issued = conn.exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).scalar()
    return int(issued or 0)


def _state(conn: Connection) -> tuple[str, int]:
    row = conn.exec_driver_sql(f"SELECT history, trimmed_to FROM {STATE_TABLE} WHERE id = 1").one()
    return str(row[0]), int(row[1])


class SqliteLog(ChangeLog):
    """A log read by id; the lexical index's, unless a subclass names another table
    (store/sqlite/ann_log.py)."""

    table = LOG_TABLE
    #: The SQL of an entry's ``erased`` flag.
    erased = "erased"

    def exists(self, conn: Connection) -> bool:
        found = conn.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                     (self.table,)).first()
        return found is not None

    def ensure(self, conn: Connection) -> None:
        for statement in LOG_DDL:
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql(f"INSERT OR IGNORE INTO {STATE_TABLE} (id, history, trimmed_to) "
                             "VALUES (1, ?, 0)", (uuid.uuid4().hex,))

    def drop(self, conn: Connection) -> None:
        for name in _TRIGGERS:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {LOG_TABLE}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {STATE_TABLE}")

    def history(self, conn: Connection) -> str:
        return _state(conn)[0]

    def head(self, conn: Connection) -> Position:
        return Position(mark=last_log_id(conn, self.table))

    def holds(self, conn: Connection, position: Position) -> bool:
        _, trimmed_to = _state(conn)
        return trimmed_to <= position.mark <= last_log_id(conn)

    def read(self, conn: Connection, position: Position, page: int) -> tuple[list[Entry], Position]:
        rows = conn.exec_driver_sql(
            f"SELECT id, memory_seq, {self.erased} FROM {self.table} WHERE id > ? ORDER BY id LIMIT ?",
            (position.mark, page)).all()
        entries = [Entry(int(r[0]), int(r[1]), bool(r[2])) for r in rows]
        return entries, (Position(mark=entries[-1].id) if entries else position)

    def behind(self, conn: Connection, position: Position, cap: int) -> int:
        return max(0, last_log_id(conn, self.table) - position.mark)

    def seqs_since(self, conn: Connection, since: Position, upto: Position, lo: int, hi: int) -> list[int]:
        return [int(r[0]) for r in conn.exec_driver_sql(
            f"SELECT DISTINCT memory_seq FROM {self.table} WHERE id > ? AND id <= ? "
            "AND memory_seq >= ? AND memory_seq < ?", (since.mark, upto.mark, lo, hi))]

    def trim(self, engine: Engine, position: Position, reader: str) -> None:
        trim_log(engine, [
            (f"DELETE FROM {LOG_TABLE} WHERE id <= ?", (position.mark,)),
            (f"UPDATE {STATE_TABLE} SET trimmed_to = max(trimmed_to, ?) WHERE id = 1", (position.mark,)),
        ])
