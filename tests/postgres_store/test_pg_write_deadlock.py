"""A group write that PostgreSQL picks as a deadlock's victim is run again, not refused: the
server rolled its whole transaction back, so nothing of it was written (the hostile-input suite
refused an honest write with 'deadlock detected' while other writes touched the same rows)."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import Engine, text

from memoryd.errors import StoreUnavailable
from memoryd.store.groupwrite import identity
from memoryd.store.memories import lock_name
from memoryd.store.postgres.backend import identity_key
from memoryd.store.writes import WriteUnit, commit_units
from tests.postgres_store.test_pg_search_legs import CTX, NOW
from tests.unit.helpers import build_memory

pytestmark = pytest.mark.postgres

CONTENT = "the staging database moved to db-7.internal"


def test_a_deadlocked_group_write_is_run_again_and_written_once(pg_engine: Engine) -> None:
    (stored,) = commit_units(pg_engine, [WriteUnit([build_memory(CONTENT)], actor="t")], CTX, NOW)
    stored_id = stored[0]["id"]
    key = identity_key(lock_name(*identity(build_memory(CONTENT))))
    holding, failures = threading.Event(), []

    def other_transaction() -> None:
        """Locks the stored row, then (once the write holds the identity's lock and waits for the
        row) asks for the identity's lock: a deadlock PostgreSQL breaks by failing the write."""
        try:
            with pg_engine.connect() as conn, conn.begin():
                conn.execute(text("UPDATE memories SET importance = importance WHERE id = :i"),
                             {"i": stored_id})
                holding.set()
                time.sleep(0.5)
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
        except BaseException as exc:  # reported below
            failures.append(exc)

    t = threading.Thread(target=other_transaction)
    t.start()
    assert holding.wait(10)
    (again,) = commit_units(pg_engine, [WriteUnit([build_memory(CONTENT)], actor="t")], CTX, NOW)
    t.join(30)
    assert not failures, failures
    assert not isinstance(again, StoreUnavailable), again
    assert again[0]["id"] == stored_id  # a duplicate: it corroborates the stored row
    with pg_engine.connect() as conn:
        rows = conn.execute(text("SELECT count(*), max(corroboration) FROM memories")).one()
    assert tuple(rows) == (1, 2)  # written once: the rolled-back attempt left nothing
