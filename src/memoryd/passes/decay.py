"""The decay pass (time-driven): one bounded batch of importance updates per tick.

Reads: live rows after the stored cursor. Writes: ``importance`` (never
``importance_raw``), the cursor, one audit event per batch, and the job's
completion, in one transaction. Running it twice at the same instant writes
the same values.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from sqlalchemy import Connection

from memoryd.passes.base import PassContext, PerJobPass
from memoryd.queue.jobs import Job
from memoryd.store import decay


class DecayPass(PerJobPass):
    name: ClassVar[str] = "decay"
    consumes: ClassVar[str] = "schedule"
    batch_size: ClassVar[int] = 1
    schedule_key: ClassVar[str | None] = "decay_interval_s"

    def apply(self, conn: Connection, job: Job, now: datetime, ctx: PassContext) -> None:
        decay.run_batch(conn, now, half_life_days=ctx.config.decay_half_life_days,
                        limit=ctx.config.decay_batch, actor=f"pass:{self.name}")
