"""Time-driven passes: enqueue one ``tick`` job per pass when its interval has passed.

The last enqueue time lives in the ``meta`` table, so the decision survives
restarts and sleep: a laptop that slept a week runs each due pass once on
wake (the tick job is deduplicated by (pass, target)), never zero times and
never once per missed interval.

Several daemons may share one store (PostgreSQL): a period is claimed by one
statement, an upsert of the pass's last enqueue time that only takes effect
when the interval has passed. Concurrent claimers of one period serialize on
the meta row, and only the first finds the interval passed, so each period's
tick is enqueued once across the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, Float, cast, select

from memoryd.queue import jobs as jobq
from memoryd.store.backends import backend_for
from memoryd.store.schema import meta

TICK = "tick"


def _key(pass_name: str) -> str:
    return f"schedule.{pass_name}.last"


def last_enqueued(conn: Connection, pass_name: str) -> float | None:
    row = conn.execute(select(meta.c.value).where(meta.c.key == _key(pass_name))).first()
    return float(row[0]) if row else None


def claim_period(conn: Connection, pass_name: str, interval: float, *, now: float) -> bool:
    """Record ``now`` as the pass's last enqueue if ``interval`` has passed since the last one,
    in one statement; True when this caller recorded it (and so owns the period)."""
    insert = backend_for(conn).insert(meta).values(key=_key(pass_name), value=repr(now))
    claim = insert.on_conflict_do_update(
        index_elements=[meta.c.key], set_={"value": repr(now)},
        where=cast(meta.c.value, Float) <= now - interval,
    ).returning(meta.c.key)
    return conn.execute(claim).first() is not None


def enqueue_due(conn: Connection, intervals: Mapping[str, float], *, now: float,
                max_attempts: int = 5) -> list[str]:
    """Enqueue a tick for every pass whose interval has passed and whose period this caller
    claimed; return their names."""
    due = []
    for pass_name, interval in intervals.items():
        if not claim_period(conn, pass_name, interval, now=now):
            continue
        jobq.enqueue(conn, pass_name, TICK, now=now, max_attempts=max_attempts)
        due.append(pass_name)
    return due
