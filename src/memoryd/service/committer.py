"""The write queue and its group committer.

Handlers put units on a bounded queue and await their futures; one task
drains the queue into batches and commits each batch in one transaction on a
dedicated thread. While a commit runs, new writes gather for the next one, so
throughput rises with concurrency. A full queue answers 1004 at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import Engine

from memoryd.errors import MemorydError, Overloaded, StoreUnavailable
from memoryd.store.memories import WriteContext
from memoryd.store.writegate import mark_foreground
from memoryd.store.writes import WriteUnit, commit_units

log = structlog.get_logger(__name__)


class GroupCommitter:
    """Batches concurrent writes into shared transactions."""

    def __init__(self, engine: Engine, ctx: WriteContext, *, max_queue: int, max_batch: int,
                 clock: Callable[[], datetime], on_commit: Callable[[], None],
                 access_flush_s: float = 1.0):
        self.engine = engine
        self.ctx = ctx
        self.max_batch = max_batch
        self.clock = clock
        self.on_commit = on_commit
        #: How long read counts wait for a write to ride along with before committing alone.
        self.access_flush_s = access_flush_s
        self._queue: asyncio.Queue[tuple[WriteUnit, asyncio.Future[Any]]] = asyncio.Queue(max_queue)
        # Clients wait on this thread: it goes first at the write gate.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="memoryd-writer",
                                            initializer=mark_foreground)
        self._task: asyncio.Task[None] | None = None
        self._access: dict[str, int] = {}
        self._access_event = asyncio.Event()
        self.batches = 0
        self.units = 0
        self._closing = False
        self._idle = asyncio.Event()
        self._idle.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group-commit")

    def submit(self, unit: WriteUnit) -> asyncio.Future[Any]:
        """Queue a unit; its future resolves after the commit. Raises Overloaded when full."""
        if self._closing:
            raise Overloaded("memoryd is shutting down; retry when it is back. Nothing was written.")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait((unit, fut))
        except asyncio.QueueFull:
            raise Overloaded(
                f"the write queue is full ({self._queue.maxsize} writes waiting); retry later. "
                "Nothing was written."
            ) from None
        return fut

    def note_access(self, ids: list[str]) -> None:
        """Count reads of these memories; flushed with the next commit, never on the reader's path."""
        for mid in ids:
            self._access[mid] = self._access.get(mid, 0) + 1
        if ids:
            self._access_event.set()

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    async def _next_batch(self) -> list[tuple[WriteUnit, asyncio.Future[Any]]]:
        if not self._access:
            first = await self._take(wake=self._access_event)
            if first is not None:
                return self._fill([first])
        # Read counts are pending and no write is: let them gather, and ride along with the
        # next write if one comes, instead of a transaction (and a sync) per search.
        first = await self._take(timeout=self.access_flush_s)
        return [] if first is None else self._fill([first])  # []: flush the read counts alone

    async def _take(self, *, wake: asyncio.Event | None = None, timeout: float | None = None
                    ) -> tuple[WriteUnit, asyncio.Future[Any]] | None:
        """The next queued unit, or None if ``wake`` fires or ``timeout`` passes first."""
        get = asyncio.ensure_future(self._queue.get())
        woken = asyncio.ensure_future(wake.wait()) if wake is not None else None
        waits: set[asyncio.Future[Any]] = {get} if woken is None else {get, woken}
        done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if woken is not None:
            woken.cancel()
        if get in done:
            return get.result()
        get.cancel()
        try:
            return await get  # it completed while being cancelled: keep its unit
        except asyncio.CancelledError:
            return None

    def _fill(self, batch: list[tuple[WriteUnit, asyncio.Future[Any]]]
              ) -> list[tuple[WriteUnit, asyncio.Future[Any]]]:
        """Add every queued unit to ``batch``, up to max_batch."""
        while len(batch) < self.max_batch and not self._queue.empty():
            batch.append(self._queue.get_nowait())
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            self._idle.clear()
            self._access_event.clear()
            access, self._access = self._access, {}
            units = [u for u, _ in batch]
            try:
                outcomes = await loop.run_in_executor(
                    self._executor, commit_units, self.engine, units, self.ctx, self.clock(), access
                )
            except Exception as exc:  # a bug, not a store condition: fail the batch loudly
                log.exception("commit.crashed", units=len(units))
                err = MemorydError(f"write failed: {exc}; see the daemon log; nothing was written")
                outcomes = [err for _ in units]
            if access and units and all(isinstance(o, StoreUnavailable) for o in outcomes):
                # The whole transaction failed: keep the read counts for the next one.
                for mid, n in access.items():
                    self._access[mid] = self._access.get(mid, 0) + n
            self.batches += 1 if units else 0
            self.units += len(units)
            enqueued = False
            for (unit, fut), outcome in zip(batch, outcomes, strict=True):
                if fut.done():
                    continue
                if isinstance(outcome, MemorydError):
                    fut.set_exception(outcome)
                else:
                    fut.set_result(outcome)
                    enqueued = enqueued or unit.queued_work(outcome)
            if enqueued:
                self.on_commit()
            self._idle.set()

    async def drain(self, timeout_s: float = 10.0) -> None:
        """Refuse new writes, commit everything queued, then stop (shutdown)."""
        self._closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (not self._queue.empty() or not self._idle.is_set()) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        if self._task is not None:
            self._task.cancel()
        if self._access:
            # Read counts still gathering: commit them before the store closes.
            access, self._access = self._access, {}
            await loop.run_in_executor(self._executor, commit_units, self.engine, [], self.ctx,
                                       self.clock(), access)
        self._executor.shutdown(wait=True)
