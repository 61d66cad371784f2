"""The SQLite write path's statements, as SQLite receives them: each transaction begins with
BEGIN IMMEDIATE sent by the dialect (store/engine.py), savepoints are plain statements on
the driver (store/prepared.py), the audit pick reads lane 0 by its key (store/audit.py),
and the runner's queue probes, compiled once, answer as the SQLAlchemy queries did."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, and_, event, func, or_, select

from memoryd.errors import Conflict
from memoryd.queue import jobs as jobq
from memoryd.store import audit, driver, groupwrite
from memoryd.store.engine import read_only
from memoryd.store.memories import WriteContext, write_memory
from memoryd.store.schema import audit_lanes, jobs, memories
from memoryd.store.writes import WriteUnit, commit_units
from tests.lifecycle.helpers import new_memory

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@contextmanager
def traced(conn: Connection) -> Iterator[tuple[list[str], list[str]]]:
    """(what SQLite ran on ``conn``'s driver connection, what went through SQLAlchemy's execute)."""
    ran: list[str] = []
    through_sqlalchemy: list[str] = []
    raw = conn.connection.dbapi_connection
    assert raw is not None

    def record(_conn: Any, _cursor: Any, statement: str, *args: Any) -> None:
        through_sqlalchemy.append(statement.strip())

    raw.set_trace_callback(lambda sql: ran.append(sql.strip()))
    event.listen(conn, "before_cursor_execute", record)
    try:
        yield ran, through_sqlalchemy
    finally:
        raw.set_trace_callback(None)
        event.remove(conn, "before_cursor_execute", record)


def _ids(engine: Engine) -> list[str]:
    with read_only(engine) as conn:
        return [r[0] for r in conn.execute(select(memories.c.content).order_by(memories.c.seq))]


# -- BEGIN -----------------------------------------------------------------------------------


def test_a_write_transaction_begins_immediate_from_the_dialect(engine: Engine,
                                                                write_ctx: WriteContext) -> None:
    with engine.connect() as conn, traced(conn) as (ran, through_sqlalchemy):
        outcomes = commit_units(conn, [WriteUnit([new_memory("a note")], "t")], write_ctx, NOW)
    assert not isinstance(outcomes[0], Exception), outcomes
    # Without "-- ..." lines: statements SQLite runs itself (FTS5 writes its index as it commits).
    sent = [s for s in ran if not s.startswith("--")]
    assert sent[0] == "BEGIN IMMEDIATE" and sent[-1] == "COMMIT", ran
    assert sum(s.startswith("BEGIN") for s in ran) == 1
    # Sent by the dialect's do_begin on the driver, not as a statement through SQLAlchemy.
    assert not any(s.upper().startswith("BEGIN") for s in through_sqlalchemy), through_sqlalchemy


@contextmanager
def pooled_trace(engine: Engine) -> Iterator[list[str]]:
    """What SQLite runs on the engine's one pooled connection while the block runs."""
    ran: list[str] = []
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
    assert raw is not None
    raw.set_trace_callback(lambda sql: ran.append(sql.strip()))
    try:
        yield ran
    finally:
        raw.set_trace_callback(None)


def test_read_only_begins_deferred_and_the_next_write_immediate(engine: Engine, db_path: Path) -> None:
    engine.pool.dispose()  # one pooled connection from here, which every block below reuses
    with pooled_trace(engine) as ran:
        with read_only(engine) as conn:
            conn.execute(select(memories.c.id).limit(1))
            # A deferred transaction holds no write lock: another writer gets through meanwhile.
            other = driver.connect(str(db_path), timeout_s=0.0)
            other.isolation_level = None
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            other.close()
        assert ran[0] == "BEGIN DEFERRED", ran
        del ran[:]
        # The next transaction on the same pooled connection writes: IMMEDIATE again.
        with engine.begin() as conn:
            conn.execute(select(memories.c.id).limit(1))
        assert ran[0] == "BEGIN IMMEDIATE", ran


# -- savepoints ------------------------------------------------------------------------------


def _refused(content: str) -> Any:
    """A unit's op that writes a memory, then is refused: its write must not survive."""

    def op(conn: Connection, now: datetime, ctx: WriteContext) -> Any:
        write_memory(conn, new_memory(content), now, ctx)
        raise Conflict("refused after writing")

    return op


