"""One writer at a time inside the daemon, handed over at once, foreground first.

SQLite admits one write transaction at a time. When two of the daemon's own
threads (the group committer and the pass runner) both ask, the loser waits
in SQLite's busy handler, which sleeps 1, 2, 5, 10 … ms between tries: a
client's write could wait 10 ms behind a background pass that finished long
before. The gate queues the daemon's writers in-process instead and wakes the
next one the moment a transaction commits or rolls back. Threads marked
foreground (the group committer: clients wait on it) go before background
ones (passes, schedules) that are waiting at the same time.

Other processes (an operator's CLI) still meet the daemon at SQLite's lock,
with the busy timeout as before. An acquire that waits past the timeout goes
ahead without the gate and leaves the wait to SQLite, so a thread that holds
two write transactions at once can never deadlock here.
"""

from __future__ import annotations

import threading
import time
from typing import Any

_local = threading.local()


def mark_foreground() -> None:
    """Mark the calling thread as a foreground writer (a client is waiting on it)."""
    _local.foreground = True


def is_foreground() -> bool:
    return bool(getattr(_local, "foreground", False))


def _key(conn: Any) -> int:
    """The driver connection behind ``conn`` (SQLAlchemy hands the dialect its pool proxy)."""
    return id(getattr(conn, "dbapi_connection", None) or conn)


class WriteGate:
    """A lock over write transactions, owned by the DBAPI connection that began one."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._holder: int | None = None
        self._foreground_waiting = 0
        #: Acquires that timed out and went ahead without the gate.
        self.timeouts = 0

    def acquire(self, dbapi_conn: Any) -> bool:
        """Wait for the gate for ``dbapi_conn``; False if the wait timed out (go on without it)."""
        key = _key(dbapi_conn)
        fg = is_foreground()
        deadline = time.monotonic() + self.timeout_s
        with self._cond:
            if fg:
                self._foreground_waiting += 1
            try:
                while self._holder is not None or (not fg and self._foreground_waiting):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.timeouts += 1
                        return False
                    self._cond.wait(left)
                self._holder = key
            finally:
                if fg:
                    self._foreground_waiting -= 1
                    if not self._foreground_waiting:
                        self._cond.notify_all()
        return True

    def release(self, dbapi_conn: Any) -> None:
        """Open the gate if ``dbapi_conn`` holds it (a no-op otherwise)."""
        with self._cond:
            if self._holder == _key(dbapi_conn):
                self._holder = None
                self._cond.notify_all()

    @property
    def held(self) -> bool:
        return self._holder is not None
