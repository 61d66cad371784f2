"""LISTEN/NOTIFY: a job enqueued by one daemon wakes every daemon sharing the database.

Enqueueing sends ``NOTIFY memoryd_jobs`` in the enqueueing transaction
(PostgreSQL delivers it at commit, and folds repeats within one transaction
into one). Each daemon keeps one extra connection that LISTENs and wakes its
pass runner, so an idle daemon with a model drains another daemon's backlog at
once instead of at its next tick (``tick_interval_s``). A lost connection is
reopened after a pause; meanwhile the ticks still drain the queue.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog
from sqlalchemy import Connection, Engine

from memoryd.masking import mask_url

log = structlog.get_logger(__name__)

CHANNEL = "memoryd_jobs"
#: How often the listener checks for a stop, and the pause before reconnecting.
POLL_S = 1.0
RECONNECT_S = 5.0


def notify_jobs(conn: Connection) -> None:
    """Tell every listening daemon, at this transaction's commit, that jobs were enqueued."""
    conn.exec_driver_sql(f"NOTIFY {CHANNEL}")


class JobListener:
    """A thread that LISTENs on CHANNEL and calls ``wake`` for each notification."""

    def __init__(self, engine: Engine, wake: Callable[[], None]):
        self.url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.shown = mask_url(engine.url.render_as_string(hide_password=False))
        self.wake = wake
        self.woken = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-listener", daemon=True)

    def start(self) -> JobListener:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(POLL_S * 3)

    def _run(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    log.info("listener.listening", channel=CHANNEL)
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=POLL_S, stop_after=1):
                            self.woken += 1
                            self.wake()
            except psycopg.Error as exc:
                log.warning("listener.lost", url=self.shown, error=str(exc).strip(),
                            retry_s=RECONNECT_S)
                self._stop.wait(RECONNECT_S)
