"""Core statements compiled once per dialect and run on the driver's cursor.

The group committer's hot path runs the same few statements for every batch.
Through ``Connection.execute`` each costs ~0.3 ms of CPU in SQLAlchemy
(coercion, cache key, result set-up), several times what SQLite takes to run
it (bench/write.py measured 3.0 ms of CPU per one-write transaction against
0.57 ms for the same statements on the driver). Here a statement is written
once in Core, compiled once per dialect, and executed on the DBAPI cursor of
the caller's connection, inside its transaction.

The driver applies no SQLAlchemy type processing: callers pass values the
driver takes as they are (str, int, float, bool, None; JSON already dumped).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler


@dataclass(frozen=True)
class Prepared:
    """A compiled statement: its SQL, and its parameter names in order (None: named style)."""

    sql: str
    names: tuple[str, ...] | None
    #: Values the statement carries itself (literals in Core become bound parameters).
    defaults: Mapping[str, Any]

    def bind(self, params: Mapping[str, Any]) -> Any:
        merged = {**self.defaults, **params} if self.defaults else params
        if self.names is None:
            return dict(merged)
        return tuple(merged[name] for name in self.names)


_cache: dict[tuple[str, Hashable], Prepared] = {}
#: Inserts and evictions: finding the oldest key and popping it are two steps, and
#: two threads must not both pick the same key (the second pop would fail).
_cache_lock = threading.Lock()
#: Keys may carry request values (a search's reader and filters): the oldest entries go
#: past this many, and are compiled again if they come back.
CACHE_MAX = 1024


def prepare(conn: Connection, key: Hashable, build: Callable[[], ClauseElement]) -> Prepared:
    """The statement ``build()`` returns, compiled for ``conn``'s dialect (cached under ``key``)."""
    slot = (conn.dialect.name, key)
    found = _cache.get(slot)  # a hit takes no lock: one dict read is atomic
    if found is None:
        # Compiled outside the lock: two threads may both compile a new key; one result stays.
        # Expanding IN lists (fixed by the key) are rendered as one parameter per value.
        compiled = cast(SQLCompiler, build().compile(
            dialect=conn.dialect, compile_kwargs={"render_postcompile": True}))
        names = tuple(compiled.positiontup or ()) if compiled.positional else None
        defaults = {k: v for k, v in compiled.params.items() if v is not None}
        fresh = Prepared(str(compiled), names, defaults)
        with _cache_lock:
            found = _cache.setdefault(slot, fresh)
            while len(_cache) > CACHE_MAX:
                _cache.pop(next(iter(_cache)))
    return found


def fetch(conn: Connection, stmt: Prepared, params: Mapping[str, Any], *, replan: bool = False) -> list[Any]:
    """Run a query on the driver's cursor and return its rows (tuples); ``replan`` as for
    :func:`submit`."""
    return collect(conn, stmt, submit(conn, stmt, params, replan=replan))


def submit(conn: Connection, stmt: Prepared, params: Mapping[str, Any], *, replan: bool = False) -> Any:
    """Send a query and return its open cursor, to :func:`collect` later: on PostgreSQL in
    pipeline mode (Backend.pipeline) queries sent one after another share one round trip.

    ``replan``: on PostgreSQL, plan the query for these values every time instead of letting
    the driver prepare it once it repeats: a prepared statement's generic plan is fixed on its
    sixth run, and a plan made while a new store's table was small (a sequential scan) stays
    for the connection's life (the group committer keeps its connection)."""
    cur: Any = conn.connection.cursor()
    try:
        _execute(conn, cur, stmt, params, replan)
    except conn.dialect.loaded_dbapi.Error as exc:
        cur.close()
        raise _sqlalchemy_error(conn, stmt, exc) from exc
    return cur


def collect(conn: Connection, stmt: Prepared, cur: Any) -> list[Any]:
    """The rows of a query :func:`submit` sent (closes its cursor)."""
    try:
        return list(cur.fetchall())
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _sqlalchemy_error(conn, stmt, exc) from exc
    finally:
        cur.close()


def run(conn: Connection, stmt: Prepared, params: Mapping[str, Any], *, replan: bool = False) -> None:
    """Run one statement that returns no rows (in pipeline mode it is only queued); ``replan``
    as for :func:`submit`."""
    cur = conn.connection.cursor()
    try:
        _execute(conn, cur, stmt, params, replan)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _sqlalchemy_error(conn, stmt, exc) from exc
    finally:
        cur.close()


def _execute(conn: Connection, cur: Any, stmt: Prepared, params: Mapping[str, Any], replan: bool) -> None:
    if replan and conn.dialect.name == "postgresql":
        cur.execute(stmt.sql, stmt.bind(params), prepare=False)
    else:
        cur.execute(stmt.sql, stmt.bind(params))


def run_many(conn: Connection, stmt: Prepared, rows: Sequence[Mapping[str, Any]]) -> None:
    """Run a DML statement once per parameter set, in one driver call."""
    if not rows:
        return
    cur = conn.connection.cursor()
    try:
        cur.executemany(stmt.sql, [stmt.bind(r) for r in rows])
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _sqlalchemy_error(conn, stmt, exc) from exc
    finally:
        cur.close()


def _sqlalchemy_error(conn: Connection, stmt: Prepared, exc: Exception) -> BaseException:
    """A driver error as SQLAlchemy's DBAPIError (OperationalError, IntegrityError, ...), as
    ``Connection.execute`` raises it: callers map those to 1003 and to the runner's failure
    kinds (a lock or statement timeout, a locked or full database); a bare driver error was
    taken for a bug. Parameters hidden, as the engine hides them (they may hold memory text)."""
    return DBAPIError.instance(stmt.sql, None, exc, conn.dialect.loaded_dbapi.Error,
                               hide_parameters=True, dialect=conn.dialect)


@contextmanager
def savepoint(conn: Connection, name: str = "memoryd_unit") -> Iterator[None]:
    """A savepoint around a block, as plain statements on the driver's cursor: an exception
    other than a store error rolls the block back alone (the savepoint stays, empty, until the
    transaction ends, as after ``Connection.begin_nested``); a store error (DBAPIError) is
    left to the caller's transaction, which rolls back whole. On PostgreSQL the statements
    are queued in pipeline mode, at no round trip; on SQLite they skip SQLAlchemy's
    nested-transaction work.

    SQLAlchemy does not know of this savepoint: statements through ``Connection.execute``
    may run inside, and a ``Connection.begin_nested`` opened inside must end inside."""
    run(conn, prepare(conn, ("savepoint", name), lambda: text(f"SAVEPOINT {name}")), {})
    try:
        yield
    except DBAPIError:
        raise  # the store failed: the whole transaction is rolled back
    except BaseException:
        run(conn, prepare(conn, ("savepoint-undo", name), lambda: text(f"ROLLBACK TO SAVEPOINT {name}")), {})
        raise
    run(conn, prepare(conn, ("savepoint-release", name), lambda: text(f"RELEASE SAVEPOINT {name}")), {})


#: Rows from which insert_rows sends one multi-row statement instead of an executemany. Below
#: it the executemany (pipelined on PostgreSQL) costs less: psycopg's array dumping took more
#: client CPU per row (6 rows a commit: 0.37 against 0.31 ms a write; 64: 0.15 against 0.12),
#: and the server spent more per row on the unnest than on the single-row INSERTs; at 384 rows
#: the client CPU is the same and one statement replaces 384.
BULK_MIN_ROWS = 256
