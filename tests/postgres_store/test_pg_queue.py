"""Job claims on PostgreSQL with FOR UPDATE SKIP LOCKED: two claimers at once never take one
job twice, and neither waits for the other."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import Engine

from memoryd.queue import jobs as jobq

pytestmark = pytest.mark.postgres


def test_concurrent_claims_skip_each_others_locked_jobs(pg_engine: Engine) -> None:
    with pg_engine.begin() as conn:
        for i in range(10):
            jobq.enqueue(conn, "embed", f"mem_{i}", now=time.time())
    first_conn = pg_engine.connect()
    first_tx = first_conn.begin()
    try:
        # The first claimer's transaction is still open: its five rows stay locked.
        first = jobq.claim(first_conn, "embed", owner="daemon-1", now=time.time(), lease_s=60, limit=5)
        second: list[jobq.Job] = []
        failure: list[BaseException] = []

        def other_daemon() -> None:
            try:
                with pg_engine.begin() as conn:
                    conn.exec_driver_sql("SET LOCAL lock_timeout = '3s'")
                    second.extend(jobq.claim(conn, "embed", owner="daemon-2", now=time.time(),
                                             lease_s=60, limit=10))
            except BaseException as exc:  # reported below
                failure.append(exc)

        started = time.monotonic()
        thread = threading.Thread(target=other_daemon)
        thread.start()
        thread.join(10)
        waited = time.monotonic() - started
        assert not failure, failure
        first_tx.commit()
    finally:
        first_conn.close()
    assert len(first) == 5 and len(second) == 5
    assert not {j.id for j in first} & {j.id for j in second}
    assert waited < 2.0  # skipped the locked rows instead of waiting on them
