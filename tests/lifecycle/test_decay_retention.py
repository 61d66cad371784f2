"""Decay, expiry, purge and the time-driven schedule, at the store and pass level, on a frozen clock.

Every ``now`` comes from the frozen clock (``utcnow()`` / ``time.time()`` under
freezegun), and the clock is moved across hours and days instead of sleeping.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time
from sqlalchemy import Engine, func, select

from memoryd.clock import to_rfc3339, utcnow
from memoryd.config import Config
from memoryd.daemon import schedules
from memoryd.passes.base import Pass, PassContext, PassResult
from memoryd.passes.decay import DecayPass
from memoryd.passes.retention import RetentionPass
from memoryd.queue import jobs as jobq
from memoryd.store import decay, lifecycle, links
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.memories import get_row, record_access
from memoryd.store.migrate import upgrade
from memoryd.store.schema import audit_events, jobs, meta
from tests.lifecycle.helpers import store_write

T0 = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)
HALF_LIFE_DAYS = 30.0
DAY = timedelta(days=1)
ACTOR = "pass:test"
INTERVALS = {"retention": 600.0, "decay": 3600.0}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Engine]:
    """A migrated SQLite store on a temp file (migrated before any clock is frozen)."""
    engine = create_store_engine(f"sqlite:///{tmp_path / 'memoryd.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


def _row(engine: Engine, memory_id: str) -> Any:
    with read_only(engine) as conn:
        return get_row(conn, memory_id)


def _decay(engine: Engine, limit: int = 100) -> dict[str, Any]:
    with engine.begin() as conn:
        return decay.run_batch(conn, utcnow(), half_life_days=HALF_LIFE_DAYS, limit=limit, actor=ACTOR)


def _expire(engine: Engine, session_ttl_s: float = 86400.0) -> int:
    with engine.begin() as conn:
        return lifecycle.expire(conn, utcnow(), session_ttl_s=session_ttl_s, limit=100, actor=ACTOR)


def _purge(engine: Engine, window_s: float) -> int:
    with engine.begin() as conn:
        return lifecycle.purge_archived(conn, utcnow(), window_s=window_s, limit=100, actor=ACTOR)


def _count(engine: Engine, table: Any, *where: Any) -> int:
    with read_only(engine) as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())


def _tick_jobs(engine: Engine, pass_name: str, *states: str) -> int:
    conds = [jobs.c["pass"] == pass_name, jobs.c.target == schedules.TICK]
    if states:
        conds.append(jobs.c.state.in_(states))
    return _count(engine, jobs, *conds)


def _enqueue_due(engine: Engine) -> list[str]:
    with engine.begin() as conn:
        return sorted(schedules.enqueue_due(conn, INTERVALS, now=time.time()))


def _claim_and_run(engine: Engine, p: Pass, ctx: PassContext) -> tuple[int, PassResult]:
    """What the runner does for one pass: claim its due jobs, run them; (jobs claimed, result)."""
    with engine.begin() as conn:
        batch = jobq.claim(conn, p.name, owner="test-node", now=time.time(), lease_s=300.0, limit=100)
    return len(batch), p.run(batch, ctx)


# -- decay -------------------------------------------------------------------------------------------

def test_importance_falls_with_idle_days_by_the_half_life_and_importance_raw_never_changes(
        store: Engine) -> None:
    with freeze_time(T0) as clock:
        old = store_write(store, "The staging cluster runs Kubernetes 1.29", utcnow(), importance=0.8)
        seen = []
        for days in (1, 6, 23, 30):  # cumulative idle: 1, 7, 30, 60 days
            clock.tick(days * DAY)
            _decay(store)
            seen.append(_row(store, old).importance)
        fresh = store_write(store, "The staging cluster has three nodes", utcnow(), importance=0.8)
        _decay(store)

    assert seen == sorted(seen, reverse=True) and len(set(seen)) == 4  # strictly falling
    assert seen[2] == pytest.approx(0.4, abs=1e-6)  # one half-life
    assert seen[3] == pytest.approx(0.2, abs=1e-6)  # two half-lives
    assert seen[0] == pytest.approx(0.8 * 0.5 ** (1 / 30), abs=1e-6)
    assert _row(store, old).importance_raw == 0.8
    # Positive control: a row written just now keeps its importance.
    assert _row(store, fresh).importance == pytest.approx(0.8)
    assert _row(store, fresh).importance_raw == 0.8


def test_reads_reinforce_importance_through_access_count_and_reset_idle_time(store: Engine) -> None:
    with freeze_time(T0) as clock:
        unread = store_write(store, "The linter config is in pyproject.toml", utcnow())
        often = store_write(store, "The formatter is ruff format", utcnow())
        late = store_write(store, "The type checker is mypy", utcnow())
        with store.begin() as conn:
            record_access(conn, {often: 5}, utcnow())  # five reads at T0: same idle time as `unread`
        clock.tick(29 * DAY)
        with store.begin() as conn:
            record_access(conn, {late: 1}, utcnow())  # one read a day before the decay run
        clock.tick(DAY)
        _decay(store)

    base = 0.5 * 0.5  # 30 idle days = one half-life
    assert _row(store, unread).importance == pytest.approx(base, abs=1e-6)
    assert _row(store, often).access_count == 5
    assert _row(store, often).importance == pytest.approx(base * (1 + 0.1 * math.log(6)), abs=1e-6)
    assert _row(store, late).importance == pytest.approx(0.5 * 0.5 ** (1 / 30) * (1 + 0.1 * math.log(2)),
                                                         abs=1e-6)
    assert _row(store, often).importance > _row(store, unread).importance
    assert {_row(store, m).importance_raw for m in (unread, often, late)} == {0.5}


def test_decay_batch_is_bounded_and_its_cursor_wraps_around(store: Engine) -> None:
    with freeze_time(T0) as clock:
        ids = [store_write(store, f"Decay batch row number {i}", utcnow(), importance=0.6) for i in range(5)]
        clock.tick(30 * DAY)
        runs, touched = [], []
        for _ in range(4):
            runs.append(_decay(store, limit=2))
            with read_only(store) as conn:
                cursor = conn.execute(select(meta.c.value).where(meta.c.key == decay.CURSOR_KEY)).scalar_one()
            touched.append((int(cursor), [round(_row(store, m).importance, 6) for m in ids]))

    assert [r["scanned"] for r in runs] == [2, 2, 1, 2]
    assert [r["wrapped"] for r in runs] == [False, False, True, False]
    seqs = [_row(store, m).seq for m in ids]
    assert [c for c, _ in touched] == [seqs[1], seqs[3], 0, seqs[1]]
    # The first run touched only its two rows; the rest kept their importance until their turn.
    assert touched[0][1] == [0.3, 0.3, 0.6, 0.6, 0.6]
    assert touched[2][1] == [0.3] * 5
    assert runs[3]["changed"] == 0  # the second lap at the same instant rewrites nothing


def test_decay_skips_rows_that_are_not_live(store: Engine) -> None:
    with freeze_time(T0) as clock:
        live = store_write(store, "A live row that decays", utcnow(), importance=0.6)
        retired = store_write(store, "A session row that gets archived", utcnow(), importance=0.6,
                              scope="session", owner="s1")
        clock.tick(2 * DAY)
        assert _expire(store) == 1
        clock.tick(28 * DAY)
        _decay(store)

    assert _row(store, retired).status == "archived"
    assert _row(store, retired).importance == 0.6
    assert _row(store, live).importance == pytest.approx(0.6 * 0.5 ** (30 / 30), abs=1e-6)


# -- expiry and purge -----------------------------------------------------------------------------------

def test_session_rows_are_archived_after_24_hours_and_not_at_23(store: Engine) -> None:
    with freeze_time(T0) as clock:
        session = store_write(store, "We are debugging the flaky login test", utcnow(),
                              scope="session", owner="sess-1")
        agent = store_write(store, "The login test uses a fake clock", utcnow())
        clock.tick(timedelta(hours=23))
        at_23h = _expire(store)
        status_23h = _row(store, session).status
        clock.tick(timedelta(hours=1))
        at_24h = _expire(store)
        archived_at = to_rfc3339(utcnow())

    assert (at_23h, status_23h) == (0, "active")
    assert at_24h == 1
    row = _row(store, session)
    assert row.status == "archived" and row.retired_at == archived_at
    assert row.content == "We are debugging the flaky login test"  # archived keeps its text until purged
    assert _row(store, agent).status == "active"  # positive control: not a session row
    assert _count(store, audit_events, audit_events.c.action == "memory.expire",
                  audit_events.c.memory_id == session) == 1


def test_a_rows_ttl_is_honoured_to_the_second(store: Engine) -> None:
    with freeze_time(T0) as clock:
        short = store_write(store, "The deploy freeze lasts one hour", utcnow(), ttl_s=3600)
        forever = store_write(store, "The deploy process needs two approvals", utcnow())
        clock.tick(timedelta(seconds=3599))
        before = _expire(store)
        clock.tick(timedelta(seconds=1))
        at = _expire(store)
        clock.tick(timedelta(hours=25))
        later = _expire(store)

    assert (before, at, later) == (0, 1, 0)
    assert _row(store, short).status == "archived"
    assert _row(store, forever).status == "active"


def test_archived_rows_are_hard_deleted_after_the_archive_window_with_their_links(store: Engine) -> None:
    window_s = 30 * 86400.0
    with freeze_time(T0) as clock:
        session = store_write(store, "Scratch note for this session only", utcnow(),
                              scope="session", owner="sess-9")
        neighbour = store_write(store, "Another session note that cites the scratch one", utcnow(),
                                scope="session", owner="sess-9", ttl_s=10 * 365 * 86400)
        kept = store_write(store, "A long-lived agent memory", utcnow())
        with store.begin() as conn:
            links.add(conn, neighbour, session, links.CITES, to_rfc3339(utcnow()))
        clock.tick(DAY)
        assert _expire(store, session_ttl_s=86400.0) == 2  # both session rows
        clock.tick(timedelta(seconds=window_s - 1))
        early = _purge(store, window_s)
        clock.tick(timedelta(seconds=1))
        due = _purge(store, window_s)

    assert early == 0
    assert due == 2
    assert _row(store, session) is None and _row(store, neighbour) is None
    assert _row(store, kept).status == "active"  # positive control
    with read_only(store) as conn:
        assert links.all_for(conn, session) == []
    assert _count(store, audit_events, audit_events.c.action == "memory.purge") == 2


# -- the schedule ----------------------------------------------------------------------------------------

def _finish_ticks(engine: Engine) -> None:
    """What a running daemon would do with its tick jobs: claim and complete them."""
    now = time.time()
    with engine.begin() as conn:
        for name in INTERVALS:
            for job in jobq.claim(conn, name, owner="test-node", now=now, lease_s=300.0, limit=10):
                jobq.complete(conn, job, now=now)


def test_a_laptop_asleep_for_a_week_enqueues_each_due_pass_once_on_wake(store: Engine) -> None:
    with freeze_time(T0) as clock:
        first = _enqueue_due(store)
        _finish_ticks(store)
        clock.tick(timedelta(seconds=600))
        ten_minutes = _enqueue_due(store)  # positive control: retention's interval has passed, decay's not
        _finish_ticks(store)
        clock.tick(7 * DAY)
        woke = _enqueue_due(store)
        live_after_wake = {p: _tick_jobs(store, p, "ready", "leased") for p in INTERVALS}
        clock.tick(timedelta(seconds=1))
        second_later = _enqueue_due(store)
        live_after_second = {p: _tick_jobs(store, p, "ready", "leased") for p in INTERVALS}

    assert first == ["decay", "retention"]
    assert ten_minutes == ["retention"]
    assert woke == ["decay", "retention"]
    assert live_after_wake == {"retention": 1, "decay": 1}
    assert second_later == []
    assert live_after_second == {"retention": 1, "decay": 1}
    # Once per wake, never once per missed interval (a week holds 1008 retention intervals).
    assert _tick_jobs(store, "retention") == 3
    assert _tick_jobs(store, "decay") == 2


def test_a_tick_left_unrun_before_sleep_is_not_doubled_on_wake(store: Engine) -> None:
    with freeze_time(T0) as clock:
        _enqueue_due(store)  # enqueued, then the lid closed before the runner took them
        clock.tick(7 * DAY)
        woke = _enqueue_due(store)

    assert woke == ["decay", "retention"]  # due again by the stored time...
    assert {p: _tick_jobs(store, p) for p in INTERVALS} == {"retention": 1, "decay": 1}  # ...one job each


def test_on_wake_the_retention_and_decay_passes_each_run_once_and_catch_up(store: Engine) -> None:
    cfg = Config(session_ttl_s=86400.0, decay_half_life_days=HALF_LIFE_DAYS)
    with freeze_time(T0) as clock:
        ctx = PassContext(engine=store, config=cfg, embedder=None, now=time.time)  # type: ignore[arg-type]
        session = store_write(store, "Session note written before the lid closed", utcnow(),
                              scope="session", owner="sess-7")
        durable = store_write(store, "Agent memory written before the lid closed", utcnow(), importance=0.8)
        _enqueue_due(store)
        before = {p.name: _claim_and_run(store, p, ctx) for p in (RetentionPass(), DecayPass())}
        clock.tick(7 * DAY)
        _enqueue_due(store)
        after = {p.name: _claim_and_run(store, p, ctx) for p in (RetentionPass(), DecayPass())}
        again = {p.name: _claim_and_run(store, p, ctx)[0] for p in (RetentionPass(), DecayPass())}

    once = {"retention": (1, 1), "decay": (1, 1)}  # (jobs claimed, jobs processed) per pass
    assert {name: (n, r.processed) for name, (n, r) in before.items()} == once
    assert {name: (n, r.processed) for name, (n, r) in after.items()} == once
    assert again == {"retention": 0, "decay": 0}
    assert _row(store, session).status == "archived"
    assert _row(store, durable).status == "active"
    assert _row(store, durable).importance == pytest.approx(0.8 * 0.5 ** (7 / 30), abs=1e-6)
    assert _row(store, durable).importance_raw == 0.8
