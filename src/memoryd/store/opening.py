"""Opening the daemon's store: its engine with the configured timeouts and pool, then the
server's check and the unfinished-copy guard, before anything is served.

Above store/engine.py (which the backends' own modules use, and which so imports
neither the backend choice nor the copy feature)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Engine

from memoryd.store.backends import backend_for
from memoryd.store.copy.guard import refuse_unfinished_copy
from memoryd.store.engine import create_store_engine

if TYPE_CHECKING:
    from memoryd.config import Config


def daemon_engine(cfg: Config) -> Engine:
    """The daemon's engine: SQLite's busy timeout, or PostgreSQL's lock and statement
    timeouts (``pg_lock_timeout_ms``, 0 meaning ``busy_timeout_ms``; ``pg_statement_timeout_ms``).
    A wait past either fails the statement: a write answers 1003 and a pass's jobs go back.

    :raises CopyUnfinished: the store is a ``memoryd store copy`` target that was interrupted
        or did not verify (store/copy/guard.py): serving it would serve part of a store.
    """
    url = cfg.resolved_db_url()
    # PostgreSQL: a bounded pool (pg_pool_size, never more), so N daemons hold a known share of
    # the server's max_connections (docs/postgresql.md). SQLite keeps its default pool.
    sizes = {} if url.startswith("sqlite") else {"pool_size": cfg.pg_pool_size, "max_overflow": 0}
    engine = create_store_engine(url, cfg.busy_timeout_ms,
                                 lock_timeout_ms=cfg.pg_lock_timeout_ms or cfg.busy_timeout_ms,
                                 statement_timeout_ms=cfg.pg_statement_timeout_ms, **sizes)
    try:
        # The server first: one that cannot be reached, is too old or lacks pgvector is
        # refused with its fix, before the copy check's query would fail with a traceback.
        backend_for(engine).check_server(engine)
        refuse_unfinished_copy(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine
