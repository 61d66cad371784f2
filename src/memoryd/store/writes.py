"""Group commit: many callers' writes in one transaction.

Plain writes (no idempotency key) go through store/groupwrite.py, a few
statements for the whole group. Every other unit (a keyed write, a
supersede, a forget, a review decision) runs in its own savepoint, so a
refused unit (tombstone, idempotency conflict) rolls back alone while the
others commit together. Pending access counts from reads
ride along in the same transaction.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from memoryd.errors import MemorydError, StoreUnavailable
from memoryd.store import failures, keyed
from memoryd.store.backends import backend_for
from memoryd.store.groupwrite import identity, is_plain, write_plain
from memoryd.store.memories import NewMemory, WriteContext, lock_name, record_access, write_memory
from memoryd.store.restore import is_restore_unit, write_restored

log = structlog.get_logger(__name__)

UnitOutcome = Any  # a unit's result, or the MemorydError that refused it
UnitOp = Callable[[Connection, datetime, WriteContext], Any]


@dataclass
class WriteUnit:
    """One caller's request: its memories (or another mutation) and who sent it."""

    items: Sequence[NewMemory]
    actor: str
    #: A mutation other than writing ``items`` (supersede, forget, review decision).
    op: UnitOp | None = None
    #: Whether committing ``op`` queues work for the pass runner.
    wakes_runner: bool = False

    def queued_work(self, outcome: Any) -> bool:
        if self.op is not None:
            return self.wakes_runner
        return any(r.get("queued") for r in outcome)


#: PostgreSQL's lock_not_available (lock_timeout) and query_canceled (statement_timeout).
_PG_TIMEOUT_STATES = {"55P03", "57014"}
#: PostgreSQL's deadlock_detected and serialization_failure: the server rolled the whole
#: transaction back, so running it again writes each unit once.
_PG_RETRY_STATES = {"40P01", "40001"}
#: Times a group is run again after such a failure before its writes are refused (1003).
RETRIES = 3


def is_store_condition(exc: BaseException) -> bool:
    """True when a driver error is the store's state (locked or timed out, disk full,
    read-only), which a read answers 1003 with the cause; False for anything else (a
    missing table, a bad statement), which is a crash the server reports as one."""
    orig = getattr(exc, "orig", exc)
    if getattr(orig, "sqlstate", None) in _PG_TIMEOUT_STATES:
        return True
    low = str(orig).lower()
    return any(word in low for word in ("locked", "busy", "timeout", "full", "readonly", "read-only"))


def store_error(exc: BaseException) -> StoreUnavailable:
    """Translate a driver error into 1003 with the cause and the next step."""
    orig = getattr(exc, "orig", exc)
    text = str(orig)
    low = text.lower()
    if getattr(orig, "sqlstate", None) in _PG_RETRY_STATES:
        hint = (f"PostgreSQL broke a deadlock with another writer by failing this one, {RETRIES + 1} "
                "times in a row; retry shortly")
    elif getattr(orig, "sqlstate", None) in _PG_TIMEOUT_STATES or "timeout" in low:
        hint = ("a statement waited past pg_lock_timeout_ms or ran past pg_statement_timeout_ms "
                "(another connection holds a lock); retry shortly")
    elif "locked" in low or "busy" in low:
        hint = "the database is locked by another process past the busy timeout; retry shortly"
    elif "full" in low:
        hint = "the disk is full; free space, then retry"
    elif "readonly" in low or "read-only" in low:
        hint = "the database is read-only; check the data directory's permissions"
    else:
        hint = "the store failed; see the daemon log"
    return StoreUnavailable(f"store unavailable: {hint} ({text}); nothing was written")


def commit_units(bind: Engine | Connection, units: Sequence[WriteUnit], ctx: WriteContext, now: datetime,
                 access: dict[str, int] | None = None) -> list[UnitOutcome]:
    """Write every unit in one transaction; return one outcome per unit.

    ``bind``: an engine (a connection is checked out for the transaction), or a
    connection the caller keeps (the group committer's, on PostgreSQL: no
    checkout, no pool ping per batch).

    Returns only after the commit (or raises nothing: a store failure becomes
    a StoreUnavailable outcome for every unit, since nothing was written).
    On PostgreSQL the plain group's statements go in pipeline mode: the
    identity locks and the group's reads (one query) in one round trip, its
    writes (one statement) and COMMIT in a second.

    The plain group runs in no savepoint of its own (two statements a batch, ~12 % of a
    one-write batch's client CPU on PostgreSQL): a bug its input reaches rolls the whole
    transaction back, and every unit is written again on the per-unit path in a new one.
    """
    for attempt in range(RETRIES + 1):
        last = attempt == RETRIES
        try:
            try:
                return _commit_units(bind, units, ctx, now, access, fast=True, last=last)
            except _FastPathFailed:
                return _commit_units(bind, units, ctx, now, access, fast=False, last=last)
        except _RolledBack as exc:
            # Another transaction deadlocked with this one (writes of several daemons or writer
            # threads touching the same rows in another order) and the server chose this one.
            log.info("store.write_retried", attempt=attempt + 1, error=str(exc.__cause__))
            time.sleep(random.uniform(0.001, 0.02) * (attempt + 1))
    raise AssertionError("unreachable: the last attempt returns")


