"""The write queue and its group committer.

Handlers put units on a bounded queue. A writer thread takes everything
queued (up to ``max_batch``), commits it in one transaction, hands the
outcomes back to the event loop in one callback, and takes the next batch at
once: it never waits for the loop to answer the last batch's clients. While a
commit runs, new writes gather for the next one, so throughput rises with
concurrency. A full queue answers 1004 at once. SQLite has one writer thread;
PostgreSQL ``pg_writers``, each with its own connection, so batches overlap.

A unit's outcome reaches its caller either through a future (``submit``) or,
on the socket's write fast path, through a plain callback run on the loop
(``submit_callback``): no task, no future, one loop turn from commit to answer.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import Connection, Engine

from memoryd.errors import MemorydError, Overloaded, StoreUnavailable
from memoryd.store.backends import backend_for
from memoryd.store.engine import is_sqlite
from memoryd.store.memories import WriteContext
from memoryd.store.writegate import mark_foreground
from memoryd.store.writes import UnitOutcome, WriteUnit, commit_units

log = structlog.get_logger(__name__)

#: Called on the event loop with a unit's outcome: its result, or the MemorydError that refused it.
Done = Callable[[UnitOutcome], None]
Pending = tuple[WriteUnit, Done]


class _Writer:
    """One writer thread's own state: the batch it holds, and its connection."""

    def __init__(self, index: int):
        self.index = index
        #: The batch this writer has taken and not yet handed back.
        self.in_hand: list[Pending] = []
        #: The connection it commits on (see GroupCommitter._bind).
        self.conn: Connection | None = None
        self.thread: threading.Thread | None = None


