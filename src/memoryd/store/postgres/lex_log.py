"""The lexical index's change log in a PostgreSQL store (store/lexindex/changelog.py), where
several writers commit entries out of id order.

Each entry carries its writer's transaction id (``xid``, from
``pg_current_xact_id()``). An index reads the log in one REPEATABLE READ
snapshot and stands, afterwards, at the last id it applied (``mark``) and the
transactions that snapshot saw running (``running``, ``pg_snapshot_xip``). Its
next read takes the entries above the mark and those of the transactions that
were running. That misses nothing: an entry with an id below the mark that
was not visible then was issued before the mark was committed, by a
transaction that had not committed, so it was running (or it aborted). Ids
come from a sequence without a cache, so they are issued in time order, and a
transaction that began later writes ids above the mark. The state kept is
bounded by the transactions running at once, however long one of them runs.

Every daemon on the database keeps its own shards (in its data directory) and
records its mark and oldest running transaction (``oldest``) in
:data:`READERS_TABLE` when it saves. The log is trimmed to the entries that
every reader seen in the last day has applied: ids up to the lowest mark, of
transactions below the lowest xmin. A reader found behind the trimmed part
(``trimmed_mark``, ``trimmed_xmin``) rebuilds. An erasure travels as an entry of
its own (``erased``), so every daemon rebuilds the shard that held the text.

The log is created when a daemon first finds the store large enough for an
index (a smaller store's writes pay nothing), under an advisory lock so two
daemons starting at once do not race on the DDL. An insert is logged by one
statement-level trigger (one INSERT for a whole batch); updates that change
what the index holds, and deletes, by row-level ones.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Connection, Engine, text

from memoryd.store.lexindex.changelog import ChangeLog, Entry, LogTrimmed, Position
from memoryd.store.sidecar import trim_log

LOG_TABLE = "lexical_index_log"
STATE_TABLE = "lexical_index_state"
#: Each daemon's position (mark, xmin), and when it last saved: the log is kept for the readers
#: seen lately.
READERS_TABLE = "lexical_index_readers"
#: A reader not seen for this long no longer holds the log back (it rebuilds when it returns).
#: A daemon with the index on saves at least every ten minutes (index_set.KEEPALIVE_S).
READER_TTL = "1 day"
_TRIGGERS = ("lexical_index_log_mi", "lexical_index_log_md", "lexical_index_log_mu")
_FUNCTIONS = ("memoryd_lexical_log_insert", "memoryd_lexical_log_change")
#: pg_advisory_xact_lock key for creating and dropping the log (store/postgres/backend.py's namespace).
LOG_LOCK = 0x6D656D6F_0003
#: The transaction id as a bigint (xid8 has no cast from bigint for binding parameters).
_XID = "(pg_current_xact_id()::text::bigint)"
_XMAX = "(pg_snapshot_xmax(pg_current_snapshot())::text::bigint)"
#: The snapshot's oldest running transaction, the running ones, and the last id it sees (in the
#: log table named by {log}): the first statement of a read, so it describes the snapshot the
#: read's other statements see.
_SNAPSHOT = ("SELECT pg_snapshot_xmin(s)::text::bigint, "
             "ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x ORDER BY 1), "
             "(SELECT coalesce(max(id), 0) FROM {log}) FROM pg_current_snapshot() AS s")


def tables_ddl(log: str, state: str, readers: str) -> list[str]:
    """A log's tables: the entries (ids from a sequence without a cache: issued in time order),
    its state (history, where it was trimmed to), and its readers' positions."""
    return [
        f"CREATE SEQUENCE IF NOT EXISTS {log}_id CACHE 1",
        f"CREATE TABLE IF NOT EXISTS {log} (id bigint PRIMARY KEY DEFAULT "
        f"nextval('{log}_id'), memory_seq bigint NOT NULL, erased boolean NOT NULL DEFAULT false, "
        f"xid bigint NOT NULL DEFAULT {_XID})",
        f"CREATE INDEX IF NOT EXISTS {log}_xid ON {log} (xid)",
        f"CREATE TABLE IF NOT EXISTS {state} (id integer PRIMARY KEY CHECK (id = 1), "
        "history text NOT NULL, trimmed_mark bigint NOT NULL, trimmed_xmin bigint NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {readers} (reader text PRIMARY KEY, mark bigint NOT NULL, "
        "oldest bigint NOT NULL, seen_at timestamptz NOT NULL)",
    ]


