"""One bad job never fails its neighbours, and failures that no retry can fix end.

Real store, real runner; the passes are small ones whose fault is chosen by
the test (the real passes' own per-job handling is exercised in tests/e2e).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import Connection, Engine, create_engine, insert, select, text
from sqlalchemy.exc import OperationalError

from memoryd.config import Config
from memoryd.daemon import status as status_mod
from memoryd.daemon.runner import FAILING_AFTER
from memoryd.passes.base import Pass, PassContext, PassResult, PerJobPass
from memoryd.queue import jobs as jobq
from memoryd.queue.jobs import Job
from memoryd.store import failures
from memoryd.store.driver import sqlite_module
from memoryd.store.engine import read_only
from memoryd.store.schema import jobs

from .helpers import effects
from .test_runner import enqueue, make_runner

BAD = "poison"


class PerJobEffects(PerJobPass):
    """Writes one effect row per job; the job whose target is BAD raises."""

    name: ClassVar[str] = "fake_perjob"

    def apply(self, conn: Connection, job: Job, now: Any, ctx: PassContext) -> None:
        if job.target == BAD:
            raise ValueError("cannot handle this one")
        conn.execute(insert(effects).values(job_id=job.id, target=job.target, worker=self.name))


class BatchEffects(Pass):
    """Processes its batch in one transaction; the whole batch raises if BAD is in it
    (like an encoder that chokes on one text)."""

    name: ClassVar[str] = "fake_batch"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        self.batches.append([j.target for j in batch])
        if any(j.target == BAD for j in batch):
            raise RuntimeError("the encoder failed on one input")
        with ctx.engine.begin() as conn:
            for job in batch:
                conn.execute(insert(effects).values(job_id=job.id, target=job.target, worker=self.name))
                jobq.complete(conn, job, now=ctx.now())
        return PassResult(processed=len(batch))


class PermanentStoreError(Pass):
    """Raises the real error sqlite gives when the vec0 module is missing."""

    name: ClassVar[str] = "fake_novec"

    def __init__(self, db: Path) -> None:
        # An engine on the same file without memoryd's hooks: sqlite-vec is not loaded.
        self.bare = create_engine(f"sqlite:///{db}", module=sqlite_module())

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        with self.bare.connect() as conn:
            conn.execute(text("SELECT count(*) FROM memory_vec"))
        raise AssertionError("unreachable: memory_vec needs vec0")


def jobs_of(engine: Engine, pass_name: str) -> dict[str, Any]:
    with read_only(engine) as conn:
        return {r.target: r for r in conn.execute(select(jobs).where(jobs.c["pass"] == pass_name))}


def effect_targets(engine: Engine) -> list[str]:
    with read_only(engine) as conn:
        return sorted(r.target for r in conn.execute(select(effects)))


def test_per_job_pass_charges_only_the_job_that_raised(engine: Engine) -> None:
    runner = make_runner(engine, PerJobEffects())
    enqueue(engine, "fake_perjob", "a", BAD, "b")
    assert runner.cycle() is True
    got = jobs_of(engine, "fake_perjob")
    assert (got["a"].state, got["b"].state) == ("done", "done")
    assert (got[BAD].state, got[BAD].attempts) == ("ready", 1)
    assert got[BAD].last_error == "ValueError: cannot handle this one"
    assert effect_targets(engine) == ["a", "b"]
    assert runner.stats["fake_perjob"].errors_total == 1


def test_a_batch_that_raises_is_rerun_one_job_at_a_time_so_only_the_bad_job_is_charged(
        engine: Engine) -> None:
    batch_pass = BatchEffects()
    runner = make_runner(engine, batch_pass)
    enqueue(engine, "fake_batch", "a", BAD, "b")
    runner.cycle()
    assert batch_pass.batches[0] == ["a", BAD, "b"]
    assert sorted(batch_pass.batches[1:]) == [["a"], ["b"], [BAD]]
    got = jobs_of(engine, "fake_batch")
    assert (got["a"].state, got["a"].attempts) == ("done", 1)
    assert (got["b"].state, got["b"].attempts) == ("done", 1)
    assert (got[BAD].state, got[BAD].attempts) == ("ready", 1)
    assert got[BAD].last_error == "RuntimeError: the encoder failed on one input"
    assert effect_targets(engine) == ["a", "b"]


def test_a_permanent_store_error_counts_attempts_and_ends_dead(engine: Engine, db_path: Path) -> None:
    cfg = Config(backoff_base_s=0.001, backoff_max_s=0.001)
    runner = make_runner(engine, PermanentStoreError(db_path), config=cfg)
    enqueue(engine, "fake_novec", "m1", max_attempts=3)
    for _ in range(3):
        time.sleep(0.01)
        assert runner.cycle() is True
    job = jobs_of(engine, "fake_novec")["m1"]
    assert (job.state, job.attempts) == ("dead", 3)
    assert "no such module: vec0" in job.last_error
    status = runner.status()["fake_novec"]
    assert status["state"] == "failing"
    assert status["error_class"] == "OperationalError(OperationalError)"


def test_failing_pass_turns_health_degraded_and_a_good_batch_clears_it(engine: Engine) -> None:
    cfg = Config(backoff_base_s=0.001, backoff_max_s=0.001)
    perjob = PerJobEffects()
    runner = make_runner(engine, perjob, config=cfg)
    enqueue(engine, "fake_perjob", BAD, max_attempts=FAILING_AFTER + 2)
    for n in range(FAILING_AFTER):
        assert runner.status()["fake_perjob"]["state"] == "active", n
        time.sleep(0.01)
        runner.cycle()
    assert runner.status()["fake_perjob"]["state"] == "failing"
    snap = status_mod.snapshot(engine, time.time(), ["fake_perjob"], runner.status(), {},
                               {"state": "idle", "reason": ""}, {})
    assert snap["health"] == "degraded"
    assert any("pass fake_perjob is failing" in p and "ValueError" in p for p in snap["problems"])
    enqueue(engine, "fake_perjob", "good")
    time.sleep(0.01)
    runner.cycle()
    assert runner.status()["fake_perjob"]["state"] == "active"


def test_store_locked_for_real_is_transient_and_uncounted(engine: Engine, db_path: Path,
                                                          make_engine: Any) -> None:
    locked_engine = make_engine(busy_timeout_ms=50)
    # Another process's write lock (a raw connection; the engine's in-process gate cannot see it).
    holder = sqlite_module().connect(str(db_path), timeout=0.05, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError) as caught, locked_engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET priority = 0"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert failures.kind_of(caught.value) == "transient"


def test_wrong_dimension_vector_is_a_permanent_error(engine: Engine) -> None:
    with pytest.raises(OperationalError) as caught, engine.begin() as conn:
        conn.execute(text("INSERT INTO memory_vec(memory_seq, embedding, scope_key, status, kind) "
                          "VALUES (1, :v, 'agent:a', 'active', 'fact')"), {"v": b"\x00" * 4 * 768})
    assert failures.kind_of(caught.value) == "permanent"


def test_describe_keeps_no_quoted_text_and_no_bound_parameters(engine: Engine) -> None:
    secret = "the launch code is 0000-hunter2-quokka"
    assert secret not in failures.describe(ValueError(f"the LLM answered {secret!r}, not a kind"))
    assert failures.describe(ValueError(f"the LLM answered {secret!r}, not a kind")) == \
        "ValueError: the LLM answered '…', not a kind"
    # A real store error carrying the statement's values: the engine hides them.
    with pytest.raises(Exception) as caught, engine.begin() as conn:
        conn.execute(text("INSERT INTO jobs(id, pass, target, payload, state, run_after, max_attempts) "
                          "VALUES (NULL, NULL, :t, '{}', 'ready', 0, 1)"), {"t": secret})
    assert secret not in str(caught.value)
    assert secret not in failures.describe(caught.value)
