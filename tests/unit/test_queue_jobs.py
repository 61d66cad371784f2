"""The durable job queue: dedup, claim, leases, completion, failure, death and revival.

Every function takes ``now`` explicitly, so lease edges are exact, not slept for.
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, insert, select

from memoryd.errors import StaleLease
from memoryd.queue import jobs as jobq
from memoryd.queue.backoff import backoff_s
from memoryd.queue.jobs import Job
from memoryd.store.engine import read_only
from memoryd.store.schema import jobs

from .helpers import count, effects

T0 = 1_800_000_000.0  # a fixed epoch second
LEASE = 60.0


def enqueue(engine: Engine, target: str, *, pass_name: str = "embed", now: float = T0,
            max_attempts: int = 5) -> bool:
    with engine.begin() as conn:
        return jobq.enqueue(conn, pass_name, target, now=now, max_attempts=max_attempts)


def claim(engine: Engine, *, owner: str = "w1", now: float = T0, pass_name: str = "embed",
          limit: int = 10, lease_s: float = LEASE) -> list[Job]:
    with engine.begin() as conn:
        return jobq.claim(conn, pass_name, owner=owner, now=now, lease_s=lease_s, limit=limit)


def complete(engine: Engine, job: Job, *, now: float) -> None:
    with engine.begin() as conn:
        jobq.complete(conn, job, now=now)


def fail(engine: Engine, job: Job, *, now: float, error: str = "boom") -> str:
    with engine.begin() as conn:
        return jobq.fail(conn, job, error, now=now, backoff_base_s=2.0, backoff_max_s=600.0)


def job_row(engine: Engine, job_id: int) -> Any:
    with read_only(engine) as conn:
        return conn.execute(select(jobs).where(jobs.c.id == job_id)).one()


def only_job(engine: Engine, target: str) -> Any:
    with read_only(engine) as conn:
        return conn.execute(select(jobs).where(jobs.c.target == target)).one()


# -- enqueue dedup -----------------------------------------------------------------------


def test_enqueue_of_a_live_pass_and_target_is_deduplicated(engine: Engine) -> None:
    assert enqueue(engine, "m1") is True
    assert enqueue(engine, "m1") is False
    assert enqueue(engine, "m1", pass_name="classify") is True  # another pass: its own job
    assert enqueue(engine, "m2") is True  # another target: its own job
    assert count(engine, jobs, jobs.c.target == "m1", jobs.c["pass"] == "embed") == 1
    assert count(engine, jobs) == 3


def test_concurrent_enqueue_of_one_pass_and_target_yields_one_job(engine: Engine) -> None:
    start = threading.Barrier(8)

    def worker(_: int) -> bool:
        start.wait()
        return enqueue(engine, "contended")

    with ThreadPoolExecutor(8) as pool:
        added = list(pool.map(worker, range(8)))
    assert added.count(True) == 1
    assert count(engine, jobs, jobs.c.target == "contended") == 1


def test_leased_job_still_deduplicates_enqueue(engine: Engine) -> None:
    enqueue(engine, "m1")
    claim(engine)
    assert enqueue(engine, "m1", now=T0 + 1) is False
    assert count(engine, jobs) == 1


def test_after_done_a_new_job_may_be_enqueued(engine: Engine) -> None:
    enqueue(engine, "m1")
    [job] = claim(engine)
    complete(engine, job, now=T0 + 1)
    assert enqueue(engine, "m1", now=T0 + 2) is True
    with read_only(engine) as conn:
        states = sorted(conn.execute(select(jobs.c.state).where(jobs.c.target == "m1")).scalars())
    assert states == ["done", "ready"]


# -- claim and leases ----------------------------------------------------------------


def test_claim_counts_the_attempt_at_claim_time(engine: Engine) -> None:
    enqueue(engine, "m1")
    [job] = claim(engine, owner="w1")
    assert job.attempts == 1
    row = only_job(engine, "m1")
    assert (row.state, row.attempts, row.lease_owner, row.lease_until) == ("leased", 1, "w1", T0 + LEASE)


def test_claim_takes_only_due_jobs_of_its_pass_up_to_limit(engine: Engine) -> None:
    for i in range(3):
        enqueue(engine, f"m{i}")
    enqueue(engine, "other", pass_name="classify")
    with engine.begin() as conn:
        jobq.enqueue(conn, "embed", "later", now=T0, run_after=T0 + 30)
    got = claim(engine, limit=2)
    assert [j.target for j in got] == ["m0", "m1"]
    assert [j.target for j in claim(engine, limit=10)] == ["m2"]
    assert claim(engine, limit=10) == []  # "later" is not due, "other" is another pass
    assert [j.target for j in claim(engine, now=T0 + 30)] == ["later"]  # leases still held


def test_lease_at_its_expiry_instant_is_not_reclaimable(engine: Engine) -> None:
    enqueue(engine, "m1")
    claim(engine, owner="w1", now=T0)
    assert claim(engine, owner="w2", now=T0 + LEASE) == []
    assert only_job(engine, "m1").lease_owner == "w1"


def test_lease_just_after_expiry_is_reclaimed_with_a_new_token(engine: Engine) -> None:
    enqueue(engine, "m1")
    [first] = claim(engine, owner="w1", now=T0)
    [second] = claim(engine, owner="w2", now=T0 + LEASE + 0.001)
    assert second.id == first.id
    assert second.attempts == 2
    assert second.lease_token != first.lease_token
    row = only_job(engine, "m1")
    assert (row.lease_owner, row.attempts) == ("w2", 2)


def test_stale_worker_completion_raises_and_its_output_is_rolled_back(engine: Engine) -> None:
    enqueue(engine, "m1")
    [stale] = claim(engine, owner="w1", now=T0)
    [fresh] = claim(engine, owner="w2", now=T0 + LEASE + 1)

    with pytest.raises(StaleLease), engine.begin() as conn:
        conn.execute(insert(effects).values(job_id=stale.id, target=stale.target, worker="w1"))
        jobq.complete(conn, stale, now=T0 + LEASE + 2)
    assert count(engine, effects) == 0
    assert only_job(engine, "m1").state == "leased"

    # Positive control: the lease holder's output and completion commit together.
    with engine.begin() as conn:
        conn.execute(insert(effects).values(job_id=fresh.id, target=fresh.target, worker="w2"))
        jobq.complete(conn, fresh, now=T0 + LEASE + 3)
    with read_only(engine) as conn:
        assert conn.execute(select(effects.c.worker)).scalars().all() == ["w2"]
    row = only_job(engine, "m1")
    assert (row.state, row.attempts, row.lease_owner) == ("done", 2, None)


def test_stale_worker_fail_raises_and_leaves_the_new_lease_alone(engine: Engine) -> None:
    enqueue(engine, "m1")
    [stale] = claim(engine, owner="w1", now=T0)
    claim(engine, owner="w2", now=T0 + LEASE + 1)
    with pytest.raises(StaleLease):
        fail(engine, stale, now=T0 + LEASE + 2)
    row = only_job(engine, "m1")
    assert (row.state, row.lease_owner, row.last_error) == ("leased", "w2", None)


# -- failure, backoff, death ---------------------------------------------------------------


def test_fail_backs_off_within_the_jittered_window_and_counts_as_failed(engine: Engine) -> None:
    enqueue(engine, "m1")
    enqueue(engine, "m2")
    j1, _ = claim(engine, now=T0)
    assert fail(engine, j1, now=T0 + 1, error="RuntimeError: model exploded") == "ready"
    row = only_job(engine, "m1")
    # First failure: base 2 s, jittered into [0.5, 1.0] × 2 s.
    assert T0 + 1 + 1.0 <= row.run_after <= T0 + 1 + 2.0
    assert (row.state, row.attempts, row.last_error, row.lease_owner) == (
        "ready", 1, "RuntimeError: model exploded", None)
    with read_only(engine) as conn:
        stats = jobq.stats(conn, now=T0 + 1)["embed"]
    # m1 failed and waits; m2 is leased; nothing is plain ready.
    assert (stats["ready"], stats["failed"], stats["leased"], stats["dead"]) == (0, 1, 1, 0)


def test_failed_job_is_not_claimable_before_its_backoff_ends(engine: Engine) -> None:
    enqueue(engine, "m1")
    [job] = claim(engine, now=T0)
    fail(engine, job, now=T0)
    run_after = only_job(engine, "m1").run_after
    assert claim(engine, now=run_after - 0.001) == []
    [again] = claim(engine, now=run_after)
    assert again.attempts == 2


def test_stats_tell_ready_from_failed_leased_and_dead(engine: Engine) -> None:
    for target in ("fresh", "failing", "leased", "dying"):
        enqueue(engine, target, max_attempts=1 if target == "dying" else 5)
    by_target = {j.target: j for j in claim(engine, now=T0, limit=10)}
    fail(engine, by_target["failing"], now=T0)
    fail(engine, by_target["dying"], now=T0)
    with engine.begin() as conn:
        jobq.release(conn, [by_target["fresh"]], now=T0)
    with read_only(engine) as conn:
        stats = jobq.stats(conn, now=T0 + 10)["embed"]
    assert (stats["ready"], stats["failed"], stats["leased"], stats["dead"]) == (1, 1, 1, 1)
    assert stats["oldest_ready_age_s"] == 10.0


def test_poison_job_is_dead_after_max_attempts_of_fail(engine: Engine) -> None:
    enqueue(engine, "poison", max_attempts=3)
    now = T0
    states = []
    for _ in range(3):
        [job] = claim(engine, now=now)
        states.append(fail(engine, job, now=now))
        now = only_job(engine, "poison").run_after if states[-1] == "ready" else now
    assert states == ["ready", "ready", "dead"]
    row = only_job(engine, "poison")
    assert (row.state, row.attempts, row.last_error) == ("dead", 3, "boom")
    assert row.finished_at == now
    assert claim(engine, now=now + 10_000) == []


def test_poison_job_is_dead_after_max_attempts_of_lease_expiry(engine: Engine) -> None:
    enqueue(engine, "crasher", max_attempts=3)
    now = T0
    for attempt in (1, 2, 3):
        [job] = claim(engine, now=now, owner=f"w{attempt}")
        assert job.attempts == attempt
        now += LEASE + 1  # the worker died; its lease runs out
    assert claim(engine, now=now) == []
    row = only_job(engine, "crasher")
    assert (row.state, row.attempts, row.last_error, row.lease_owner) == ("dead", 3, "lease expired", None)


def test_retry_dead_revives_with_attempts_reset(engine: Engine) -> None:
    enqueue(engine, "poison", max_attempts=1)
    [job] = claim(engine, now=T0)
    assert fail(engine, job, now=T0) == "dead"
    with engine.begin() as conn:
        assert jobq.retry_dead(conn, now=T0 + 5) == 1
    row = only_job(engine, "poison")
    assert (row.state, row.attempts, row.run_after, row.finished_at) == ("ready", 0, T0 + 5, None)
    [again] = claim(engine, now=T0 + 5)
    assert again.attempts == 1


def test_retry_dead_leaves_a_dead_job_whose_target_has_a_live_job(engine: Engine) -> None:
    enqueue(engine, "m1", max_attempts=1)
    enqueue(engine, "m2", max_attempts=1)
    for job in claim(engine, now=T0):
        fail(engine, job, now=T0)
    enqueue(engine, "m1", now=T0 + 1)  # a fresh live job for m1
    with engine.begin() as conn:
        assert jobq.retry_dead(conn, now=T0 + 2) == 1
    with read_only(engine) as conn:
        states = {(r.target, r.state) for r in conn.execute(select(jobs.c.target, jobs.c.state))}
    assert states == {("m1", "dead"), ("m1", "ready"), ("m2", "ready")}


def test_retry_dead_by_pass_revives_only_that_pass(engine: Engine) -> None:
    enqueue(engine, "m1", max_attempts=1)
    enqueue(engine, "m1", pass_name="classify", max_attempts=1)
    for pass_name in ("embed", "classify"):
        [job] = claim(engine, pass_name=pass_name)
        fail(engine, job, now=T0)
    with engine.begin() as conn:
        assert jobq.retry_dead(conn, now=T0, pass_name="classify") == 1
    with read_only(engine) as conn:
        states = dict(conn.execute(select(jobs.c["pass"], jobs.c.state)).all())
    assert states == {"embed": "dead", "classify": "ready"}


# -- release ----------------------------------------------------------------------------


def test_release_owner_returns_a_crashed_predecessors_leases_with_the_attempt_counted(
        engine: Engine) -> None:
    enqueue(engine, "mine")
    enqueue(engine, "theirs")
    claim(engine, owner="node-a", limit=1)
    claim(engine, owner="node-b", limit=1)
    with engine.begin() as conn:
        assert jobq.release_owner(conn, "node-a", now=T0 + 3) == 1
    mine = only_job(engine, "mine")
    assert (mine.state, mine.attempts, mine.lease_owner, mine.lease_token, mine.run_after) == (
        "ready", 1, None, None, T0 + 3)
    theirs = only_job(engine, "theirs")
    assert (theirs.state, theirs.lease_owner) == ("leased", "node-b")
    [again] = claim(engine, owner="node-a", now=T0 + 3)
    assert (again.target, again.attempts) == ("mine", 2)


def test_job_that_crashes_the_daemon_every_time_goes_dead_after_max_attempts(engine: Engine) -> None:
    enqueue(engine, "crasher", max_attempts=2)
    enqueue(engine, "healthy", max_attempts=2)
    now = T0
    attempts = []
    for _restart in range(4):
        got = claim(engine, owner="node-a", now=now)
        attempts.append([j.attempts for j in got if j.target == "crasher"])
        with engine.begin() as conn:  # the daemon died holding the lease; it restarts
            jobq.release_owner(conn, "node-a", now=now + 1)
        now += 2
    assert attempts == [[1], [2], [], []]
    row = only_job(engine, "crasher")
    assert (row.state, row.attempts, row.lease_owner) == ("dead", 2, None)
    assert row.last_error
    # Positive control: with attempts left, a released job is ready again.
    assert only_job(engine, "healthy").state == "dead"  # it crashed alongside, twice
    enqueue(engine, "fresh", max_attempts=2, now=now)
    claim(engine, owner="node-a", now=now)
    with engine.begin() as conn:
        jobq.release_owner(conn, "node-a", now=now + 1)
    assert (only_job(engine, "fresh").state, only_job(engine, "fresh").attempts) == ("ready", 1)


def test_release_gives_jobs_back_uncounted(engine: Engine) -> None:
    enqueue(engine, "m1")
    [job] = claim(engine)
    with engine.begin() as conn:
        assert jobq.release(conn, [job], now=T0 + 1) == 1
    row = only_job(engine, "m1")
    assert (row.state, row.attempts, row.lease_owner) == ("ready", 0, None)


# -- prune, pending, next_due -----------------------------------------------------------


def test_prune_done_removes_only_old_done_jobs(engine: Engine) -> None:
    for target in ("old", "recent", "waiting", "dead"):
        enqueue(engine, target, max_attempts=1)
    by_target = {j.target: j for j in claim(engine, now=T0, limit=10)}
    complete(engine, by_target["old"], now=T0 + 1)
    complete(engine, by_target["recent"], now=T0 + 100)
    fail(engine, by_target["dead"], now=T0 + 1)
    with engine.begin() as conn:
        jobq.release(conn, [by_target["waiting"]], now=T0 + 1)
        assert jobq.prune_done(conn, older_than=T0 + 50) == 1
    with read_only(engine) as conn:
        left = {r.target: r.state for r in conn.execute(select(jobs.c.target, jobs.c.state))}
    assert left == {"recent": "done", "waiting": "ready", "dead": "dead"}


def test_pending_for_lists_passes_with_open_jobs(engine: Engine) -> None:
    enqueue(engine, "m1")
    enqueue(engine, "m1", pass_name="classify")
    [job] = claim(engine, pass_name="classify")
    with read_only(engine) as conn:
        assert jobq.pending_for(conn, "m1") == ["classify", "embed"]
    complete(engine, job, now=T0 + 1)
    with read_only(engine) as conn:
        assert jobq.pending_for(conn, "m1") == ["embed"]
        assert jobq.pending_for(conn, "unknown") == []


def test_next_due_is_the_earliest_run_after_or_lease_expiry(engine: Engine) -> None:
    with engine.begin() as conn:
        jobq.enqueue(conn, "embed", "later", now=T0, run_after=T0 + 50)
        jobq.enqueue(conn, "embed", "leased", now=T0, run_after=T0)
    claim(engine, now=T0, lease_s=20)
    with read_only(engine) as conn:
        assert jobq.next_due(conn, ["embed"], now=T0) == T0 + 20
        assert jobq.next_due(conn, ["classify"], now=T0) is None
        assert jobq.next_due(conn, [], now=T0) is None


# -- backoff -------------------------------------------------------------------------------


@given(
    attempts=st.integers(min_value=1, max_value=80),
    base=st.floats(min_value=0.001, max_value=100.0),
    cap=st.floats(min_value=0.001, max_value=100_000.0),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_backoff_is_within_half_to_full_of_the_capped_exponential(attempts: int, base: float, cap: float,
                                                                  seed: int) -> None:
    ceiling = min(cap, base * 2 ** (attempts - 1))
    delay = backoff_s(attempts, base, cap, random.Random(seed))
    assert 0.5 * ceiling <= delay <= ceiling


def test_backoff_doubles_per_attempt_until_the_cap() -> None:
    class Top(random.Random):
        def random(self) -> float:
            return 1.0  # the upper edge of the jitter

    assert [backoff_s(n, 2.0, 20.0, Top()) for n in range(1, 6)] == [2.0, 4.0, 8.0, 16.0, 20.0]


# -- batched completion and enqueue (the embed pass) -------------------------------------


def test_complete_many_completes_what_we_hold_and_names_the_stale(engine: Engine) -> None:
    for target in ("m1", "m2", "m3"):
        enqueue(engine, target)
    batch = claim(engine, owner="w1", now=T0)
    assert len(batch) == 3
    # m2's lease expires and another worker takes it: our completion of m2 is stale.
    [taken] = [j for j in batch if j.target == "m2"]
    with engine.begin() as conn:
        conn.execute(jobs.update().where(jobs.c.id == taken.id).values(lease_until=T0))
    [fresh] = claim(engine, owner="w2", now=T0 + 1)
    assert fresh.id == taken.id
    with engine.begin() as conn:
        held = jobq.complete_many(conn, batch, now=T0 + 2)
    assert held == {j.id for j in batch if j.target != "m2"}
    assert only_job(engine, "m1").state == "done" and only_job(engine, "m3").state == "done"
    row = only_job(engine, "m2")
    assert (row.state, row.lease_owner) == ("leased", "w2")  # the new holder's lease is untouched


def test_enqueue_many_keeps_live_jobs_and_adds_the_rest(engine: Engine) -> None:
    enqueue(engine, "m1", pass_name="classify")
    with engine.begin() as conn:
        jobq.enqueue_many(conn, [("classify", "m1"), ("classify", "m2"), ("reflect", "m1")], now=T0)
        jobq.enqueue_many(conn, [("classify", "m2")], now=T0)  # again: nothing new
    with read_only(engine) as conn:
        pairs = sorted((r[0], r[1]) for r in conn.execute(select(jobs.c["pass"], jobs.c.target)))
    assert pairs == [("classify", "m1"), ("classify", "m2"), ("reflect", "m1")]
