"""Enqueue, claim, complete, fail, release and inspect jobs.

Delivery is at least once: a claimed job whose worker dies is reclaimed once
its lease expires. Completion is checked against the lease owner and token in
the same transaction as the pass's output, so a worker that lost its lease
cannot write; passes are idempotent, so a redelivery changes nothing twice.
Every function takes ``now`` (epoch seconds) and runs in the caller's
transaction; write transactions on SQLite begin IMMEDIATE (store/engine.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, and_, bindparam, case, func, or_, select, update

from memoryd.clock import rfc3339_from_epoch
from memoryd.errors import StaleLease
from memoryd.queue.backoff import backoff_s
from memoryd.store.backends import backend_for
from memoryd.store.ids import MAX_INTEGER
from memoryd.store.prepared import BULK_MIN_ROWS, fetch, prepare, run_many
from memoryd.store.rows import insert_rows
from memoryd.store.schema import jobs

pass_col: ColumnElement[str] = jobs.c["pass"]
LIVE = ("ready", "leased")


@dataclass(frozen=True)
class Job:
    """A claimed job; ``lease_token`` proves the claim at completion."""

    id: int
    pass_name: str
    target: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    lease_owner: str
    lease_token: str


def _insert_unless_live(conn: Connection) -> Any:
    """INSERT into jobs that does nothing where a live job holds (pass, target) (uq_jobs_live)."""
    return backend_for(conn).insert(jobs).on_conflict_do_nothing()


def enqueue(conn: Connection, pass_name: str, target: str, *, now: float,
            payload: dict[str, Any] | None = None, priority: int = 0, max_attempts: int = 5,
            run_after: float | None = None) -> bool:
    """Add a job unless a live one exists for (pass, target); True when added."""
    values = {
        "pass": pass_name, "target": target, "payload": payload or {}, "state": "ready",
        "priority": priority, "run_after": now if run_after is None else run_after,
        "attempts": 0, "max_attempts": max_attempts, "created_at": now, "updated_at": now,
    }
    # RETURNING, not rowcount: SQLAlchemy reports -1 for a psycopg INSERT's rowcount (truthy).
    added = conn.execute(_insert_unless_live(conn).values(**values).returning(jobs.c.id)).first() is not None
    if added:
        backend_for(conn).notify_jobs(conn)
    return added


_ENQUEUE_COLUMNS = ("pass", "target", "payload", "state", "priority", "run_after", "attempts", "max_attempts",
                    "created_at", "updated_at")


def enqueue_many(conn: Connection, pairs: Sequence[tuple[str, str]], *, now: float,
                 max_attempts: int = 5) -> None:
    """:func:`enqueue` for many (pass, target) pairs, in one driver call; live jobs are kept.

    The group committer's and the embed pass's path: the statement is compiled
    once (store/prepared.py) instead of built per job.
    """
    if backend_for(conn).binds_arrays and len(pairs) >= BULK_MIN_ROWS:
        # A large batch: one multi-row statement on PostgreSQL (store/postgres/bulk.py).
        insert_rows(conn, jobs, _ENQUEUE_COLUMNS,
                    [{"pass": p, "target": t, "payload": "{}", "state": "ready", "priority": 0,
                      "run_after": now, "attempts": 0, "max_attempts": max_attempts, "created_at": now,
                      "updated_at": now} for p, t in pairs], do_nothing=True)
    else:
        # The constant columns are in the statement: four values a job to bind, not ten.
        stmt = prepare(conn, "enqueue-many", lambda: _insert_unless_live(conn).values(
            {pass_col: bindparam("pass_name"), jobs.c.target: bindparam("target"),
             jobs.c.payload: "{}", jobs.c.state: "ready", jobs.c.priority: 0,
             jobs.c.run_after: bindparam("now"), jobs.c.attempts: 0,
             jobs.c.max_attempts: bindparam("max_attempts"), jobs.c.created_at: bindparam("now"),
             jobs.c.updated_at: bindparam("now")}))
        run_many(conn, stmt, [{"pass_name": p, "target": t, "now": now, "max_attempts": max_attempts}
                              for p, t in pairs])
    if pairs:
        backend_for(conn).notify_jobs(conn)


def claim(conn: Connection, pass_name: str, *, owner: str, now: float, lease_s: float,
          limit: int) -> list[Job]:
    """Lease up to ``limit`` due jobs of one pass in a single statement.

    Takes ready jobs whose ``run_after`` has come and leased jobs whose lease
    has expired (their worker died); counts the attempt now, so a job that
    kills its worker every time still reaches ``max_attempts``.
    """
    # An expired lease that has used every attempt is dead, not reclaimable.
    conn.execute(
        update(jobs)
        .where(pass_col == pass_name, jobs.c.state == "leased", jobs.c.lease_until < now,
               jobs.c.attempts >= jobs.c.max_attempts)
        .values(state="dead", last_error=func.coalesce(jobs.c.last_error, "lease expired"),
                lease_owner=None, lease_token=None, lease_until=None, updated_at=now)
    )
    due = or_(
        and_(jobs.c.state == "ready", jobs.c.run_after <= now),
        and_(jobs.c.state == "leased", jobs.c.lease_until < now),
    )
    pick = (
        select(jobs.c.id).where(pass_col == pass_name, due)
        .order_by(jobs.c.priority.desc(), jobs.c.run_after, jobs.c.id).limit(limit)
    )
    # On PostgreSQL: FOR UPDATE SKIP LOCKED, so daemons sharing the queue never take one job twice.
    pick = backend_for(conn).lock_claim(pick)
    token = secrets.token_hex(8)
    rows = conn.execute(
        update(jobs)
        .where(jobs.c.id.in_(pick.scalar_subquery()))
        .values(state="leased", lease_owner=owner, lease_token=token,
                lease_until=now + lease_s, attempts=jobs.c.attempts + 1, updated_at=now)
        .returning(jobs.c.id, jobs.c.target, jobs.c.payload, jobs.c.attempts, jobs.c.max_attempts)
    ).all()
    return sorted(
        (Job(r.id, pass_name, r.target, r.payload or {}, r.attempts, r.max_attempts, owner, token)
         for r in rows),
        key=lambda j: j.id,
    )


def _owned(job: Job) -> Any:
    return and_(jobs.c.id == job.id, jobs.c.state == "leased",
                jobs.c.lease_owner == job.lease_owner, jobs.c.lease_token == job.lease_token)


def complete(conn: Connection, job: Job, *, now: float) -> None:
    """Mark a job done; raise StaleLease if this worker no longer holds it.

    Call in the same transaction as the pass's output and roll that output
    back (or skip it) on StaleLease.
    """
    res = conn.execute(
        update(jobs).where(_owned(job)).values(
            state="done", finished_at=now, updated_at=now, lease_owner=None,
            lease_token=None, lease_until=None, last_error=None,
        )
    )
    if res.rowcount != 1:
        raise StaleLease(f"job {job.id} ({job.pass_name}:{job.target}) is no longer leased by us")


def complete_many(conn: Connection, batch: Sequence[Job], *, now: float) -> set[int]:
    """Mark the jobs this worker still holds done, in one statement; return their ids.

    The jobs not returned were no longer leased by us (stale): the caller
    writes nothing for them, as it would on :func:`complete`'s StaleLease.
    """
    return _update_held(conn, batch, state="done", finished_at=now, updated_at=now, lease_owner=None,
                        lease_token=None, lease_until=None, last_error=None)


def renew(conn: Connection, batch: Sequence[Job], *, now: float, lease_s: float) -> set[int]:
    """Extend the leases this worker still holds on ``batch`` to ``now + lease_s``; return the
    ids renewed (a job missing from it was lost: reclaimed after its lease expired)."""
    return _update_held(conn, batch, lease_until=now + lease_s, updated_at=now)


def _update_held(conn: Connection, batch: Sequence[Job], **values: Any) -> set[int]:
    """Set ``values`` on the jobs of ``batch`` still leased under the lease they were claimed
    with (one statement per lease); return the ids updated."""
    held: set[int] = set()
    by_lease: dict[tuple[str, str], list[int]] = {}
    for job in batch:
        by_lease.setdefault((job.lease_owner, job.lease_token), []).append(job.id)
    for (owner, token), ids in by_lease.items():
        rows = conn.execute(
            update(jobs)
            .where(jobs.c.id.in_(ids), jobs.c.state == "leased", jobs.c.lease_owner == owner,
                   jobs.c.lease_token == token)
            .values(**values)
            .returning(jobs.c.id)
        )
        held.update(int(r[0]) for r in rows)
    return held


def fail(conn: Connection, job: Job, error: str, *, now: float, backoff_base_s: float = 2.0,
         backoff_max_s: float = 600.0) -> str:
    """Record a failed attempt: back to ready after a backoff, or dead when spent.

    Returns the job's new state; raises StaleLease if the lease was lost.
    """
    dead = job.attempts >= job.max_attempts
    values: dict[str, Any] = {
        "last_error": error[:2000], "updated_at": now, "lease_owner": None,
        "lease_token": None, "lease_until": None,
    }
    if dead:
        values.update(state="dead", finished_at=now)
    else:
        values.update(state="ready",
                      run_after=now + backoff_s(job.attempts, backoff_base_s, backoff_max_s))
    res = conn.execute(update(jobs).where(_owned(job)).values(**values))
    if res.rowcount != 1:
        raise StaleLease(f"job {job.id} is no longer leased by us")
    return "dead" if dead else "ready"


def release(conn: Connection, claimed: Iterable[Job], *, now: float) -> int:
    """Give back jobs this worker will not run (shutdown); the attempt is not counted."""
    n = 0
    for job in claimed:
        n += conn.execute(
            update(jobs).where(_owned(job)).values(
                state="ready", lease_owner=None, lease_token=None, lease_until=None,
                attempts=case((jobs.c.attempts > 0, jobs.c.attempts - 1), else_=0), updated_at=now,
            )
        ).rowcount
    return n


def release_owner(conn: Connection, owner: str, *, now: float) -> int:
    """At start: return every lease held by this daemon's previous life to ready.

    The attempt stays counted: a job that crashed the daemon must still reach
    ``max_attempts`` and go dead instead of crashing it forever, so a job whose
    attempts are spent goes dead here (claim only retires *expired* leases).
    """
    spent = jobs.c.attempts >= jobs.c.max_attempts
    return conn.execute(
        update(jobs).where(jobs.c.state == "leased", jobs.c.lease_owner == owner).values(
            state=case((spent, "dead"), else_="ready"),
            last_error=case((spent, func.coalesce(jobs.c.last_error, "the worker died holding the lease")),
                            else_=jobs.c.last_error),
            finished_at=case((spent, now), else_=jobs.c.finished_at),
            lease_owner=None, lease_token=None, lease_until=None, updated_at=now, run_after=now,
        )
    ).rowcount


def prune_done(conn: Connection, *, older_than: float) -> int:
    """Delete done jobs finished before ``older_than``."""
    return conn.execute(
        jobs.delete().where(jobs.c.state == "done", jobs.c.finished_at < older_than)
    ).rowcount


#: The largest job id PostgreSQL's ``jobs.id`` holds (an integer column; SQLite's holds
#: store.ids.MAX_INTEGER).
PG_MAX_ID = 2**31 - 1


def retry_dead(conn: Connection, *, now: float, job_ids: Sequence[int] = (),
               pass_name: str | None = None) -> int:
    """Revive dead jobs (all, by id, or by pass) with fresh attempts.

    A dead job whose (pass, target) already has a live job is left dead: the
    live one does the work.
    """
    cond = [jobs.c.state == "dead"]
    if job_ids:
        # An id past the column's range names no job; PostgreSQL's integer column would refuse
        # the comparison ("integer out of range": the hostile-input suite got a 1003 for it).
        top = MAX_INTEGER if conn.dialect.name == "sqlite" else PG_MAX_ID
        cond.append(jobs.c.id.in_([i for i in job_ids if i <= top]))
    if pass_name:
        cond.append(pass_col == pass_name)
    revived = 0
    for row in conn.execute(select(jobs.c.id, pass_col, jobs.c.target).where(*cond)).all():
        live = conn.execute(
            select(jobs.c.id).where(pass_col == row[1], jobs.c.target == row.target,
                                    jobs.c.state.in_(LIVE))
        ).first()
        if live is None:
            revived += conn.execute(
                update(jobs).where(jobs.c.id == row.id).values(
                    state="ready", attempts=0, run_after=now, updated_at=now, finished_at=None,
                    last_error=None,
                )
            ).rowcount
    return revived


def stats(conn: Connection, *, now: float) -> dict[str, dict[str, Any]]:
    """Per pass: ready (never failed), failed (awaiting retry), leased, dead, oldest ready age."""
    failed_cond = and_(jobs.c.state == "ready", jobs.c.last_error.is_not(None))
    ready_cond = and_(jobs.c.state == "ready", jobs.c.last_error.is_(None))
    rows = conn.execute(
        select(
            pass_col,
            func.sum(case((ready_cond, 1), else_=0)),
            func.sum(case((failed_cond, 1), else_=0)),
            func.sum(case((jobs.c.state == "leased", 1), else_=0)),
            func.sum(case((jobs.c.state == "dead", 1), else_=0)),
            func.min(case((jobs.c.state == "ready", jobs.c.created_at), else_=None)),
        ).where(jobs.c.state != "done").group_by(pass_col)
    )
    out: dict[str, dict[str, Any]] = {}
    for name, ready, failed, leased, dead, oldest in rows:
        out[name] = {
            "ready": int(ready or 0), "failed": int(failed or 0), "leased": int(leased or 0),
            "dead": int(dead or 0),
            "oldest_ready_age_s": round(max(0.0, now - oldest), 3) if oldest is not None else None,
        }
    return out


def next_due(conn: Connection, pass_names: Sequence[str], *, now: float) -> float | None:
    """Epoch seconds when the next job of these passes becomes claimable (None: none).

    One statement of per-pass subqueries, each answered from the claim index
    (pass, state, run_after) without reading the backlog: the runner asks
    after every cycle, and a backlog can be a million jobs long. Compiled once
    per list of passes (store/prepared.py), as :func:`due_passes`.
    """
    if not pass_names:
        return None
    names = tuple(pass_names)
    row = fetch(conn, prepare(conn, ("jobs-next-due", names), lambda: _next_due_query(names)), {})
    candidates = [v for v in (row[0] if row else ()) if v is not None]
    return min(candidates) if candidates else None


def _next_due_query(pass_names: Sequence[str]) -> Select[Any]:
    cols = []
    for name in pass_names:
        cols.append(select(func.min(jobs.c.run_after))
                    .where(pass_col == name, jobs.c.state == "ready").scalar_subquery())
        cols.append(select(func.min(jobs.c.lease_until))
                    .where(pass_col == name, jobs.c.state == "leased").scalar_subquery())
    return select(*cols)


def due_passes(conn: Connection, pass_names: Sequence[str], *, now: float) -> set[str]:
    """Which of these passes have a job claimable now (ready and due, or leased and expired).

    Probes the claim index once per pass instead of counting the backlog. The runner
    asks at every cycle, on the CPUs the write path uses: through ``Connection.execute``
    this probe and :func:`next_due` cost 2.5 - 3.3 ms of CPU a cycle with the daemon's
    seven passes (building the statements and their cache keys), compiled once and run
    on the driver's cursor 0.29 - 0.30 ms.
    """
    if not pass_names:
        return set()
    names = tuple(pass_names)
    row = fetch(conn, prepare(conn, ("jobs-due-passes", names), lambda: _due_query(names)),
                {"now": now})
    return {name for name, due in zip(names, row[0] if row else (), strict=False) if due}


def _due_query(pass_names: Sequence[str]) -> Select[Any]:
    cols: list[Any] = []
    for i, name in enumerate(pass_names):
        ready = select(jobs.c.id).where(pass_col == name, jobs.c.state == "ready",
                                        jobs.c.run_after <= bindparam("now")).limit(1)
        expired = select(jobs.c.id).where(pass_col == name, jobs.c.state == "leased",
                                          jobs.c.lease_until < bindparam("now")).limit(1)
        cols.append(or_(ready.exists(), expired.exists()).label(f"p{i}"))
    return select(*cols)


def pending_for(conn: Connection, target: str) -> list[str]:
    """Passes with an open (ready, failed or leased) job for ``target``."""
    rows = conn.execute(
        select(pass_col).where(jobs.c.target == target, jobs.c.state.in_(LIVE)).distinct()
    )
    return sorted(r[0] for r in rows)


def list_jobs(conn: Connection, *, state: str | None = None, pass_name: str | None = None,
              limit: int = 100) -> list[dict[str, Any]]:
    """Jobs for the operator, newest first."""
    q = select(jobs).order_by(jobs.c.id.desc()).limit(limit)
    if state:
        if state == "failed":
            q = q.where(jobs.c.state == "ready", jobs.c.last_error.is_not(None))
        else:
            q = q.where(jobs.c.state == state)
    if pass_name:
        q = q.where(pass_col == pass_name)
    def ts(epoch: float | None) -> str | None:
        return None if epoch is None else rfc3339_from_epoch(epoch)

    return [
        {
            "id": r.id, "pass": r._mapping["pass"], "target": r.target, "state": r.state,
            "attempts": r.attempts, "max_attempts": r.max_attempts, "run_after": ts(r.run_after),
            "last_error": r.last_error, "lease_owner": r.lease_owner, "lease_until": ts(r.lease_until),
            "created_at": ts(r.created_at), "finished_at": ts(r.finished_at),
        }
        for r in conn.execute(q)
    ]


def defer(conn: Connection, job: Job, *, until: float, now: float, note: str) -> None:
    """Put a claimed job back to wait until ``until`` without counting the attempt
    (its pass cannot do it yet, e.g. the model it needs is off). Raises StaleLease."""
    res = conn.execute(update(jobs).where(_owned(job)).values(
        state="ready", run_after=until, lease_owner=None, lease_token=None, lease_until=None,
        attempts=case((jobs.c.attempts > 0, jobs.c.attempts - 1), else_=0), updated_at=now,
        payload={**job.payload, "deferred": note},
    ))
    if res.rowcount != 1:
        raise StaleLease(f"job {job.id} is no longer leased by us")
