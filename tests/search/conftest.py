"""Fixtures for the search suite: real ``memoryd run`` daemons over real sockets.

Each test module starts its own daemon(s) with a module-scoped fixture built on
:func:`spawn`, seeds it over the socket, and stops it with SIGTERM at the end
of the module (``stop_cleanly`` requires exit code 0).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.search._daemon import SearchDaemon


@pytest.fixture(scope="session")
def spawn() -> Iterator[Callable[..., SearchDaemon]]:
    """Start a daemon: ``spawn(label, embedder='bundled', config=None, db_url=None)`` (db_url:
    a PostgreSQL store; None keeps SQLite in the daemon's data dir).

    Module fixtures stop their daemons themselves; whatever is still running
    at the end of the session is stopped here, and the temp tree removed.
    """
    root = Path(tempfile.mkdtemp(prefix="mds-", dir="/tmp"))
    started: list[SearchDaemon] = []

    def _spawn(label: str, embedder: str = "bundled", config: dict[str, Any] | None = None,
               db_url: str | None = None) -> SearchDaemon:
        daemon = SearchDaemon(root, label, embedder, config, db_url)
        started.append(daemon)
        return daemon.start()

    yield _spawn
    for daemon in started:
        daemon.stop()
    if os.environ.get("MEMORYD_TEST_KEEP"):
        sys.stderr.write(f"\nkept {root}\n")
    else:
        shutil.rmtree(root, ignore_errors=True)

