"""Lease renewal on both backends: a heartbeat keeps a long batch's jobs from being reclaimed,
and a worker that stops renewing loses them to the next claimer."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from memoryd.queue import jobs as jobq
from memoryd.queue.lease import LeaseHeartbeat
from memoryd.store.engine import create_store_engine
from memoryd.store.migrate import upgrade

LEASE_S = 0.6


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """A migrated store on each backend."""
    if request.param == "sqlite":
        yield request.getfixturevalue("engine")
        return
    engine = create_store_engine(request.getfixturevalue("pg_url"))
    upgrade(engine)
    yield engine
    engine.dispose()


def _claim(engine: Engine, owner: str) -> list[jobq.Job]:
    with engine.begin() as conn:
        return jobq.claim(conn, "embed", owner=owner, now=time.time(), lease_s=LEASE_S, limit=10)


def _seed(engine: Engine, n: int = 3) -> None:
    with engine.begin() as conn:
        for i in range(n):
            jobq.enqueue(conn, "embed", f"mem_{i}", now=time.time())


def test_a_heartbeat_keeps_a_long_batch_leased_past_its_lease(store: Engine) -> None:
    _seed(store)
    batch = _claim(store, "worker-a")
    assert len(batch) == 3
    with LeaseHeartbeat(store, batch, LEASE_S, time.time, interval_s=LEASE_S / 4) as beat:
        time.sleep(LEASE_S * 3)  # the batch runs three lease periods
        assert _claim(store, "worker-b") == []  # nothing expired, nothing reclaimed
    assert beat.renewals >= 3
    with store.begin() as conn:
        assert jobq.complete_many(conn, batch, now=time.time()) == {job.id for job in batch}


def test_without_renewal_an_expired_lease_is_reclaimed_by_the_next_claim(store: Engine) -> None:
    _seed(store)
    batch = _claim(store, "worker-a")
    time.sleep(LEASE_S * 1.5)
    taken = _claim(store, "worker-b")
    assert {job.id for job in taken} == {job.id for job in batch}
    with store.begin() as conn:  # the first worker's completion is refused: it lost the jobs
        assert jobq.complete_many(conn, batch, now=time.time()) == set()
        assert jobq.renew(conn, batch, now=time.time(), lease_s=LEASE_S) == set()
