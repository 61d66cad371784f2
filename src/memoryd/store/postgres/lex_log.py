"""The lexical index's change log in a PostgreSQL store (store/lexindex/changelog.py): read by
transaction-id horizon, since several writers commit entries out of id order.

Each entry carries its writer's transaction id (``xid``, from
``pg_current_xact_id()``). An index reads the log in one REPEATABLE READ
snapshot: the entries of transactions at or above its horizon that it has not
applied yet. Once it has read all of them, its next horizon is that
snapshot's ``pg_snapshot_xmin``: every transaction below it had ended when
the snapshot was taken, so none of their entries can appear later. Entries at
or above the new horizon that it applied are kept by id (``Position.seen``)
and skipped when read again; a long transaction holds the horizon back, and
that set grows until it ends.

Every daemon on the database keeps its own shards (in its data directory) and
records its horizon in :data:`READERS_TABLE` when it saves. The log is trimmed
below the lowest horizon of the readers seen in the last day; a reader found
below the trimmed part (``trimmed_below``) rebuilds. An erasure travels as an
entry of its own (``erased``), so every daemon rebuilds the shard that held
the text.

The log is created when a daemon first finds the store large enough for an
index (a smaller store's writes pay nothing), under an advisory lock so two
daemons starting at once do not race on the DDL. An insert is logged by one
statement-level trigger (one INSERT for a whole batch); updates that change
what the index holds, and deletes, by row-level ones.
"""

from __future__ import annotations

import uuid

import structlog
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from memoryd.store.lexindex.changelog import ChangeLog, Entry, LogTrimmed, Position
from memoryd.store.sidecar import is_busy

log = structlog.get_logger(__name__)

LOG_TABLE = "lexical_index_log"
STATE_TABLE = "lexical_index_state"
#: Each daemon's horizon, and when it last saved: the log is kept for the readers seen lately.
READERS_TABLE = "lexical_index_readers"
#: A reader not seen for this long no longer holds the log back (it rebuilds when it returns).
READER_TTL = "1 day"
_TRIGGERS = ("lexical_index_log_mi", "lexical_index_log_md", "lexical_index_log_mu")
_FUNCTIONS = ("memoryd_lexical_log_insert", "memoryd_lexical_log_change")
#: pg_advisory_xact_lock key for creating and dropping the log (store/postgres/backend.py's namespace).
LOG_LOCK = 0x6D656D6F_0003
#: The transaction id as a bigint (xid8 has no cast from bigint for binding parameters).
_XID = "(pg_current_xact_id()::text::bigint)"
_XMIN = "(pg_snapshot_xmin(pg_current_snapshot())::text::bigint)"
_XMAX = "(pg_snapshot_xmax(pg_current_snapshot())::text::bigint)"

