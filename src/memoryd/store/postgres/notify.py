"""LISTEN/NOTIFY: a job enqueued by one daemon wakes every daemon sharing the database.

Enqueueing sends ``NOTIFY memoryd_jobs`` in the enqueueing transaction
(PostgreSQL delivers it at commit, and folds repeats within one transaction
into one). Each daemon keeps one extra connection that LISTENs and wakes its
pass runner, so an idle daemon with a model drains another daemon's backlog at
once instead of at its next tick (``tick_interval_s``). A lost connection is
reopened after a pause; meanwhile the ticks still drain the queue.

The group committer's transactions do not NOTIFY themselves: a transaction
that has sent NOTIFY takes one database-wide lock from its commit until it
ends, so every such commit in the cluster (and its WAL flush) runs one after
another. Its connections carry DEFER_NOTIFY instead, and once a transaction
that enqueued jobs has committed, the committer asks this daemon's
:class:`Notifier` to send one NOTIFY from a connection of its own, at most
every ``MIN_INTERVAL_S`` (a burst of commits costs one notification). The
listeners wake after the jobs are visible, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from weakref import WeakKeyDictionary

import structlog
from sqlalchemy import Connection, Engine, text

from memoryd.masking import mask_url
from memoryd.store.prepared import prepare, run

log = structlog.get_logger(__name__)

CHANNEL = "memoryd_jobs"
#: How often the listener checks for a stop, and the pause before reconnecting.
POLL_S = 1.0
RECONNECT_S = 5.0


#: Connection.info key: this connection's transactions leave the NOTIFY to the Notifier.
DEFER_NOTIFY = "memoryd.defer_notify"
#: Connection.info key: the current transaction enqueued jobs; notify once it has committed.
NOTIFY_PENDING = "memoryd.notify_pending"
#: A notifier sends at most one NOTIFY this often.
MIN_INTERVAL_S = 0.02

_notifiers: WeakKeyDictionary[Engine, Notifier] = WeakKeyDictionary()


def deferred_notifier(engine: Engine) -> Notifier | None:
    """The running Notifier of ``engine`` (None: transactions NOTIFY themselves)."""
    return _notifiers.get(engine)


def notify_jobs(conn: Connection) -> None:
    """Tell every listening daemon, at this transaction's commit, that jobs were enqueued
    (or, on a DEFER_NOTIFY connection, mark the transaction for its committer to tell them
    once it has committed)."""
    if conn.info.get(DEFER_NOTIFY):
        conn.info[NOTIFY_PENDING] = True
        return
    # On the driver's cursor: the group committer sends it in pipeline mode.
    run(conn, prepare(conn, "notify-jobs", lambda: text(f"NOTIFY {CHANNEL}")), {})


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


class Notifier:
    """A thread that sends ``NOTIFY`` on a connection of its own when asked (coalesced)."""

    def __init__(self, engine: Engine):
        self.url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.shown = mask_url(engine.url.render_as_string(hide_password=False))
        self.sent = 0
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-notifier", daemon=True)
        _notifiers[engine] = self

    def start(self) -> Notifier:
        self._thread.start()
        return self

    def request(self) -> None:
        """Notify the listeners soon (thread-safe; call after the enqueueing commit)."""
        self._wanted.set()

    def stop(self) -> None:
        self._stop.set()
        self._wanted.set()
        self._thread.join(POLL_S * 3)

    def _run(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    while not self._stop.is_set():
                        self._wanted.wait(POLL_S)
                        if self._stop.is_set() or not self._wanted.is_set():
                            continue
                        self._wanted.clear()
                        conn.execute(f"NOTIFY {CHANNEL}")
                        self.sent += 1
                        self._stop.wait(MIN_INTERVAL_S)
            except psycopg.Error as exc:
                # The listeners' ticks still drain the queue meanwhile.
                log.warning("notifier.lost", url=self.shown, error=str(exc).strip(), retry_s=RECONNECT_S)
                self._stop.wait(RECONNECT_S)


class Cluster:
    """The listener and the notifier, started and stopped together (Backend.job_listener)."""

    def __init__(self, engine: Engine, wake: Callable[[], None]):
        self.listener = JobListener(engine, wake)
        self.notifier = Notifier(engine)

    def start(self) -> Cluster:
        self.listener.start()
        self.notifier.start()
        return self

    def stop(self) -> None:
        self.notifier.stop()
        self.listener.stop()
