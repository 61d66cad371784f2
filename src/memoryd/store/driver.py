"""Choose the SQLite DB-API module in one place.

The standard library's ``sqlite3`` is used where it can load extensions
(sqlite-vec needs that); otherwise ``pysqlite3`` (a modern SQLite in a wheel).
Two SQLite libraries must never be loaded into one process, so every engine,
test and benchmark asks this module instead of importing a driver itself.
"""

from __future__ import annotations

import functools
import sqlite3
from types import ModuleType

from memoryd.errors import ConfigError


@functools.cache
def sqlite_module() -> ModuleType:
    """The DB-API module memoryd uses for SQLite."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        import pysqlite3.dbapi2 as pysqlite
    except ImportError as exc:
        raise ConfigError(
            "this Python's sqlite3 cannot load extensions and pysqlite3 is not installed; "
            "install 'pysqlite3-binary' (Linux x86_64) or use a Python built with "
            "--enable-loadable-sqlite-extensions"
        ) from exc
    return pysqlite


def connect(path: str, timeout_s: float = 5.0) -> sqlite3.Connection:
    """A raw connection through the chosen module (benchmarks and tests use it)."""
    return sqlite_module().connect(path, timeout=timeout_s)
