"""The write queue and its group committer.

Handlers put units on a bounded queue. One writer thread takes everything
queued (up to ``max_batch``), commits it in one transaction, hands the
outcomes back to the event loop in one callback, and takes the next batch at
once: it never waits for the loop to answer the last batch's clients. While a
commit runs, new writes gather for the next one, so throughput rises with
concurrency. A full queue answers 1004 at once.

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
from sqlalchemy import Engine

from memoryd.errors import MemorydError, Overloaded, StoreUnavailable
from memoryd.store.memories import WriteContext
from memoryd.store.writegate import mark_foreground
from memoryd.store.writes import UnitOutcome, WriteUnit, commit_units

log = structlog.get_logger(__name__)

#: Called on the event loop with a unit's outcome: its result, or the MemorydError that refused it.
Done = Callable[[UnitOutcome], None]
Pending = tuple[WriteUnit, Done]


class GroupCommitter:
    """Batches concurrent writes into shared transactions, on a writer thread of its own."""

    def __init__(self, engine: Engine, ctx: WriteContext, *, max_queue: int, max_batch: int,
                 clock: Callable[[], datetime], on_commit: Callable[[], None],
                 access_flush_s: float = 1.0):
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
        #: The batch the writer has taken and not yet handed back (writer thread only).
        self._in_hand: list[Pending] = []
        self._thread: threading.Thread | None = None
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

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="memoryd-writer", daemon=True)
        self._thread.start()

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
            self._cond.notify()
        self._unresolved += 1

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

    @property
    def depth(self) -> int:
        """Units waiting for a commit (not counting the batch being committed)."""
        return len(self._pending)

    def _broken_error(self) -> StoreUnavailable:
        return StoreUnavailable(f"the daemon's writer thread stopped ({self.broken}); nothing was "
                                "written; restart memoryd and report the log's commit.writer_crashed")

    # -- the writer thread ----------------------------------------------------------
    def _run(self) -> None:
        mark_foreground()  # clients wait on this thread: it goes first at the write gate
        try:
            self._loop_batches()
        except BaseException as exc:  # a bug: never leave callers waiting on a dead thread
            log.exception("commit.writer_crashed")
            with self._cond:
                self.broken = f"{type(exc).__name__}: {exc}"
                stranded = self._in_hand + list(self._pending)
                self._pending.clear()
            if stranded:
                self._hand_back(stranded, [self._broken_error() for _ in stranded])

    def _loop_batches(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    if self._access_due is None:
                        self._cond.wait()
                        continue
                    wait = self._access_due - time.monotonic()
                    if wait <= 0:
                        break  # the read counts gathered long enough: commit them alone
                    self._cond.wait(wait)
                batch = [self._pending.popleft() for _ in range(min(len(self._pending), self.max_batch))]
                self._in_hand = batch
                last = self._stop and not self._pending
                access, self._access, self._access_due = self._access, {}, None
            if batch or access:
                outcomes = self._commit([unit for unit, _ in batch], access)
                handed = not batch or self._hand_back(batch, outcomes)
                self._in_hand = []
                if not handed:
                    return
            if last:
                return

    def _commit(self, units: list[WriteUnit], access: dict[str, int]) -> list[UnitOutcome]:
        try:
            outcomes = commit_units(self.engine, units, self.ctx, self.clock(), access)
        except Exception as exc:  # a bug, not a store condition: fail the batch loudly
            log.exception("commit.crashed", units=len(units))
            err = MemorydError(f"write failed: {exc}; see the daemon log; nothing was written")
            outcomes = [err for _ in units]
        # commit_units answers a failed transaction with one shared error for every unit.
        failed_whole = bool(outcomes) and isinstance(outcomes[0], StoreUnavailable) and all(
            o is outcomes[0] for o in outcomes)
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
            self._cond.notify()
        if self._thread is not None:
            await loop.run_in_executor(None, self._thread.join, max(0.0, deadline - loop.time()) + 5.0)