LOG_DDL = [
    *tables_ddl(LOG_TABLE, STATE_TABLE, READERS_TABLE),
    f"CREATE OR REPLACE FUNCTION {_FUNCTIONS[0]}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq) SELECT seq FROM new_rows WHERE content IS NOT NULL; "
    "RETURN NULL; END $$",
    f"CREATE OR REPLACE FUNCTION {_FUNCTIONS[1]}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"IF TG_OP = 'DELETE' THEN INSERT INTO {LOG_TABLE} (memory_seq, erased) VALUES (OLD.seq, true); "
    f"ELSE INSERT INTO {LOG_TABLE} (memory_seq, erased) "
    "VALUES (NEW.seq, NEW.content IS DISTINCT FROM OLD.content); END IF; RETURN NULL; END $$",
]
#: Each trigger's table, and its DDL.
_TRIGGER_TABLES = {
    _TRIGGERS[0]: "memories", _TRIGGERS[1]: "memories", _TRIGGERS[2]: "memories",
}
_TRIGGER_SQL = {
    _TRIGGERS[0]: f"CREATE TRIGGER {_TRIGGERS[0]} AFTER INSERT ON memories REFERENCING NEW TABLE AS "
                  f"new_rows FOR EACH STATEMENT EXECUTE FUNCTION {_FUNCTIONS[0]}()",
    _TRIGGERS[1]: f"CREATE TRIGGER {_TRIGGERS[1]} AFTER DELETE ON memories FOR EACH ROW "
                  f"EXECUTE FUNCTION {_FUNCTIONS[1]}()",
    _TRIGGERS[2]: f"CREATE TRIGGER {_TRIGGERS[2]} AFTER UPDATE OF content, status, kind, scope, owner "
                  "ON memories FOR EACH ROW WHEN (NEW.content IS DISTINCT FROM OLD.content OR "
                  "NEW.status IS DISTINCT FROM OLD.status OR NEW.kind IS DISTINCT FROM OLD.kind OR "
                  "NEW.scope IS DISTINCT FROM OLD.scope OR NEW.owner IS DISTINCT FROM OLD.owner) "
                  f"EXECUTE FUNCTION {_FUNCTIONS[1]}()",
}

#: The entries not applied at a position (above its mark, or of the transactions it saw running).
_UNAPPLIED = "(id > :mark OR xid = ANY(CAST(:running AS bigint[])))"


def _unapplied(position: Position) -> dict[str, Any]:
    return {"mark": position.mark, "running": list(position.running)}


