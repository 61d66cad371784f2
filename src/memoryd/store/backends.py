"""Which backend serves a connection: ``backend_for(conn)``, by the connection's dialect.

The choice lives above both backends (they import store/backend.py for the base
class, and neither imports this module), so that no module imports one that
imports it back. A backend's module is imported the first time a store of its
kind is opened: a SQLite daemon never loads psycopg.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine

from memoryd.errors import ConfigError
from memoryd.store.backend import Backend

_BACKENDS: dict[str, Backend] = {}


def backend_for(bind: Connection | Engine) -> Backend:
    """The backend for ``bind``'s dialect."""
    name = bind.dialect.name
    found = _BACKENDS.get(name)
    if found is not None:
        return found
    if name == "sqlite":
        from memoryd.store.sqlite.backend import SqliteBackend

        found = SqliteBackend()
    elif name == "postgresql":
        from memoryd.store.postgres.backend import PostgresBackend

        found = PostgresBackend()
    else:
        raise ConfigError(f"memoryd stores data in SQLite or PostgreSQL, not {name!r}; "
                          "use a sqlite:/// or postgresql:// --db-url")
    _BACKENDS[name] = found
    return found
