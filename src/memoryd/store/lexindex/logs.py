"""Which change log a store's lexical index reads (kept apart from changelog.py, which each
backend's log imports)."""

from __future__ import annotations

from sqlalchemy import Engine

from memoryd.store.engine import is_sqlite
from memoryd.store.lexindex.changelog import ChangeLog


def log_for(engine: Engine) -> ChangeLog:
    """The change log of ``engine``'s backend."""
    if is_sqlite(engine):
        from memoryd.store.sqlite.lex_log import SqliteLog

        return SqliteLog()
    from memoryd.store.postgres.lex_log import PostgresLog

    return PostgresLog()
