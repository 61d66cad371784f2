"""What the indexes beside the store of record share (the HNSW graphs beside a SQLite store,
store/annindex/index_set.py, and the lexical shards beside either backend, store/lexindex/): the
thread that keeps one in step, the registry that tells a search which one serves its engine, the
manifest read and written atomically, and the trim of a change log, which must never fail an
index because the store's writer is busy."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import structlog
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

from memoryd.privatefs import open_private

log = structlog.get_logger(__name__)

T = TypeVar("T")


class IndexThread:
    """The thread of an index beside the store: started by :meth:`start`, woken by
    :meth:`wakeup` (something was committed), ended by :meth:`stop` (which waits for it)."""

    thread_name = "memoryd-index"

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        """Something was committed: apply the log soon."""
        self._wake.set()

    def stop(self) -> None:
        """Ask the thread to finish (it applies what it can and saves) and wait for it."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        raise NotImplementedError


class Registry(Generic[T]):
    """Which index serves an engine's searches (the daemon attaches its own at start)."""

    def __init__(self) -> None:
        self._by_engine: dict[int, T] = {}

    def attach(self, engine: Engine, index: T) -> None:
        self._by_engine[id(engine)] = index

    def detach(self, engine: Engine) -> None:
        self._by_engine.pop(id(engine), None)

    def attached(self, engine: Engine) -> T | None:
        return self._by_engine.get(id(engine))


def read_manifest(path: Path, event: str) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when there is none, or it cannot be read (logged as
    ``event``: the index is then rebuilt)."""
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning(event, path=str(path), error=str(exc), fix="rebuilding")
        return None
    return dict(value) if isinstance(value, dict) else None


def write_json(path: Path, value: dict[str, Any]) -> None:
    """Replace ``path`` with ``value`` atomically: a temporary file (0600, fsync'd), a rename,
    and an fsync of the directory."""
    tmp = path.with_suffix(".tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


Trim = Sequence[tuple[str, tuple[Any, ...]]] | Callable[[Connection], object]


def trim_log(engine: Engine, trim: Trim) -> bool:
    """Run a log's trim (``trim``: statements with their parameters, or a function of the
    connection) in one write transaction; False, and nothing done, when the store stayed locked
    past its busy timeout (a large import keeps the writer busy): the entries are trimmed at a
    later save, and a manifest that holds them is already on disk."""
    try:
        with engine.begin() as conn:
            if callable(trim):
                trim(conn)
            else:
                for sql, params in trim:
                    conn.exec_driver_sql(sql, params)
    except OperationalError as exc:
        if not is_busy(exc):
            raise
        log.info("index.log_trim_deferred", error=str(exc.orig), fix="trimmed at the next save")
        return False
    return True


def is_busy(exc: OperationalError) -> bool:
    """Whether the store gave up waiting for another writer (SQLite's busy timeout, PostgreSQL's
    lock timeout): worth trying again."""
    text = str(exc.orig).lower()
    return "locked" in text or "busy" in text or "lock timeout" in text