def test_a_refused_unit_rolls_back_alone_and_its_neighbours_commit(engine: Engine,
                                                                    write_ctx: WriteContext) -> None:
    units = [WriteUnit([new_memory("first", idempotency_key="k1")], "t1"),
             WriteUnit([], "t2", op=_refused("written then refused")),
             WriteUnit([new_memory("third", idempotency_key="k3")], "t3")]
    with engine.connect() as conn, traced(conn) as (ran, through_sqlalchemy):
        outcomes = commit_units(conn, units, write_ctx, NOW)
    assert isinstance(outcomes[1], Conflict)
    assert _ids(engine) == ["first", "third"]
    assert ran.count("SAVEPOINT memoryd_unit") == 3
    assert ran.count("ROLLBACK TO SAVEPOINT memoryd_unit") == 1
    assert ran.count("RELEASE SAVEPOINT memoryd_unit") == 2
    # Plain statements on the driver: none of SQLAlchemy's nested-transaction machinery.
    assert not any("SAVEPOINT" in s.upper() for s in through_sqlalchemy), through_sqlalchemy


def test_a_group_that_fails_after_inserting_is_rolled_back_before_the_per_unit_path(
        engine: Engine, write_ctx: WriteContext, monkeypatch: pytest.MonkeyPatch) -> None:
    real = groupwrite.write_plain

    def inserts_then_fails(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)  # every row of the group is inserted ...
        raise ValueError("a bug after the inserts")  # ... then the fast path fails

    monkeypatch.setattr("memoryd.store.writes.write_plain", inserts_then_fails)
    units = [WriteUnit([new_memory(f"note {i}")], f"t{i}") for i in range(3)]
    with engine.connect() as conn, traced(conn) as (ran, _):
        outcomes = commit_units(conn, units, write_ctx, NOW)
    assert all(not isinstance(o, Exception) for o in outcomes), outcomes
    # Each row once: the group's transaction was rolled back, and the per-unit path wrote
    # them again in a new one, each in a savepoint of its own (the group has none).
    assert _ids(engine) == ["note 0", "note 1", "note 2"]
    assert ran.count("BEGIN IMMEDIATE") == 2 and ran.count("ROLLBACK") == 1, ran
    assert ran.index("ROLLBACK") < ran.index("SAVEPOINT memoryd_unit")
    assert ran.count("SAVEPOINT memoryd_unit") == 3
    assert ran.count("ROLLBACK TO SAVEPOINT memoryd_unit") == 0


# -- the audit lane --------------------------------------------------------------------------


def test_sqlite_reads_audit_lane_0_by_its_key(engine: Engine, write_ctx: WriteContext) -> None:
    commit_units(engine, [WriteUnit([new_memory("opens lane 0")], "t")], write_ctx, NOW)
    with engine.connect() as conn, traced(conn) as (ran, _):
        commit_units(conn, [WriteUnit([new_memory("appends to lane 0")], "t")], write_ctx, NOW)
    picks = [s for s in ran if s.startswith("SELECT") and "audit_lanes" in s]
    assert len(picks) == 1, ran
    with engine.connect() as conn:
        params = (0,) * picks[0].count("?")  # the trace shows bound values, or placeholders
        plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {picks[0]}", params))
    assert "USING INTEGER PRIMARY KEY" in plan, (picks[0], plan)
    with read_only(engine) as conn:
        verdict = audit.check(conn)
    assert verdict.ok and list(verdict.heads) == [0] and verdict.heads[0][0] == 2


def test_a_sqlite_store_without_lane_0_appends_to_its_lowest_lane(engine: Engine,
                                                                    write_ctx: WriteContext) -> None:
    # As a store copied from PostgreSQL might be: lanes 1 and 2, no lane 0.
    with engine.begin() as conn:
        for lane in (2, 1):
            conn.execute(audit_lanes.insert().values(lane=lane, n=0, hash=audit.lane_genesis(lane),
                                                     opened_at="2026-05-01T00:00:00Z", opened_by="test"))
    commit_units(engine, [WriteUnit([new_memory("a note")], "t")], write_ctx, NOW)
    with read_only(engine) as conn:
        lanes = {int(r[0]): int(r[1]) for r in conn.execute(select(audit_lanes.c.lane, audit_lanes.c.n))}
        verdict = audit.check(conn)
    assert lanes == {1: 1, 2: 0}
    assert verdict.ok, verdict.problems


