"""A heartbeat that keeps a running batch's leases alive.

A claim leases its jobs for ``job_lease_s``; a batch that runs longer (a slow
model on a busy machine, a long LLM batch) would otherwise lose its jobs to the
next claimer while it still works on them: on PostgreSQL another daemon would
run them too. While a batch runs, a thread renews its leases every
``lease_s / RENEWALS_PER_LEASE`` seconds; it stops when the batch ends. A worker
that dies stops renewing, so its leases expire and any daemon reclaims them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from types import TracebackType

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from memoryd.queue import jobs as jobq
from memoryd.queue.jobs import Job

log = structlog.get_logger(__name__)

#: Renewals per lease period: two can fail (a store busy past its timeout) before a lease lapses.
RENEWALS_PER_LEASE = 3


class LeaseHeartbeat:
    """``with LeaseHeartbeat(engine, batch, lease_s, now):`` renews the batch's leases meanwhile."""

    def __init__(self, engine: Engine, batch: Sequence[Job], lease_s: float, now: Callable[[], float],
                 interval_s: float | None = None):
        self.engine = engine
        self.batch = list(batch)
        self.lease_s = lease_s
        self.now = now
        self.interval_s = interval_s if interval_s is not None else lease_s / RENEWALS_PER_LEASE
        self.renewals = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LeaseHeartbeat:
        if self.batch:
            self._thread = threading.Thread(target=self._loop, name="lease-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                with self.engine.begin() as conn:
                    held = jobq.renew(conn, self.batch, now=self.now(), lease_s=self.lease_s)
            except SQLAlchemyError as exc:  # busy store: the next beat tries again
                log.warning("lease.renew_failed", n=len(self.batch), error=str(exc))
                continue
            self.renewals += 1
            lost = len(self.batch) - len(held)
            if lost:
                # Reclaimed by another worker after a lapse: its completion will be skipped as stale.
                log.warning("lease.lost", lost=lost, n=len(self.batch))
                self.batch = [job for job in self.batch if job.id in held]