LOG_DDL = [
    f"CREATE TABLE IF NOT EXISTS {LOG_TABLE} (id bigserial PRIMARY KEY, memory_seq bigint NOT NULL, "
    f"erased boolean NOT NULL DEFAULT false, xid bigint NOT NULL DEFAULT {_XID})",
    f"CREATE INDEX IF NOT EXISTS {LOG_TABLE}_xid ON {LOG_TABLE} (xid)",
    f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (id integer PRIMARY KEY CHECK (id = 1), "
    "history text NOT NULL, trimmed_below bigint NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {READERS_TABLE} (reader text PRIMARY KEY, horizon bigint NOT NULL, "
    "seen_at timestamptz NOT NULL)",
    f"CREATE OR REPLACE FUNCTION {_FUNCTIONS[0]}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq) SELECT seq FROM new_rows WHERE content IS NOT NULL; "
    "RETURN NULL; END $$",
    f"CREATE OR REPLACE FUNCTION {_FUNCTIONS[1]}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"IF TG_OP = 'DELETE' THEN INSERT INTO {LOG_TABLE} (memory_seq, erased) VALUES (OLD.seq, true); "
    f"ELSE INSERT INTO {LOG_TABLE} (memory_seq, erased) "
    "VALUES (NEW.seq, NEW.content IS DISTINCT FROM OLD.content); END IF; RETURN NULL; END $$",
]
_TRIGGER_DDL = {
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

_READ = text(f"SELECT id, memory_seq, erased, xid FROM {LOG_TABLE} WHERE xid >= :mark "
             "AND NOT (id = ANY(CAST(:seen AS bigint[]))) ORDER BY id LIMIT :page")
_BEHIND = text(f"SELECT count(*) FROM (SELECT 1 FROM {LOG_TABLE} WHERE xid >= :mark "
               "AND NOT (id = ANY(CAST(:seen AS bigint[]))) LIMIT :cap) AS unapplied")


def _state(conn: Connection) -> tuple[str, int]:
    row = conn.execute(text(f"SELECT history, trimmed_below FROM {STATE_TABLE} WHERE id = 1")).one()
    return str(row[0]), int(row[1])


def _upsert_reader(conn: Connection, position: Position, reader: str) -> None:
    conn.execute(text(
        f"INSERT INTO {READERS_TABLE} (reader, horizon, seen_at) VALUES (:r, :h, now()) "
        "ON CONFLICT (reader) DO UPDATE SET horizon = excluded.horizon, seen_at = now()"),
        {"r": reader, "h": position.mark})


def _triggers(conn: Connection) -> set[str]:
    return {str(r[0]) for r in conn.execute(text(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'memories'::regclass AND tgname = ANY(:names)"),
        {"names": list(_TRIGGERS)})}


class PostgresLog(ChangeLog):
    table = LOG_TABLE

    def exists(self, conn: Connection) -> bool:
        return conn.execute(text("SELECT to_regclass(:t)"), {"t": STATE_TABLE}).scalar() is not None

    def ensure(self, conn: Connection) -> None:
        # Looked at before locking anything: CREATE TRIGGER locks memories against writes, so a
        # daemon that finds the log whole (every start but the first) takes no lock at all.
        if self.exists(conn) and _triggers(conn) == set(_TRIGGERS):
            return
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOG_LOCK})
        for statement in LOG_DDL:
            conn.exec_driver_sql(statement)
        for name in set(_TRIGGERS) - _triggers(conn):
            conn.exec_driver_sql(_TRIGGER_DDL[name])
        # A new log starts at the current horizon: nothing before it was ever logged.
        conn.execute(text(f"INSERT INTO {STATE_TABLE} (id, history, trimmed_below) "
                          f"VALUES (1, :h, {_XMIN}) ON CONFLICT (id) DO NOTHING"), {"h": uuid.uuid4().hex})

    def drop(self, conn: Connection) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOG_LOCK})
        for name in _TRIGGERS:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name} ON memories")
        for fn in _FUNCTIONS:
            conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {fn}()")
        for table in (LOG_TABLE, STATE_TABLE, READERS_TABLE):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")

    def read_elsewhere(self, conn: Connection) -> bool:
        """Whether a daemon saved its horizon in the last day (one with the index on, sharing the
        log: a daemon with it off must not drop it from under it)."""
        if not self.exists(conn):
            return False
        return conn.execute(text(
            f"SELECT 1 FROM {READERS_TABLE} WHERE seen_at > now() - CAST(:ttl AS interval) LIMIT 1"),
            {"ttl": READER_TTL}).first() is not None

    def history(self, conn: Connection) -> str:
        return _state(conn)[0]

    def head(self, conn: Connection) -> Position:
        return Position(mark=int(conn.execute(text(f"SELECT {_XMIN}")).scalar_one()))

    def holds(self, conn: Connection, position: Position) -> bool:
        _, trimmed_below = _state(conn)
        xmax = int(conn.execute(text(f"SELECT {_XMAX}")).scalar_one())
        return trimmed_below <= position.mark <= xmax

    def read(self, conn: Connection, position: Position, page: int) -> tuple[list[Entry], Position]:
        xmin = int(conn.execute(text(f"SELECT {_XMIN}")).scalar_one())  # the snapshot read below
        _, trimmed_below = _state(conn)
        if trimmed_below > position.mark:
            # Another daemon trimmed entries this one had not applied (it had not saved its
            # horizon for a day): only a rebuild brings its shards in step again.
            raise LogTrimmed(f"the log was trimmed below {trimmed_below}, past this index's {position.mark}")
        seen = [i for i, _ in position.seen]
        rows = conn.execute(_READ, {"mark": position.mark, "seen": seen, "page": page}).all()
        entries = [Entry(int(r[0]), int(r[1]), bool(r[2]), int(r[3])) for r in rows]
        applied = (*position.seen, *((e.id, e.xid) for e in entries))
        if len(entries) == page:  # more to read: the horizon stays until all of them are
            return entries, Position(mark=position.mark, seen=applied)
        mark = max(position.mark, xmin)
        return entries, Position(mark=mark, seen=tuple(s for s in applied if s[1] >= mark))

    def behind(self, conn: Connection, position: Position, cap: int) -> int:
        return int(conn.execute(_BEHIND, {"mark": position.mark, "seen": [i for i, _ in position.seen],
                                          "cap": cap}).scalar_one())

    def seqs_since(self, conn: Connection, since: Position, upto: Position, lo: int, hi: int) -> list[int]:
        # Every entry from ``since``'s horizon on, past ``upto`` too: applying one is idempotent.
        return [int(r[0]) for r in conn.execute(text(
            f"SELECT DISTINCT memory_seq FROM {LOG_TABLE} WHERE xid >= :mark "
            "AND memory_seq >= :lo AND memory_seq < :hi"), {"mark": since.mark, "lo": lo, "hi": hi})]

    def register(self, engine: Engine, position: Position, reader: str) -> None:
        with engine.begin() as conn:
            _upsert_reader(conn, position, reader)

    def trim(self, engine: Engine, position: Position, reader: str) -> None:
        try:
            with engine.begin() as conn:
                _upsert_reader(conn, position, reader)
                floor = conn.execute(text(
                    f"SELECT min(horizon) FROM {READERS_TABLE} "
                    "WHERE seen_at > now() - CAST(:ttl AS interval)"), {"ttl": READER_TTL}).scalar()
                if floor is None:
                    return
                conn.execute(text(f"DELETE FROM {LOG_TABLE} WHERE xid < :f"), {"f": floor})
                conn.execute(text(f"UPDATE {STATE_TABLE} SET trimmed_below = greatest(trimmed_below, :f) "
                                  "WHERE id = 1"), {"f": floor})
        except OperationalError as exc:
            if not is_busy(exc):
                raise
            log.info("index.log_trim_deferred", error=str(exc.orig), fix="trimmed at the next save")
