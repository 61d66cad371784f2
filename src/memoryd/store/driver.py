"""Choose the SQLite DB-API module in one place.

The standard library's ``sqlite3`` is used where it can load extensions
(sqlite-vec needs that) and its SQLite is recent enough; otherwise ``pysqlite3``
(a modern SQLite in a wheel).
Two SQLite libraries must never be loaded into one process, so every engine,
test and benchmark asks this module instead of importing a driver itself.
"""

from __future__ import annotations

import functools
import sqlite3
from types import ModuleType

from memoryd.errors import ConfigError

#: The oldest SQLite memoryd runs on: FTS5 'secure-delete' (migration 0003) arrived in 3.42.
MIN_SQLITE_VERSION = (3, 42, 0)


@functools.cache
def sqlite_module() -> ModuleType:
    """The DB-API module memoryd uses for SQLite."""
    if (hasattr(sqlite3.Connection, "enable_load_extension")
            and sqlite3.sqlite_version_info >= MIN_SQLITE_VERSION):
        return sqlite3
    try:
        import pysqlite3.dbapi2 as pysqlite
    except ImportError as exc:
        raise ConfigError(
            f"this Python's sqlite3 (SQLite {sqlite3.sqlite_version}) cannot load extensions or is "
            f"older than {'.'.join(map(str, MIN_SQLITE_VERSION))}, and pysqlite3 is not installed; "
            "install 'pysqlite3-binary' (Linux x86_64) or use a Python built with "
            "--enable-loadable-sqlite-extensions against a newer SQLite"
        ) from exc
    return pysqlite


def connect(path: str, timeout_s: float = 5.0) -> sqlite3.Connection:
    """A raw connection through the chosen module (benchmarks and tests use it), with
    sqlite-vec loaded: the vectors live in its vec0 table, which the ``memory_vectors``
    view reads (migration 0007)."""
    import sqlite_vec

    conn = sqlite_module().connect(path, timeout=timeout_s)
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.enable_load_extension(False)
    return conn
