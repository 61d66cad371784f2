"""The pass contract: a small class with a name, what it consumes, and run().

A pass's ``run`` completes its jobs in the same transaction as its output
(queue.jobs.complete raises StaleLease when the lease was lost), and is
idempotent, so the queue's at-least-once delivery gives exactly-once effects.

One bad job never fails its neighbours: a pass reports a job it could not do
in :attr:`PassResult.failed` (the runner charges that job alone), and when a
whole batch raises, the runner runs its jobs again one by one to find the
one at fault (daemon/runner.py). What an error means is decided once, in
store/failures.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import Connection, Engine

from memoryd.config import Config
from memoryd.errors import StaleLease
from memoryd.models.embedder import EmbedderAPI
from memoryd.queue import jobs as jobq
from memoryd.queue.jobs import Job
from memoryd.store import failures


@dataclass
class PassContext:
    """What a pass may use: the store, the config, the models and the clock."""

    engine: Engine
    config: Config
    embedder: EmbedderAPI
    now: Callable[[], float]
    #: Threads a model may use for the current batch (the governor sets 1 when busy).
    threads: int = 2
    #: The LLM (None where no pass needs one, e.g. in unit tests of other passes).
    llm: Any = None


@dataclass
class PassResult:
    """What one batch did."""

    processed: int = 0  # jobs completed with their output written
    skipped: int = 0  # jobs completed with nothing to do (target gone)
    stale: int = 0  # jobs whose lease was lost before completion; output discarded
    #: Jobs that failed on their own (a permanent error), left leased for the runner to charge.
    failed: list[tuple[Job, BaseException]] = field(default_factory=list)


class Pass(ABC):
    """One kind of background work.

    ``consumes`` is ``"queue"`` (jobs enqueued per target) or ``"schedule"``
    (time-driven: daemon/schedules.py enqueues a ``tick`` job when due, and
    the runner runs it like any other job). ``implemented`` is False for a pass registered by name
    whose body comes in a later version: it is listed in status, never run,
    and nothing enqueues for it.
    """

    name: ClassVar[str]
    consumes: ClassVar[str] = "queue"
    implemented: ClassVar[bool] = True
    #: Runs a model (paused under memory or battery pressure).
    model_backed: ClassVar[bool] = False
    #: Jobs per batch when the machine is idle.
    batch_size: ClassVar[int] = 32
    #: For time-driven passes: the config key of the interval at which a ``tick`` job is enqueued.
    schedule_key: ClassVar[str | None] = None

    def unavailable_reason(self, ctx: PassContext) -> str | None:
        """Why this pass cannot run now (its jobs wait), or None."""
        return None if self.implemented else "not implemented in this version"

    def batch_limit(self, ctx: PassContext) -> int:
        return self.batch_size

    @abstractmethod
    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        """Process a claimed batch; complete each job with its output."""


class PerJobPass(Pass):
    """A pass whose every job is one transaction: the job's completion plus
    whatever :meth:`apply` writes (a lost lease rolls both back)."""

    def apply(self, conn: Connection, job: Job, now: datetime, ctx: PassContext) -> None:
        """Write this job's effect inside the completion's transaction."""
        raise NotImplementedError

    def prepare(self, job: Job, ctx: PassContext) -> None:
        """Work a job may do before its completing transaction, in short transactions of its
        own, so that no one transaction holds the store's write lock for long. It must be
        idempotent: a crash, or a lost lease and another worker, runs it again."""

    def after_batch(self, ctx: PassContext) -> None:
        """Hook run once the batch's transactions have committed."""

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        """Each job in its own transaction; a job that raises a permanent error is
        reported in ``failed`` and the batch goes on. A transient or unavailable
        error stops the batch (the runner gives the unfinished jobs back)."""
        result = PassResult()
        try:
            for job in batch:
                now_epoch = ctx.now()
                try:
                    self.prepare(job, ctx)
                    with ctx.engine.begin() as conn:
                        jobq.complete(conn, job, now=now_epoch)
                        self.apply(conn, job, datetime.fromtimestamp(now_epoch, UTC), ctx)
                except StaleLease:
                    result.stale += 1
                    continue
                except Exception as exc:
                    if failures.kind_of(exc) != "permanent":
                        raise
                    result.failed.append((job, exc))
                    continue
                result.processed += 1
        finally:
            self.after_batch(ctx)
        return result