class _RolledBack(Exception):
    """The server rolled the group's transaction back to break a deadlock: run it again."""


class _FastPathFailed(Exception):
    """The plain group raised something other than a store error: roll its transaction back."""


def _commit_units(bind: Engine | Connection, units: Sequence[WriteUnit], ctx: WriteContext, now: datetime,
                  access: dict[str, int] | None, *, fast: bool, last: bool = True) -> list[UnitOutcome]:
    outcomes: list[UnitOutcome] = [None] * len(units)
    plain = [i for i, u in enumerate(units) if u.op is None and is_plain(u.items)] if fast else []
    try:
        with _transaction(bind) as conn:
            backend = backend_for(conn)
            if plain:
                secret = keyed.secret(conn)  # made through SQLAlchemy on a new store: before the pipeline
                with backend.pipeline(conn):
                    backend.lock_identities(conn, _identities(units))
                    done = _plain_group(conn, [units[i] for i in plain], now, ctx, secret)
                    if len(plain) == len(units) and not access:
                        backend.commit_in_pipeline(conn)  # nothing else to write: commit now
                for i, outcome in zip(plain, done, strict=True):
                    outcomes[i] = outcome
            else:
                backend.lock_identities(conn, _identities(units))
            taken = set(plain)
            for i, unit in enumerate(units):
                if i not in taken:
                    outcomes[i] = _commit_one(conn, unit, now, ctx)
            if access:
                record_access(conn, access, now)
    except DBAPIError as exc:
        if not last and getattr(exc.orig, "sqlstate", None) in _PG_RETRY_STATES:
            raise _RolledBack from exc
        err = store_error(exc)
        log.error("store.write_failed", error=str(exc.orig), units=len(units))
        return [err for _ in units]
    return outcomes


@contextmanager
def _transaction(bind: Engine | Connection) -> Iterator[Connection]:
    """A transaction on ``bind``: a checked-out connection's, or the caller's connection's."""
    if isinstance(bind, Engine):
        with bind.begin() as conn:
            yield conn
    else:
        with bind.begin():
            yield bind


def _identities(units: Sequence[WriteUnit]) -> Iterator[str]:
    """What the units' writes are checked against: each item's content under its owner, and
    its idempotency key. A generator: a backend that needs no locks (SQLite) never hashes."""
    for unit in units:
        for item in unit.items:
            yield lock_name(*identity(item))
            if item.idempotency_key is not None:
                yield f"key\0{item.scope}\0{item.owner}\0{item.idempotency_key}"


def _plain_group(conn: Connection, units: Sequence[WriteUnit], now: datetime,
                 ctx: WriteContext, secret: bytes) -> list[UnitOutcome]:
    """The group fast path. Raises _FastPathFailed when it raised something other than a
    store error (a bug one unit's input reached): the transaction is rolled back and each
    unit goes on the per-write path, where only the unit at fault is refused."""
    try:
        return write_plain(conn, [(u.items, u.actor) for u in units], now, ctx, secret)
    except DBAPIError:
        raise
    except Exception as exc:
        log.error("store.group_write_failed", units=len(units), error=failures.describe(exc))
        raise _FastPathFailed from exc


def _commit_one(conn: Connection, unit: WriteUnit, now: datetime, ctx: WriteContext) -> UnitOutcome:
    """A unit on the per-write path, in its own savepoint: a refusal, or a bug its
    input reached, rolls back only this unit and answers only its caller."""
    unit_ctx = WriteContext(actor=unit.actor, passes=ctx.passes, max_attempts=ctx.max_attempts,
                            idempotency_ttl_s=ctx.idempotency_ttl_s)
    try:
        with backend_for(conn).savepoint(conn):
            if unit.op is not None:
                return unit.op(conn, now, unit_ctx)
            if is_restore_unit(unit.items):  # an import's batch, in a few statements
                return write_restored(conn, unit.items, now, unit_ctx)
            return [write_memory(conn, item, now, unit_ctx) for item in unit.items]
    except MemorydError as exc:
        return exc
    except DBAPIError:
        raise  # the store itself failed: the whole transaction is answered 1003
    except Exception as exc:
        log.error("store.unit_failed", actor=unit.actor, error=failures.describe(exc))
        return StoreUnavailable(f"write failed ({failures.error_class(exc)}); nothing was written; "
                                "this is a memoryd bug, see the daemon log")
