"""One daemon per data directory: an exclusive, advisory OS lock on a file in it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from memoryd import privatefs
from memoryd.errors import MemorydError


class DataDirLocked(MemorydError):
    """Another daemon owns this data directory."""


class DataDirLock:
    """``flock`` on ``<data_dir>/memoryd.lock``; released when the process dies."""

    def __init__(self, data_dir: Path):
        self.path = data_dir / "memoryd.lock"
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        privatefs.make_dirs(self.path.parent)
        # Opened 0600 (and made so if an older memoryd left it looser): it names our pid.
        fh = os.fdopen(privatefs.open_private(self.path, os.O_RDWR | os.O_APPEND), "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise DataDirLocked(
                f"another memoryd (pid {holder}) owns the data directory {self.path.parent}; "
                "stop it first, or pass another --data-dir"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
