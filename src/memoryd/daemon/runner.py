"""The pass runner: a thread that drains the queues when woken, and sleeps otherwise.

The loop is APScheduler's: wait on an event with a timeout (the time until
the next job is due), clear it, run cycles until nothing is left to do. A
write wakes it by setting the event; an idle daemon waits and uses no CPU.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy.exc import OperationalError

from memoryd.clock import rfc3339_from_epoch
from memoryd.daemon.governor import BUSY, IDLE, Governor
from memoryd.daemon.selection import plan_cycle
from memoryd.errors import StaleLease
from memoryd.passes.base import Pass, PassContext, PassResult
from memoryd.queue import jobs as jobq
from memoryd.queue.jobs import Job
from memoryd.queue.lease import LeaseHeartbeat
from memoryd.store import failures
from memoryd.store.engine import read_only

log = structlog.get_logger(__name__)

MAX_SLEEP_S = 300.0
#: A pass whose last this-many batches failed (and did nothing else) shows ``failing``.
FAILING_AFTER = 3


@dataclass
class PassStats:
    last_run_at: float | None = None
    last_error: str | None = None
    processed_total: int = 0
    errors_total: int = 0
    batches: int = 0
    batch_ms_total: float = 0.0
    last_batch_size: int = 0
    #: Batches in a row whose jobs failed with a permanent error (reset by a batch that did work).
    consecutive_failures: int = 0
    last_error_class: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "last_run_at": None if self.last_run_at is None else rfc3339_from_epoch(self.last_run_at),
            "last_error": self.last_error,
            "processed_total": self.processed_total,
            "errors_total": self.errors_total,
            "mean_batch_ms": round(self.batch_ms_total / self.batches, 2) if self.batches else None,
            "last_batch_size": self.last_batch_size,
            "consecutive_failures": self.consecutive_failures,
            "error_class": self.last_error_class,
        }


class PassRunner:
    """Claims and runs batches for every runnable pass, round-robin."""

    def __init__(self, passes: dict[str, Pass], ctx: PassContext, owner: str,
                 governor: Governor | None = None):
        self.passes = passes
        self.governor = governor
        #: The most recent non-empty plan, as (pass, batch size) pairs, with the governor state.
        self.last_plan: tuple[str, list[tuple[str, int]]] = (IDLE, [])
        self.ctx = ctx
        self.owner = owner
        self.stats = {name: PassStats() for name in passes}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._cycle = 0
        self._current: list[Job] = []
        #: Whether every batch of the last cycle was smaller than its limit.
        self._short = False
        #: pass -> epoch seconds until which it is not run (it raised PassUnavailable).
        self._cooldown: dict[str, float] = {}

    # -- control ----------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="memoryd-runner", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        """Run now (thread-safe; called after a commit that enqueued work)."""
        self._wake.set()

    def stop(self, grace_s: float) -> None:
        """Stop claiming; let the running batch finish for ``grace_s``, then release its leases."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(grace_s)
            if self._thread.is_alive():
                claimed = list(self._current)
                if claimed:
                    with self.ctx.engine.begin() as conn:
                        n = jobq.release(conn, claimed, now=self.ctx.now())
                    log.warning("runner.released_on_shutdown", jobs=n)

    # -- loop ---------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping.is_set():
            woken = self._wake.wait(timeout=self._sleep_s())
            if woken:
                # Woken by a commit: let the rest of a burst of writes land first, so a
                # stream of writes costs a cycle per gather window, not one per write.
                self._stopping.wait(self.ctx.config.runner_gather_s)
            self._wake.clear()
            while not self._stopping.is_set():
                try:
                    progressed = self.cycle()
                except Exception as exc:  # keep the daemon alive; the error is in status
                    log.error("runner.cycle_failed", error=repr(exc))
                    progressed = False
                    self._stopping.wait(1.0)
                if not progressed:
                    break
                if self._short:
                    # Every batch came up short: the work is arriving a little at a time
                    # (a stream of writes). Let it gather into fuller batches instead of
                    # taking the write lock for every job as it lands.
                    self._stopping.wait(self.ctx.config.runner_gather_s)
                if self.state() == BUSY:
                    # Leave the CPU to the user between small batches.
                    self._stopping.wait(self.ctx.config.busy_pause_s)

    def runnable(self) -> dict[str, bool]:
        now = self.ctx.now()
        return {
            name: p.unavailable_reason(self.ctx) is None
            and self._cooldown.get(name, 0.0) <= now
            for name, p in self.passes.items()
        }

    def _backlog(self, now: float, runnable: dict[str, bool]) -> dict[str, int]:
        """1 for each runnable pass with a claimable job (the plan needs no more than that)."""
        names = [n for n, ok in runnable.items() if ok]
        with read_only(self.ctx.engine) as conn:
            return dict.fromkeys(jobq.due_passes(conn, names, now=now), 1)

    def state(self) -> str:
        return self.governor.current.state if self.governor is not None else IDLE

    def cycle(self) -> bool:
        """Run one batch of each planned pass; True if any job was claimed."""
        now = self.ctx.now()
        state = self.state()
        runnable = self.runnable()
        plan = plan_cycle(
            list(self.passes), self._backlog(now, runnable), runnable, self._cycle, state,
            model_backed={n: p.model_backed for n, p in self.passes.items()},
            batch_sizes={n: p.batch_limit(self.ctx) for n, p in self.passes.items()},
            busy_batch=self.ctx.config.busy_batch_size,
        )
        self._cycle += 1
        if plan:
            self.last_plan = (state, [(item.name, item.batch) for item in plan])
        self.ctx.threads = 1 if state == BUSY else self.ctx.config.model_threads
        progressed = False
        self._short = True
        for item in plan:
            if self._stopping.is_set():
                break
            progressed |= self._run_one(self.passes[item.name], item.batch)
        return progressed

    def _run_one(self, p: Pass, limit: int) -> bool:
        now = self.ctx.now()
        try:
            with self.ctx.engine.begin() as conn:
                batch = jobq.claim(conn, p.name, owner=self.owner, now=now,
                                   lease_s=self.ctx.config.job_lease_s, limit=limit)
        except OperationalError as exc:  # locked past the busy timeout: try again next cycle
            log.warning("runner.claim_busy", pass_=p.name, error=str(exc.orig))
            return False
        if not batch:
            return False
        if len(batch) >= limit:
            self._short = False
        self._current = batch
        stats = self.stats[p.name]
        stats.last_batch_size = len(batch)
        started = time.perf_counter()
        try:
            with LeaseHeartbeat(self.ctx.engine, batch, self.ctx.config.job_lease_s, self.ctx.now):
                result = self._run_isolated(p, batch, stats)
        finally:
            self._current = []
            elapsed_ms = (time.perf_counter() - started) * 1000
            stats.batches += 1
            stats.batch_ms_total += elapsed_ms
            stats.last_run_at = time.time()
        if result is None:
            return False
        stats.processed_total += result.processed + result.skipped
        log.info("pass.done", pass_=p.name, n=len(batch), processed=result.processed,
                 skipped=result.skipped, stale=result.stale, failed=len(result.failed),
                 ms=round(elapsed_ms, 1))
        return True

    def _run_isolated(self, p: Pass, batch: list[Job], stats: PassStats) -> PassResult | None:
        """Run a batch so that one bad job never fails its neighbours.

        A permanent error raised by the whole batch makes the runner run its
        jobs again one at a time (passes are idempotent, and a job already
        completed is skipped as stale), so only the job at fault is charged.
        Returns None when the pass could not run (unavailable or transient):
        the unfinished jobs were given back uncounted and the pass rests.
        """
        try:
            result = p.run(batch, self.ctx)
        except Exception as exc:
            kind = failures.kind_of(exc)
            if kind != "permanent":
                self._give_back(p, batch, exc, kind)
                return None
            if len(batch) == 1:
                result = PassResult(failed=[(batch[0], exc)])
            else:
                log.warning("pass.batch_failed_isolating", pass_=p.name, n=len(batch),
                            error=failures.describe(exc))
                result = PassResult()
                for job in batch:
                    if self._stopping.is_set():
                        break
                    single = self._run_isolated(p, [job], stats)
                    if single is None:  # the store or a model went away meanwhile
                        return None
                    result.processed += single.processed
                    result.skipped += single.skipped
                    result.stale += single.stale
                    result.failed += single.failed  # already charged; kept for the log line
                return result
        self._charge(p, result.failed, stats)
        if result.processed or result.skipped:
            stats.consecutive_failures = 0
        return result

    def _give_back(self, p: Pass, batch: list[Job], exc: BaseException, kind: str) -> None:
        """Not the jobs' fault (a model is off, the store was locked past its
        timeout, the disk is full): release them with the attempt uncounted."""
        stats = self.stats[p.name]
        # An unavailable pass's reason is ours and is shown as is ("the embedder is loading").
        stats.last_error = str(exc) if kind == "unavailable" else failures.describe(exc)
        self._retry_store(lambda: self._release(batch))
        # The released jobs are due at once: rest the pass, or the loop would
        # claim and release them without pause.
        self._cooldown[p.name] = self.ctx.now() + self.ctx.config.backoff_base_s
        log.warning("pass.unavailable" if kind == "unavailable" else "pass.transient",
                    pass_=p.name, reason=stats.last_error)

    def _charge(self, p: Pass, failed: list[tuple[Job, BaseException]], stats: PassStats) -> None:
        """Count an attempt against each job that failed on its own (dead when spent)."""
        if not failed:
            return
        stats.errors_total += len(failed)
        stats.consecutive_failures += 1
        last = failed[-1][1]
        stats.last_error = failures.describe(last)
        stats.last_error_class = failures.error_class(last)
        for job, exc in failed:
            log.error("pass.job_failed", pass_=p.name, job=job.id, attempt=job.attempts,
                      error=failures.describe(exc),
                      trace="".join(traceback.format_tb(exc.__traceback__, limit=5)))
        self._retry_store(lambda: self._fail_jobs(failed))

    def _release(self, batch: list[Job]) -> None:
        with self.ctx.engine.begin() as conn:
            jobq.release(conn, batch, now=self.ctx.now())

    def _retry_store(self, action: Callable[[], None], tries: int = 5) -> None:
        """Run a bookkeeping write, retrying while the store is locked; if it never
        gets through, the jobs' leases expire and they are claimed again."""
        for attempt in range(tries):
            try:
                action()
                return
            except OperationalError as exc:
                log.warning("runner.store_busy", attempt=attempt + 1, error=str(exc.orig))
                if self._stopping.wait(1.0 + attempt):
                    return  # shutting down: the leases expire and the jobs are claimed again

    def _fail_jobs(self, failed: list[tuple[Job, BaseException]]) -> None:
        cfg = self.ctx.config
        with self.ctx.engine.begin() as conn:
            for job, exc in failed:
                try:
                    jobq.fail(conn, job, failures.describe(exc), now=self.ctx.now(),
                              backoff_base_s=cfg.backoff_base_s, backoff_max_s=cfg.backoff_max_s)
                except StaleLease:
                    continue

    def _sleep_s(self) -> float:
        runnable = [n for n, ok in self.runnable().items() if ok]
        try:
            with read_only(self.ctx.engine) as conn:
                due = jobq.next_due(conn, runnable, now=self.ctx.now())
        except Exception as exc:
            log.warning("runner.next_due_failed", error=repr(exc))
            return 5.0
        now = self.ctx.now()
        rested = [until for until in self._cooldown.values() if until > now]
        if rested:
            due = min(rested) if due is None else min(due, min(rested))
        if due is None:
            return MAX_SLEEP_S
        return max(0.0, min(MAX_SLEEP_S, due - now + 0.01))

    def status(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name, p in self.passes.items():
            entry = self.stats[name].as_dict()
            reason = p.unavailable_reason(self.ctx)
            failing = self.stats[name].consecutive_failures >= FAILING_AFTER
            entry["state"] = "paused" if reason else ("failing" if failing else "active")
            entry["reason"] = reason
            entry["consumes"] = p.consumes
            entry["note"] = getattr(p, "note", None)
            out[name] = entry
        return out