class GroupCommitter:
    """Batches concurrent writes into shared transactions, on writer threads of its own.

    SQLite has one writer thread (the database has one writer). On PostgreSQL
    ``writers`` threads each take what is queued and commit it on a connection
    of their own, so one batch's round trips and commit flush overlap the
    next batch's instead of queueing behind them; concurrent writes of one
    text or one idempotency key still serialise on their identity locks
    (Backend.lock_identities), and each transaction appends to an audit lane
    no other one holds (store/audit.py).
    """

    def __init__(self, engine: Engine, ctx: WriteContext, *, max_queue: int, max_batch: int,
                 clock: Callable[[], datetime], on_commit: Callable[[], None],
                 access_flush_s: float = 1.0, writers: int = 1):
        self.engine = engine
        self.ctx = ctx
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.clock = clock
        self.on_commit = on_commit
        #: How long read counts wait for a write to ride along with before committing alone.
        self.access_flush_s = access_flush_s
        # Guarded by _cond: the queue, the read counts and the stop flag.
        self._cond = threading.Condition()
        self._pending: deque[Pending] = deque()
        self._access: dict[str, int] = {}
        self._access_due: float | None = None  # when gathered read counts commit alone (monotonic)
        self._stop = False
        #: Writers waiting for work, and whether one was woken and has not yet taken the queue:
        #: a write wakes a writer only when none is on its way already (that one takes every
        #: write queued when it gets there). Waking one per write woke writers that found one
        #: write each, or none: on PostgreSQL's three writers, batches of one or two writes,
        #: each paying a transaction's fixed CPU, and three threads fighting for the GIL.
        self._idle = 0
        self._waking = False
        self._writers = [_Writer(i) for i in range(1 if is_sqlite(engine) else max(1, writers))]
        #: Sends other daemons the wake-up after a commit that enqueued jobs (PostgreSQL, once
        #: the daemon's listener runs); None: each transaction sends its own NOTIFY.
        self._notify: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Units submitted and not yet answered (event-loop side only).
        self._unresolved = 0
        self._closing = False
        #: Why the writer thread stopped, if it died of a bug: writes then fail at once (1003).
        self.broken: str | None = None
        #: The store error of the last write transaction, when it failed as a whole (disk full,
        #: read-only, locked); cleared by the next one that commits. Status is degraded meanwhile.
        self.store_error: str | None = None
        self.batches = 0
        self.units = 0
        #: Wall milliseconds of the most recent commits (any writer thread), for the heartbeat.
        self.commit_ms: deque[float] = deque(maxlen=2048)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._notify = backend_for(self.engine).deferred_notifier(self.engine)
        for w in self._writers:
            name = "memoryd-writer" if w.index == 0 else f"memoryd-writer-{w.index}"
            w.thread = threading.Thread(target=self._run, args=(w,), name=name, daemon=True)
            w.thread.start()

    def submit(self, unit: WriteUnit) -> asyncio.Future[Any]:
        """Queue a unit; its future resolves after the commit. Raises Overloaded when full."""
        assert self._loop is not None, "start() the committer first"
        fut: asyncio.Future[Any] = self._loop.create_future()

        def settle(outcome: UnitOutcome) -> None:
            if fut.done():
                return
            if isinstance(outcome, MemorydError):
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)

        self.submit_callback(unit, settle)
        return fut

    def submit_callback(self, unit: WriteUnit, done: Done) -> None:
        """Queue a unit; ``done(outcome)`` runs on the loop after the commit. Raises Overloaded."""
        if self._closing:
            raise Overloaded("memoryd is shutting down; retry when it is back. Nothing was written.")
        with self._cond:
            # Checked under the lock the crash handler clears the queue under: a unit
            # appended after that clear would wait for a writer that is gone.
            if self.broken is not None:
                raise self._broken_error()
            if len(self._pending) >= self.max_queue:
                raise Overloaded(
                    f"the write queue is full ({self.max_queue} writes waiting); retry later. "
                    "Nothing was written."
                )
            self._pending.append((unit, done))
            self._wake_one()
        self._unresolved += 1

    def _wake_one(self) -> None:
        """Wake a waiting writer unless one is on its way (call with ``_cond`` held)."""
        if self._idle and not self._waking:
            self._waking = True
            self._cond.notify()

    def note_access(self, ids: list[str]) -> None:
        """Count reads of these memories; flushed with the next commit, never on the reader's path."""
        if not ids:
            return
        with self._cond:
            for mid in ids:
                self._access[mid] = self._access.get(mid, 0) + 1
            if self._access_due is None:
                self._access_due = time.monotonic() + self.access_flush_s
                self._cond.notify()

    def write_figures(self, since_units: int, since_s: float, now_s: float) -> dict[str, Any]:
        """Writes/s since (``since_units``, ``since_s``), the p50/p99 of recent commits, the queue."""
        recent = sorted(self.commit_ms)
        self.commit_ms.clear()

        def pct(p: float) -> float | None:
            return round(recent[min(len(recent) - 1, int(p * len(recent)))], 2) if recent else None

        elapsed = max(1e-9, now_s - since_s)
        return {"per_s": round((self.units - since_units) / elapsed, 1), "commits": len(recent),
                "commit_p50_ms": pct(0.50), "commit_p99_ms": pct(0.99), "queue": self.depth}

    @property
    def depth(self) -> int:
        """Units waiting for a commit (not counting the batch being committed)."""
        return len(self._pending)

    def _broken_error(self) -> StoreUnavailable:
        return StoreUnavailable(f"the daemon's writer thread stopped ({self.broken}); nothing was "
                                "written; restart memoryd and report the log's commit.writer_crashed")

    # -- the writer thread ----------------------------------------------------------
    def _run(self, w: _Writer) -> None:
        mark_foreground()  # clients wait on this thread: it goes first at the write gate
        try:
            self._loop_batches(w)
            self._drop_connection(w)
        except BaseException as exc:  # a bug: never leave callers waiting on a dead thread
            log.exception("commit.writer_crashed", writer=w.index)
            with self._cond:
                self.broken = f"{type(exc).__name__}: {exc}"
                stranded = w.in_hand + list(self._pending)
                self._pending.clear()
            if stranded:
                self._hand_back(stranded, [self._broken_error() for _ in stranded])

    def _wait_idle(self, timeout: float | None) -> None:
        """Wait for work as an idle writer, one that a write may wake (call with ``_cond`` held)."""
        self._idle += 1
        try:
            self._cond.wait(timeout)
        finally:
            self._idle -= 1

    def _loop_batches(self, w: _Writer) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    if self._access_due is None:
                        self._wait_idle(None)
                        continue
                    wait = self._access_due - time.monotonic()
                    if wait <= 0:
                        break  # the read counts gathered long enough: commit them alone
                    self._wait_idle(wait)
                # Whoever was woken finds the queue taken (or takes it): the next write wakes again.
                self._waking = False
                batch = [self._pending.popleft() for _ in range(min(len(self._pending), self.max_batch))]
                if self._pending:
                    self._wake_one()  # more than a batch queued: another writer takes the rest
                w.in_hand = batch
                last = self._stop and not self._pending
                access, self._access, self._access_due = self._access, {}, None
            if batch or access:
                outcomes = self._commit(w, [unit for unit, _ in batch], access)
                handed = not batch or self._hand_back(batch, outcomes)
                w.in_hand = []
                if not handed:
                    return
            if last:
                return

    def _bind(self, w: _Writer) -> Engine | Connection:
        """What a batch commits through: a connection this writer keeps, reopened after a
        failed transaction. On PostgreSQL a pool checkout pings the server first (one more
        round trip per batch); on SQLite a checkout and its return cost ~12 µs of CPU a
        batch. SQLite's write gate is taken at each BEGIN and opened at each COMMIT or
        ROLLBACK (store/engine.py), so a kept connection holds nothing between batches."""
        if w.conn is None or w.conn.closed or w.conn.invalidated:
            w.conn = self.engine.connect()
            if self._notify is not None:
                # Its commits leave the wake-up to the notifier (store/postgres/notify.py).
                backend_for(self.engine).defer_notify(w.conn)
        return w.conn

    def _drop_connection(self, w: _Writer) -> None:
        if w.conn is not None:
            try:
                # The pool hands this connection to others next: their transactions notify.
                if not w.conn.invalidated and not w.conn.closed:
                    backend_for(self.engine).defer_notify(w.conn, defer=False)
                w.conn.close()
            except Exception as exc:  # a dead connection may fail to close: it is dropped anyway
                log.warning("commit.connection_close_failed", error=str(exc))
            w.conn = None

    def _commit(self, w: _Writer, units: list[WriteUnit], access: dict[str, int]) -> list[UnitOutcome]:
        started = time.perf_counter()
        try:
            outcomes = commit_units(self._bind(w), units, self.ctx, self.clock(), access)
            self.commit_ms.append((time.perf_counter() - started) * 1000.0)
        except Exception as exc:  # a bug, not a store condition: fail the batch loudly
            log.exception("commit.crashed", units=len(units))
            err = MemorydError(f"write failed: {exc}; see the daemon log; nothing was written")
            outcomes = [err for _ in units]
        # commit_units answers a failed transaction with one shared error for every unit.
        failed_whole = bool(outcomes) and isinstance(outcomes[0], StoreUnavailable) and all(
            o is outcomes[0] for o in outcomes)
        if w.conn is not None and backend_for(self.engine).take_notify(w.conn) and not failed_whole:
            assert self._notify is not None
            self._notify()  # committed jobs: wake the other daemons now
        if failed_whole or not outcomes:
            self._drop_connection(w)  # a server restart or a broken session: the next batch reconnects
        if outcomes:
            self.store_error = outcomes[0].message if failed_whole else None
        if access and units and all(isinstance(o, StoreUnavailable) for o in outcomes):
            # The whole transaction failed: the read counts wait for the next one.
            with self._cond:
                for mid, n in access.items():
                    self._access[mid] = self._access.get(mid, 0) + n
                if self._access_due is None:
                    self._access_due = time.monotonic() + self.access_flush_s
        return outcomes

    def _hand_back(self, batch: list[Pending], outcomes: list[UnitOutcome]) -> bool:
        """Post the outcomes to the loop; False when the loop is gone (nobody waits any more)."""
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._resolve, batch, outcomes)
        except RuntimeError:
            log.warning("commit.loop_closed", units=len(batch))
            return False
        return True

    # -- back on the event loop -------------------------------------------------------
    def _resolve(self, batch: list[Pending], outcomes: list[UnitOutcome]) -> None:
        self.batches += 1
        self.units += len(batch)
        self._unresolved -= len(batch)
        enqueued = False
        for (unit, done), outcome in zip(batch, outcomes, strict=True):
            if not isinstance(outcome, MemorydError) and not enqueued:
                try:
                    enqueued = unit.queued_work(outcome)
                except Exception:  # a bug in one unit's bookkeeping: wake the runner to be safe
                    log.exception("commit.queued_work_failed")
                    enqueued = True
            try:
                done(outcome)
            except Exception:  # one caller's answer failing must not lose the others'
                log.exception("commit.answer_failed")
        if enqueued:
            self.on_commit()

    async def drain(self, timeout_s: float = 10.0) -> None:
        """Refuse new writes, commit everything queued and the read counts, then stop (shutdown)."""
        self._closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._unresolved and loop.time() < deadline:
            await asyncio.sleep(0.01)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for w in self._writers:
            if w.thread is not None:
                await loop.run_in_executor(None, w.thread.join, max(0.0, deadline - loop.time()) + 5.0)