class PostgresLog(ChangeLog):
    """A change log several daemons read (the module docstring); the lexical index's unless a
    subclass names other tables, triggers and functions (store/postgres/ann_log.py)."""

    table = LOG_TABLE
    state_table = STATE_TABLE
    readers_table = READERS_TABLE
    lock_key = LOG_LOCK
    ddl: list[str] = LOG_DDL
    #: Trigger name -> the table it is on, and -> its DDL.
    trigger_tables: dict[str, str] = _TRIGGER_TABLES
    trigger_sql: dict[str, str] = _TRIGGER_SQL
    functions: tuple[str, ...] = _FUNCTIONS

    # -- helpers -------------------------------------------------------------------------------
    def _state(self, conn: Connection) -> tuple[str, int, int]:
        row = conn.execute(text(
            f"SELECT history, trimmed_mark, trimmed_xmin FROM {self.state_table} WHERE id = 1")).one()
        return str(row[0]), int(row[1]), int(row[2])

    def _snapshot(self, conn: Connection) -> Position:
        xmin, running, last = conn.execute(text(_SNAPSHOT.format(log=self.table))).one()
        return Position(mark=int(last), xmin=int(xmin), running=tuple(int(x) for x in running))

    def _upsert_reader(self, conn: Connection, position: Position, reader: str) -> None:
        conn.execute(text(
            f"INSERT INTO {self.readers_table} (reader, mark, oldest, seen_at) VALUES (:r, :m, :x, now()) "
            "ON CONFLICT (reader) DO UPDATE SET mark = excluded.mark, oldest = excluded.oldest, "
            "seen_at = now()"), {"r": reader, "m": position.mark, "x": position.xmin})

    def _triggers(self, conn: Connection) -> set[str]:
        return {str(r[0]) for r in conn.execute(text(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = ANY(CAST(:tables AS regclass[])) "
            "AND tgname = ANY(:names)"),
            {"tables": sorted(set(self.trigger_tables.values())), "names": list(self.trigger_tables)})}

    # -- ChangeLog -----------------------------------------------------------------------------

    def exists(self, conn: Connection) -> bool:
        return conn.execute(text("SELECT to_regclass(:t)"), {"t": self.state_table}).scalar() is not None

    def ensure(self, conn: Connection) -> None:
        # Looked at before locking anything: CREATE TRIGGER locks memories against writes, so a
        # daemon that finds the log whole (every start but the first) takes no lock at all.
        if self.exists(conn) and self._triggers(conn) == set(self.trigger_tables):
            return
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": self.lock_key})
        for statement in self.ddl:
            conn.exec_driver_sql(statement)
        for name in sorted(set(self.trigger_tables) - self._triggers(conn)):
            conn.exec_driver_sql(self.trigger_sql[name])
        conn.execute(text(f"INSERT INTO {self.state_table} (id, history, trimmed_mark, trimmed_xmin) "
                          "VALUES (1, :h, 0, 0) ON CONFLICT (id) DO NOTHING"), {"h": uuid.uuid4().hex})

    def drop(self, conn: Connection) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": self.lock_key})
        for name, table in self.trigger_tables.items():
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        for fn in self.functions:
            conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {fn}()")
        for table in (self.table, self.state_table, self.readers_table):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        conn.exec_driver_sql(f"DROP SEQUENCE IF EXISTS {self.table}_id")

    def read_elsewhere(self, conn: Connection) -> bool:
        """Whether a daemon saved its position in the last day (one with the index on, sharing the
        log: a daemon with it off must not drop it from under it)."""
        if not self.exists(conn):
            return False
        return conn.execute(text(
            f"SELECT 1 FROM {self.readers_table} WHERE seen_at > now() - CAST(:ttl AS interval) LIMIT 1"),
            {"ttl": READER_TTL}).first() is not None

    def history(self, conn: Connection) -> str:
        return self._state(conn)[0]

    def head(self, conn: Connection) -> Position:
        now = self._snapshot(conn)
        # A log trimmed empty shows no id: the trimmed ids were issued before this snapshot, and
        # those of them that had not committed are of transactions it sees running.
        _, trimmed_mark, _ = self._state(conn)
        return Position(mark=max(now.mark, trimmed_mark), xmin=now.xmin, running=now.running)

    def holds(self, conn: Connection, position: Position) -> bool:
        _, trimmed_mark, trimmed_xmin = self._state(conn)
        issued = int(conn.execute(text(
            f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {self.table}_id")).scalar_one())
        xmax = int(conn.execute(text(f"SELECT {_XMAX}")).scalar_one())
        return trimmed_mark <= position.mark <= issued and trimmed_xmin <= position.xmin <= xmax

    def read(self, conn: Connection, position: Position, page: int) -> tuple[list[Entry], Position]:
        now = self._snapshot(conn)  # first: the snapshot the statements below read
        _, trimmed_mark, trimmed_xmin = self._state(conn)
        if trimmed_mark > position.mark or trimmed_xmin > position.xmin:
            # Another daemon trimmed entries this one had not applied (it had not saved for a
            # day): only a rebuild brings its shards in step again.
            raise LogTrimmed(f"the log was trimmed to id {trimmed_mark} and transaction {trimmed_xmin}, "
                             f"past this index's {position.mark} and {position.xmin}")
        rows = conn.execute(text(f"SELECT id, memory_seq, erased, xid FROM {self.table} WHERE {_UNAPPLIED} "
                                 "ORDER BY id LIMIT :page"), {**_unapplied(position), "page": page}).all()
        entries = [Entry(int(r[0]), int(r[1]), bool(r[2]), int(r[3])) for r in rows]
        # Past the page's last id, what is left is above the new mark; below it, every entry
        # visible now was read, and only those of the transactions running now may come later.
        mark = max(position.mark, entries[-1].id if len(entries) == page else now.mark)
        return entries, Position(mark=mark, xmin=max(position.xmin, now.xmin), running=now.running)

    def behind(self, conn: Connection, position: Position, cap: int) -> int:
        sql = f"SELECT count(*) FROM (SELECT 1 FROM {self.table} WHERE {_UNAPPLIED} LIMIT :cap) AS unapplied"
        return int(conn.execute(text(sql), {**_unapplied(position), "cap": cap}).scalar_one())

    def seqs_since(self, conn: Connection, since: Position, upto: Position, lo: int, hi: int) -> list[int]:
        # Every entry not applied at ``since``, past ``upto`` too: applying one is idempotent.
        return [int(r[0]) for r in conn.execute(text(
            f"SELECT DISTINCT memory_seq FROM {self.table} WHERE {_UNAPPLIED} "
            "AND memory_seq >= :lo AND memory_seq < :hi"), {**_unapplied(since), "lo": lo, "hi": hi})]

    def register(self, engine: Engine, position: Position, reader: str) -> None:
        with engine.begin() as conn:
            self._upsert_reader(conn, position, reader)

    def trim(self, engine: Engine, position: Position, reader: str) -> None:
        def trim(conn: Connection) -> None:
            self._upsert_reader(conn, position, reader)
            mark, xmin = conn.execute(text(
                f"SELECT min(mark), min(oldest) FROM {self.readers_table} "
                "WHERE seen_at > now() - CAST(:ttl AS interval)"), {"ttl": READER_TTL}).one()
            # A data directory deleted or rebuilt leaves its old reader behind: forgotten after a
            # week (it stopped holding the log back after a day).
            conn.execute(text(f"DELETE FROM {self.readers_table} WHERE seen_at < now() - interval '7 days'"))
            if mark is None:
                return
            # What every reader has applied: up to its mark, and below its oldest running.
            floor = {"m": mark, "x": xmin}
            conn.execute(text(f"DELETE FROM {self.table} WHERE id <= :m AND xid < :x"), floor)
            conn.execute(text(f"UPDATE {self.state_table} SET trimmed_mark = greatest(trimmed_mark, :m), "
                              "trimmed_xmin = greatest(trimmed_xmin, :x) WHERE id = 1"), floor)

        trim_log(engine, trim)
