"""Engine creation: every SQLite pragma set at connect, the transaction mode at begin.

Each write transaction starts with ``BEGIN IMMEDIATE`` so a writer takes the
lock up front instead of failing to upgrade a read lock mid-transaction (the
source of "database is locked" errors), after the process's write gate
(store/writegate.py) has let it through. Read-only work asks for a deferred
transaction with ``read_only(engine)``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import sqlite_vec
import structlog
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.pool import QueuePool

from memoryd.store.driver import sqlite_module
from memoryd.store.writegate import WriteGate

if TYPE_CHECKING:
    pass

log = structlog.get_logger(__name__)

#: Pragmas applied to every SQLite connection; a test asserts each one.
SQLITE_PRAGMAS: dict[str, Any] = {
    "journal_mode": "wal",
    "synchronous": 2,  # FULL: an acknowledged write survives power loss
    "foreign_keys": 1,
    "secure_delete": 1,  # erased text is overwritten, not left in free pages
    # Read pages through a memory map instead of copying each one out of the OS cache:
    # a nearest-neighbour scan reads every vector of a partition (bench/search.py at 100k
    # memories: 25.6 -> 17.1 ms per KNN). Mapped pages count as shared, reclaimable memory.
    "mmap_size": 1 << 30,
}

#: Where a pooled connection's ``info`` holds the mode its next transaction begins in
#: (``DEFERRED`` for :func:`read_only`; absent: ``IMMEDIATE``).
BEGIN_OPTION = "memoryd_begin"
_BEGIN = {"IMMEDIATE": "BEGIN IMMEDIATE", "DEFERRED": "BEGIN DEFERRED"}

#: Each SQLite engine's write gate (store/writegate.py).
GATES: weakref.WeakKeyDictionary[Engine, WriteGate] = weakref.WeakKeyDictionary()


def create_store_engine(url: str, busy_timeout_ms: int = 5000, pool_size: int = 8, *,
                        lock_timeout_ms: int = 0, statement_timeout_ms: int = 0,
                        max_overflow: int = 8) -> Engine:
    """An engine for ``url`` with memoryd's connection and transaction hooks.

    ``lock_timeout_ms`` and ``statement_timeout_ms`` are PostgreSQL's session settings
    (0: none, as for offline commands such as ``memoryd store copy``): what
    ``busy_timeout_ms`` is to SQLite. The daemon's engine comes from store/opening.py's :func:`daemon_engine`.
    """
    # hide_parameters: a statement's bound values (memory text) never appear in the
    # engine's error messages, which end up in jobs.last_error, status and the log.
    if not url.startswith("sqlite"):
        return create_engine(postgres_url(url), pool_pre_ping=True, hide_parameters=True,
                             pool_size=pool_size, max_overflow=max_overflow,
                             connect_args=postgres_timeouts(lock_timeout_ms, statement_timeout_ms))
    engine = create_engine(
        url,
        hide_parameters=True,
        module=sqlite_module(),
        poolclass=QueuePool,
        pool_size=pool_size,
        max_overflow=8,
        connect_args={"timeout": busy_timeout_ms / 1000.0, "check_same_thread": False},
    )
    _install_sqlite_hooks(engine, busy_timeout_ms)
    return engine


def postgres_timeouts(lock_timeout_ms: int, statement_timeout_ms: int) -> dict[str, Any]:
    """psycopg connect arguments that set the session's lock and statement timeouts at connect
    (no extra round trip per connection; ``SET LOCAL`` in a transaction still overrides them)."""
    settings = [f"-c {name}={int(ms)}" for name, ms in
                (("lock_timeout", lock_timeout_ms), ("statement_timeout", statement_timeout_ms)) if ms > 0]
    return {"options": " ".join(settings)} if settings else {}


def postgres_url(url: str) -> str:
    """``url`` with psycopg 3 as the driver when it names none (SQLAlchemy's default for a bare
    ``postgresql://`` is psycopg2, which memoryd does not install)."""
    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            return "postgresql+psycopg://" + url[len(bare):]
    return url


def _install_sqlite_hooks(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin hook, not the driver, decide when and how a
        # transaction starts.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        for name, value in SQLITE_PRAGMAS.items():
            cur.execute(f"PRAGMA {name} = {value}")
        cur.close()
        try:
            dbapi_conn.enable_load_extension(True)
            sqlite_vec.load(dbapi_conn)
            dbapi_conn.enable_load_extension(False)
        except Exception as exc:  # pragma: no cover - depends on the platform's sqlite
            log.warning("store.sqlite_vec_unavailable", error=str(exc))

    gate = WriteGate(busy_timeout_ms / 1000.0)
    GATES[engine] = gate
    dialect: Any = engine.dialect

    # The transaction starts in the dialect's own begin, on the driver connection, not as a
    # statement through SQLAlchemy's execute path from a "begin" event (an empty transaction
    # 20 -> 17 µs of CPU); with no begin listener the engine also skips its event dispatch.
    def _do_begin(proxied: Any) -> None:
        mode = proxied.info.get(BEGIN_OPTION, "IMMEDIATE")
        dbapi_conn = proxied.dbapi_connection
        if mode == "IMMEDIATE":
            gate.acquire(dbapi_conn)
        try:
            dbapi_conn.execute(_BEGIN[mode])
        except BaseException:
            gate.release(dbapi_conn)
            raise  # Connection.begin raises it as SQLAlchemy's DBAPIError, as any statement's

    dialect.do_begin = _do_begin

    # The gate opens after the driver's COMMIT or ROLLBACK has returned (SQLAlchemy's
    # commit and rollback events fire before them), so the dialect's own calls are wrapped.
    for name in ("do_commit", "do_rollback"):
        original = getattr(dialect, name)

        def _ended(dbapi_conn: Any, _original: Any = original) -> None:
            try:
                _original(dbapi_conn)
            finally:
                gate.release(dbapi_conn)

        setattr(dialect, name, _ended)

    @event.listens_for(engine, "close")
    def _on_close(dbapi_conn: Any, _record: Any) -> None:
        gate.release(dbapi_conn)

    @event.listens_for(engine, "invalidate")
    def _on_invalidate(dbapi_conn: Any, _record: Any, _exc: Any) -> None:
        gate.release(dbapi_conn)


def write_gate(engine: Engine) -> WriteGate | None:
    """The engine's in-process write gate (SQLite engines only)."""
    return GATES.get(engine)


@contextmanager
def read_only(engine: Engine) -> Iterator[Connection]:
    """A connection whose transaction reads one consistent snapshot: a deferred transaction
    on SQLite, a REPEATABLE READ one on PostgreSQL (whose default, READ COMMITTED, takes a
    new snapshot per statement: a reader of two tables could see a commit between them,
    such as an audit lane's head row newer than the events it had read)."""
    with engine.connect() as conn:
        if not is_sqlite(engine):
            conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn
            return
        info = conn.connection.info  # the pooled driver connection's: read by its dialect's do_begin
        info[BEGIN_OPTION] = "DEFERRED"
        try:
            with conn.begin():
                yield conn
        finally:
            info.pop(BEGIN_OPTION, None)


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def checkpoint_wal(engine: Engine) -> tuple[int, int, int] | None:
    """Copy the WAL into the database and truncate it (SQLite only).

    Returns (busy, wal pages, checkpointed pages); busy = 1 means a reader
    held it back and the next checkpoint will finish the job.
    """
    if not is_sqlite(engine):
        return None
    raw = engine.raw_connection()
    try:
        dbapi = raw.driver_connection
        assert dbapi is not None
        row = dbapi.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        raw.close()
    if row and row[0]:
        log.warning("store.checkpoint_busy", wal_pages=row[1], done=row[2])
    return (int(row[0]), int(row[1]), int(row[2])) if row else None
