"""The decay pass (time-driven): one bounded batch of importance updates per tick.

Reads: live rows after the stored cursor. Writes: ``importance`` (never
``importance_raw``), the cursor, one audit event per batch, and the job's
completion, in one transaction. Running it twice at the same instant writes
the same values.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

from memoryd.errors import StaleLease
from memoryd.passes.base import Pass, PassContext, PassResult
from memoryd.queue import jobs as jobq
from memoryd.queue.jobs import Job
from memoryd.store import decay


class DecayPass(Pass):
    name: ClassVar[str] = "decay"
    batch_size: ClassVar[int] = 1
    schedule_key: ClassVar[str | None] = "decay_interval_s"

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        result = PassResult()
        for job in batch:
            now_epoch = ctx.now()
            try:
                with ctx.engine.begin() as conn:
                    jobq.complete(conn, job, now=now_epoch)
                    decay.run_batch(conn, datetime.fromtimestamp(now_epoch, UTC),
                                    half_life_days=ctx.config.decay_half_life_days,
                                    limit=ctx.config.decay_batch, actor=f"pass:{self.name}")
            except StaleLease:
                result.stale += 1
                continue
            result.processed += 1
        return result
