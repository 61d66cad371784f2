"""The retention pass: erasures requested by memory.forget, and the periodic sweep.

Reads: forget requests (job target ``forget:<id>``); on ``tick``, rows past
their ttl or the session window and archived rows past the archive window.
Writes: erased rows (text, FTS entries, vectors, idempotency rows, derived
rows citing only them), archived or hard-deleted rows, audit events, and the
job's completion, in one transaction per job; a forget request's rows are
erased first, :data:`ERASE_CHUNK` at a time, each chunk in a transaction of its
own. Running it twice changes nothing: an erased row is skipped, a done
request is done.

After an erasure it checkpoints the WAL (TRUNCATE), so the erased text is
gone from the -wal file as well as from the database pages (secure_delete).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import structlog
from sqlalchemy import Connection

from memoryd.passes.base import PassContext, PerJobPass
from memoryd.queue.jobs import Job
from memoryd.store import lifecycle
from memoryd.store.engine import checkpoint_wal

log = structlog.get_logger(__name__)

FORGET_PREFIX = "forget:"
TICK = "tick"
#: Rows of a forget request erased per transaction (about 0.3 s of the write lock on a quiet
#: machine with secure_delete; a request holds up to 500).
ERASE_CHUNK = 32


class RetentionPass(PerJobPass):
    name: ClassVar[str] = "retention"
    consumes: ClassVar[str] = "schedule"
    batch_size: ClassVar[int] = 16
    schedule_key: ClassVar[str | None] = "retention_interval_s"

    def __init__(self) -> None:
        self._erased = False

    def prepare(self, job: Job, ctx: PassContext) -> None:
        """A forget request's rows are erased a chunk at a time, each chunk its own transaction:
        a request of 500 rows in one transaction held SQLite's write lock for seconds under
        load, and other clients' writes waited past the busy timeout (1003). The completing
        transaction (:meth:`apply`) then finds them erased and marks the request done."""
        if job.target.startswith(FORGET_PREFIX):
            now = datetime.fromtimestamp(ctx.now(), UTC)
            erased = lifecycle.erase_request_in_chunks(ctx.engine, job.target[len(FORGET_PREFIX):], now,
                                                       f"pass:{self.name}", chunk=ERASE_CHUNK)
            self._erased |= erased > 0

    def apply(self, conn: Connection, job: Job, now: datetime, ctx: PassContext) -> None:
        actor = f"pass:{self.name}"
        if job.target.startswith(FORGET_PREFIX):
            erased = lifecycle.finish_forget_request(conn, job.target[len(FORGET_PREFIX):], now, actor)
            self._erased |= erased > 0
        elif job.target == TICK:
            cfg = ctx.config
            expired = lifecycle.expire(conn, now, session_ttl_s=cfg.session_ttl_s,
                                       limit=cfg.retention_batch, actor=actor)
            purged = lifecycle.purge_archived(conn, now, window_s=cfg.archive_window_s,
                                              limit=cfg.retention_batch, actor=actor)
            self._erased |= purged > 0
            if expired or purged:
                log.info("retention.sweep", expired=expired, purged=purged)

    def after_batch(self, ctx: PassContext) -> None:
        if self._erased:
            checkpoint_wal(ctx.engine)
            self._erased = False
