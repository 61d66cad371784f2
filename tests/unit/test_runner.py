"""The pass runner, driven by small fake passes on a real store.

The fakes complete their jobs the way a real pass must (output and completion
in one transaction); the real embed pass is exercised elsewhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
from freezegun import freeze_time
from sqlalchemy import Engine, insert, select

from memoryd.config import Config
from memoryd.daemon.runner import PassRunner
from memoryd.errors import PassUnavailable
from memoryd.models.embedder import Embedder
from memoryd.passes.base import Pass, PassContext, PassResult
from memoryd.passes.embed import EmbedPass
from memoryd.queue import jobs as jobq
from memoryd.queue.jobs import Job
from memoryd.store.engine import read_only
from memoryd.store.schema import jobs

from .helpers import effects

FROZEN = "2026-03-01 12:00:00"


class CompletingPass(Pass):
    """Writes one effect row per job and completes the job in the same transaction."""

    name: ClassVar[str] = "fake_ok"

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        with ctx.engine.begin() as conn:
            for job in batch:
                conn.execute(insert(effects).values(job_id=job.id, target=job.target, worker=self.name))
                jobq.complete(conn, job, now=ctx.now())
        return PassResult(processed=len(batch))


class ExplodingPass(Pass):
    name: ClassVar[str] = "fake_boom"

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        raise RuntimeError("model exploded")


class UnavailablePass(Pass):
    name: ClassVar[str] = "fake_off"

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        raise PassUnavailable("model file missing")


class BlockingPass(CompletingPass):
    """Blocks mid-batch until released (a batch that outlives the shutdown grace)."""

    name: ClassVar[str] = "fake_slow"

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        self.started.set()
        self.release.wait(30)
        return super().run(batch, ctx)


class ObservedRunner(PassRunner):
    """Signals each time the loop computes how long to sleep (it is about to wait)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sleep_computed = threading.Event()
        self.last_sleep_s: float | None = None

    def _sleep_s(self) -> float:
        self.last_sleep_s = super()._sleep_s()
        self.sleep_computed.set()
        return self.last_sleep_s


def make_runner(engine: Engine, *passes: Pass, cls: type[PassRunner] = PassRunner,
                now: Callable[[], float] | None = None, config: Config | None = None) -> PassRunner:
    ctx = PassContext(engine=engine, config=config or Config(), embedder=Embedder("none"),
                      now=now or time.time)
    return cls({p.name: p for p in passes}, ctx, owner="node-test")


def enqueue(engine: Engine, pass_name: str, *targets: str, max_attempts: int = 5) -> None:
    with engine.begin() as conn:
        for target in targets:
            jobq.enqueue(conn, pass_name, target, now=time.time(), max_attempts=max_attempts)


def job_of(engine: Engine, pass_name: str) -> Any:
    with read_only(engine) as conn:
        return conn.execute(select(jobs).where(jobs.c["pass"] == pass_name)).one()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def stop_runners() -> Iterator[list[PassRunner]]:
    started: list[PassRunner] = []
    yield started
    for runner in started:
        runner.stop(grace_s=5)


def test_pass_that_raises_fails_its_batch_with_the_attempt_counted_and_backoff(engine: Engine) -> None:
    with freeze_time(FROZEN):
        now = time.time()
        runner = make_runner(engine, ExplodingPass(), CompletingPass())
        enqueue(engine, "fake_boom", "m1")
        enqueue(engine, "fake_ok", "m1")
        assert runner.cycle() is True
    boom = job_of(engine, "fake_boom")
    base = Config().backoff_base_s
    assert (boom.state, boom.attempts, boom.lease_owner) == ("ready", 1, None)
    assert boom.last_error == "RuntimeError: model exploded"
    assert now + 0.5 * base <= boom.run_after <= now + base
    assert runner.stats["fake_boom"].errors_total == 1
    assert runner.status()["fake_boom"]["last_error"] == "RuntimeError: model exploded"
    # Positive control: the healthy pass in the same cycle did its work.
    assert job_of(engine, "fake_ok").state == "done"
    assert runner.stats["fake_ok"].processed_total == 1


def test_failed_job_is_retried_by_a_later_cycle_after_its_backoff(engine: Engine) -> None:
    with freeze_time(FROZEN) as clock:
        runner = make_runner(engine, ExplodingPass())
        enqueue(engine, "fake_boom", "m1")
        runner.cycle()
        assert runner.cycle() is False  # backing off: nothing due
        clock.tick(Config().backoff_base_s)
        assert runner.cycle() is True
    assert job_of(engine, "fake_boom").attempts == 2


def test_pass_unavailable_releases_its_batch_uncounted(engine: Engine) -> None:
    with freeze_time(FROZEN):
        runner = make_runner(engine, UnavailablePass(), CompletingPass())
        enqueue(engine, "fake_off", "m1")
        enqueue(engine, "fake_ok", "m1")
        runner.cycle()
    off = job_of(engine, "fake_off")
    assert (off.state, off.attempts, off.last_error, off.lease_owner) == ("ready", 0, None, None)
    assert runner.stats["fake_off"].errors_total == 0
    assert runner.stats["fake_off"].last_error == "model file missing"
    assert job_of(engine, "fake_ok").state == "done"


