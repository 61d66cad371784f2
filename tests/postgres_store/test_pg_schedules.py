"""Time-driven passes across daemons sharing PostgreSQL: one period's tick is claimed and
enqueued once, however many daemons check at the same moment."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import Engine, text

from memoryd.daemon import schedules
from memoryd.store.engine import create_store_engine

pytestmark = pytest.mark.postgres

DAEMONS = 6
INTERVALS = {"decay": 3600.0, "retention": 600.0}


def test_concurrent_checks_of_one_period_enqueue_each_tick_once(pg_engine: Engine) -> None:
    engines = [create_store_engine(pg_engine.url.render_as_string(hide_password=False))
               for _ in range(DAEMONS)]
    now = time.time()
    start = threading.Barrier(DAEMONS)
    claimed: list[list[str]] = []
    errors: list[BaseException] = []

    def daemon(engine: Engine) -> None:
        try:
            start.wait(10)
            with engine.begin() as conn:
                claimed.append(schedules.enqueue_due(conn, INTERVALS, now=now))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=daemon, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for engine in engines:
        engine.dispose()
    assert not errors, errors
    # Each pass's period went to exactly one daemon, and one tick job exists per pass.
    for name in INTERVALS:
        assert sum(name in due for due in claimed) == 1, claimed
    with pg_engine.begin() as conn:
        ticks = dict(conn.execute(text(
            "SELECT pass, count(*) FROM jobs WHERE target = 'tick' GROUP BY pass")).all())
        assert ticks == dict.fromkeys(INTERVALS, 1)
        # The period is spent even once its tick is done; the next period is claimed again.
        conn.execute(text("UPDATE jobs SET state = 'done' WHERE target = 'tick'"))
        assert schedules.enqueue_due(conn, INTERVALS, now=now + 1) == []
        assert schedules.enqueue_due(conn, INTERVALS, now=now + 601) == ["retention"]
