"""Time-driven passes: enqueue one ``tick`` job per pass when its interval has passed.

The last enqueue time lives in the ``meta`` table, so the decision survives
restarts and sleep: a laptop that slept a week runs each due pass once on
wake (the tick job is deduplicated by (pass, target)), never zero times and
never once per missed interval.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, select

from memoryd.queue import jobs as jobq
from memoryd.store.backend import backend_for
from memoryd.store.schema import meta

TICK = "tick"


def _key(pass_name: str) -> str:
    return f"schedule.{pass_name}.last"


def last_enqueued(conn: Connection, pass_name: str) -> float | None:
    row = conn.execute(select(meta.c.value).where(meta.c.key == _key(pass_name))).first()
    return float(row[0]) if row else None


def enqueue_due(conn: Connection, intervals: Mapping[str, float], *, now: float,
                max_attempts: int = 5) -> list[str]:
    """Enqueue a tick for every pass whose interval has passed; return their names."""
    due = []
    for pass_name, interval in intervals.items():
        last = last_enqueued(conn, pass_name)
        if last is not None and now - last < interval:
            continue
        jobq.enqueue(conn, pass_name, TICK, now=now, max_attempts=max_attempts)
        stmt = backend_for(conn).insert(meta).values(key=_key(pass_name), value=repr(now))
        conn.execute(stmt.on_conflict_do_update(index_elements=[meta.c.key], set_={"value": repr(now)}))
        due.append(pass_name)
    return due
