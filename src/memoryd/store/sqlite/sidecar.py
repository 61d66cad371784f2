"""What the indexes beside a SQLite store share: the manifest written atomically, and the trim of
their change log, which must never fail an index because the store's writer is busy."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from memoryd.privatefs import open_private

log = structlog.get_logger(__name__)


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


def trim_log(engine: Engine, statements: Sequence[tuple[str, tuple[Any, ...]]]) -> bool:
    """Run ``statements`` (a log's trim) in one write transaction; False, and nothing done, when
    the store stayed locked past its busy timeout (a large import keeps the writer busy): the
    entries are trimmed at a later save, and a manifest that holds them is already on disk."""
    try:
        with engine.begin() as conn:
            for sql, params in statements:
                conn.exec_driver_sql(sql, params)
    except OperationalError as exc:
        if not is_busy(exc):
            raise
        log.info("index.log_trim_deferred", error=str(exc.orig), fix="trimmed at the next save")
        return False
    return True


def is_busy(exc: OperationalError) -> bool:
    """Whether SQLite gave up waiting for another writer (busy timeout): worth trying again."""
    text = str(exc.orig).lower()
    return "locked" in text or "busy" in text