def test_pass_unavailable_cools_the_pass_down_instead_of_spinning(engine: Engine) -> None:
    # A pass may raise PassUnavailable while its unavailable_reason() still says
    # None; released jobs are due at once, so without a cool-down the runner would
    # claim and release them in a tight loop.
    with freeze_time(FROZEN) as clock:
        off = UnavailablePass()
        runner = make_runner(engine, off, CompletingPass())
        enqueue(engine, "fake_off", "m1")
        runner.cycle()
        assert runner.runnable()["fake_off"] is False
        assert runner.runnable()["fake_ok"] is True  # control: other passes are unaffected
        # The runner sleeps until the cool-down ends, not for its idle maximum.
        assert 0 < runner._sleep_s() <= Config().backoff_base_s + 0.01
        assert runner.cycle() is False
        assert job_of(engine, "fake_off").attempts == 0
        clock.tick(Config().backoff_base_s + 0.01)
        assert runner.runnable()["fake_off"] is True
        assert runner._sleep_s() == 0


def test_unrunnable_pass_jobs_are_not_claimed(engine: Engine) -> None:
    runner = make_runner(engine, EmbedPass(), CompletingPass())  # the embedder is 'none'
    enqueue(engine, "embed", "m1")
    enqueue(engine, "fake_ok", "m1")
    runner.cycle()
    embed = job_of(engine, "embed")
    assert (embed.state, embed.attempts) == ("ready", 0)
    assert runner.status()["embed"]["state"] == "paused"
    assert "none" in runner.status()["embed"]["reason"]
    assert job_of(engine, "fake_ok").state == "done"


def test_wakeup_makes_an_idle_runner_run_promptly(engine: Engine, stop_runners: list[PassRunner]) -> None:
    runner = make_runner(engine, CompletingPass(), cls=ObservedRunner)
    assert isinstance(runner, ObservedRunner)
    stop_runners.append(runner)
    runner.start()
    assert runner.sleep_computed.wait(10)
    assert runner.last_sleep_s is not None and runner.last_sleep_s >= 60  # idle: a long sleep
    enqueue(engine, "fake_ok", "m1")  # written behind the runner's back: no wakeup yet
    time.sleep(0.3)
    assert job_of(engine, "fake_ok").state == "ready"  # control: an idle runner does not poll
    runner.wakeup()
    assert wait_for(lambda: job_of(engine, "fake_ok").state == "done")


def test_stop_releases_the_leases_of_a_batch_that_outlives_the_grace(
        engine: Engine, stop_runners: list[PassRunner]) -> None:
    slow = BlockingPass()
    runner = make_runner(engine, slow)
    runner.start()
    enqueue(engine, "fake_slow", "m1")
    runner.wakeup()
    assert slow.started.wait(10)
    assert job_of(engine, "fake_slow").state == "leased"
    runner.stop(grace_s=0.2)
    released = job_of(engine, "fake_slow")
    assert (released.state, released.attempts, released.lease_owner) == ("ready", 0, None)
    slow.release.set()  # the abandoned batch finishes; its completion is refused as stale
    assert wait_for(lambda: runner._thread is not None and not runner._thread.is_alive())
    assert job_of(engine, "fake_slow").state == "ready"
    with read_only(engine) as conn:
        assert conn.execute(select(effects)).all() == []


class LockedStorePass(Pass):
    """Stands in for a pass whose write hit "database is locked" past the busy timeout."""

    name = "fake_locked"

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        from sqlalchemy.exc import OperationalError

        raise OperationalError("UPDATE ...", {}, Exception("database is locked"))


def test_store_locked_during_a_pass_releases_its_batch_uncounted(engine: Engine) -> None:
    runner = make_runner(engine, LockedStorePass(), CompletingPass())
    enqueue(engine, "fake_locked", "m1")
    enqueue(engine, "fake_ok", "m1")
    runner.cycle()
    job = job_of(engine, "fake_locked")
    assert (job.state, job.attempts, job.lease_owner) == ("ready", 0, None)
    assert runner.stats["fake_locked"].errors_total == 0
    assert job_of(engine, "fake_ok").state == "done"  # positive control: other passes go on


class LongBatchPass(CompletingPass):
    """A batch that runs three lease periods, while another worker tries to claim its jobs."""

    name: ClassVar[str] = "fake_long"

    def __init__(self, lease_s: float) -> None:
        self.lease_s = lease_s
        self.taken_by_other: list[Job] = []

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        time.sleep(self.lease_s * 3)
        with ctx.engine.begin() as conn:
            self.taken_by_other = jobq.claim(conn, self.name, owner="other-node", now=time.time(),
                                             lease_s=self.lease_s, limit=10)
        return super().run(batch, ctx)


def test_the_runner_renews_a_running_batchs_leases_so_no_one_else_takes_them(engine: Engine) -> None:
    long_pass = LongBatchPass(lease_s=0.6)
    runner = make_runner(engine, long_pass, config=Config(job_lease_s=0.6))
    enqueue(engine, "fake_long", "m1", "m2")
    assert runner.cycle()
    assert long_pass.taken_by_other == []  # the leases were renewed while the batch ran
    assert job_of_state(engine, "fake_long") == {"done"}  # and its completions were not stale


def job_of_state(engine: Engine, pass_name: str) -> set[str]:
    with read_only(engine) as conn:
        return set(conn.execute(select(jobs.c.state).where(jobs.c["pass"] == pass_name)).scalars())