# -- the runner's queue probes -------------------------------------------------------------


def _due_before(conn: Connection, pass_names: Sequence[str], now: float) -> set[str]:
    """due_passes as it was written before it was compiled once (the reference)."""
    cols = []
    for i, name in enumerate(pass_names):
        ready = select(jobs.c.id).where(jobq.pass_col == name, jobs.c.state == "ready",
                                        jobs.c.run_after <= now).limit(1)
        expired = select(jobs.c.id).where(jobq.pass_col == name, jobs.c.state == "leased",
                                          jobs.c.lease_until < now).limit(1)
        cols.append(or_(ready.exists(), expired.exists()).label(f"p{i}"))
    row = conn.execute(select(*cols)).first()
    return {name for name, due in zip(pass_names, row or (), strict=False) if due}


def _next_due_before(conn: Connection, pass_names: Sequence[str]) -> float | None:
    """next_due as it was written before it was compiled once (the reference)."""
    cols = []
    for name in pass_names:
        cols.append(select(func.min(jobs.c.run_after))
                    .where(and_(jobq.pass_col == name, jobs.c.state == "ready")).scalar_subquery())
        cols.append(select(func.min(jobs.c.lease_until))
                    .where(and_(jobq.pass_col == name, jobs.c.state == "leased")).scalar_subquery())
    row = conn.execute(select(*cols)).first()
    candidates = [v for v in (row or ()) if v is not None]
    return min(candidates) if candidates else None


PASSES = ("embed", "classify", "extract", "reflect", "decay")


def _job(conn: Connection, name: str, target: str, state: str, run_after: float,
         lease_until: float | None) -> None:
    conn.execute(jobs.insert().values(
        {"pass": name, "target": target, "payload": {}, "state": state, "priority": 0,
         "run_after": run_after, "attempts": 1, "max_attempts": 5, "lease_until": lease_until,
         "created_at": run_after, "updated_at": run_after}))


def test_compiled_queue_probes_answer_as_the_queries_they_replace(engine: Engine) -> None:
    rng = random.Random(7)
    base = 1_000_000.0
    with engine.begin() as conn:
        for i in range(60):
            name = rng.choice(PASSES[:3])  # "reflect" and "decay" have one job each, below
            state = rng.choice(("ready", "leased", "done", "dead"))
            _job(conn, name, f"t{i}", state, base + rng.randint(-50, 50),
                 base + rng.randint(-50, 50) if state == "leased" else None)
        # Due exactly at a time asked (run_after <= now), and a lease ending exactly then (< now).
        _job(conn, "reflect", "r1", "ready", base + 5.0, None)
        _job(conn, "decay", "d1", "leased", base + 60.0, base)
    answers = set()
    for names in (PASSES, PASSES[1:], ("extract",), ("reflect",), ("decay",)):
        for now in [base + d for d in (-60.0, -20.0, -5.0, 0.0, 5.0, 20.0, 60.0)]:
            with read_only(engine) as conn:
                due, expected_due = jobq.due_passes(conn, names, now=now), _due_before(conn, names, now)
                nxt, expected_next = jobq.next_due(conn, names, now=now), _next_due_before(conn, names)
            assert due == expected_due, (names, now)
            assert nxt == expected_next, (names, now)
            answers.add(frozenset(due))
    assert len(answers) > 3  # the fixture makes the answer change with the time asked


def test_queue_probes_are_compiled_once_per_list_of_passes(engine: Engine,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[str, ...]] = []
    due_query, next_query = jobq._due_query, jobq._next_due_query

    def counting(real: Any) -> Any:
        def build(names: Sequence[str]) -> Any:
            built.append(tuple(names))
            return real(names)
        return build

    monkeypatch.setattr(jobq, "_due_query", counting(due_query))
    monkeypatch.setattr(jobq, "_next_due_query", counting(next_query))
    names = ("embed", "probe-once")  # a list no other test compiled
    for now in (1.0, 2.0, 3.0):
        with read_only(engine) as conn, traced(conn) as (_, through_sqlalchemy):
            jobq.due_passes(conn, names, now=now)
            jobq.next_due(conn, names, now=now)
        assert through_sqlalchemy == []  # run on the driver's cursor
    assert built == [names, names]
