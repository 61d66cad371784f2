"""A write and another daemon's forget of the same text are one serialised decision (PostgreSQL).

Two engines on one database stand for two daemons. The forget takes the write
path's advisory lock on each row's content identity (store/memories.py
lock_name) before it lays the tombstones, so a write of that text either
commits before the forget looks (and is forgotten with it) or waits and is
refused (1006). Without the lock, the write's tombstone check ran before the
forget committed, and its row landed after it: live, with forgotten text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, text, update

from memoryd.errors import Tombstoned
from memoryd.store import lifecycle
from memoryd.store.engine import create_store_engine
from memoryd.store.memories import write_memory
from memoryd.store.migrate import upgrade
from memoryd.store.schema import memories
from memoryd.store.writes import WriteUnit, commit_units
from tests.integration.harness import wait_until
from tests.lifecycle.helpers import STORE_CTX, new_memory, store_write

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
TEXT = "the payroll export runs at 02:00 with key pk-7781"


@pytest.fixture
def daemons(pg_url: str) -> Iterator[tuple[Engine, Engine]]:
    """Two engines on one migrated database: two daemons' connections."""
    first = create_store_engine(pg_url)
    upgrade(first)
    second = create_store_engine(pg_url)
    yield first, second
    first.dispose()
    second.dispose()


OWNER = "alice@example.org"


def _retired_row(engine: Engine) -> str:
    """A row holding TEXT that is no longer live (superseded): a new write of TEXT is not a
    duplicate of it, so it would insert a row of its own."""
    memory_id = store_write(engine, TEXT, NOW, scope="user", owner=OWNER)
    with engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == memory_id).values(status="superseded"))
    return memory_id


def _lock_waiters(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND wait_event = 'advisory'")).scalar_one())


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _live_with_text(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT id FROM memories WHERE content = :c AND status = 'active'"),
                                 {"c": TEXT}).scalars())


def test_a_write_during_another_daemons_forget_waits_and_is_refused(daemons: tuple[Engine, Engine]) -> None:
    forgetter, writer = daemons
    doomed = _retired_row(forgetter)
    release = threading.Event()

    def forget_and_hold() -> dict[str, Any]:
        with forgetter.begin() as conn:
            out = lifecycle.forget(conn, memory_id=doomed, subject=None, reason=None, tombstone=True,
                                   now=NOW, actor="daemon-b", max_attempts=5)
            holding.set()
            release.wait(30)
            return out

    holding = threading.Event()
    forget_thread, forgot = _in_thread(forget_and_hold)
    assert holding.wait(30)
    # The other daemon's group commit of the same text, while the forget is uncommitted.
    write_thread, wrote = _in_thread(lambda: commit_units(
        writer, [WriteUnit([new_memory(TEXT, scope="user", owner=OWNER)], "daemon-a")], STORE_CTX, NOW)[0])
    wait_until(lambda: _lock_waiters(writer) >= 1 or not write_thread.is_alive(), timeout_s=30,
               message="the write to wait for the forget's lock (or to finish)")
    release.set()
    forget_thread.join(30)
    write_thread.join(30)
    assert "error" not in forgot and forgot["result"]["matched"] == 1
    assert isinstance(wrote.get("result"), Tombstoned), wrote
    assert _live_with_text(writer) == []


@pytest.mark.parametrize("by", ["id", "subject"])
def test_a_forget_during_another_daemons_write_waits_and_takes_the_new_row(
        daemons: tuple[Engine, Engine], by: str) -> None:
    writer, forgetter = daemons
    doomed = _retired_row(writer)
    holding, release = threading.Event(), threading.Event()

    def write_and_hold() -> str:
        with writer.begin() as conn:
            item = new_memory(TEXT, scope="user", owner=OWNER)
            new_id = str(write_memory(conn, item, NOW, STORE_CTX)["id"])
            holding.set()
            release.wait(30)
            return new_id

    write_thread, wrote = _in_thread(write_and_hold)
    assert holding.wait(30)
    forget_thread, forgot = _in_thread(lambda: _forget(forgetter, doomed, by))
    wait_until(lambda: _lock_waiters(forgetter) >= 1 or not forget_thread.is_alive(), timeout_s=30,
               message="the forget to wait for the write's lock (or to finish)")
    release.set()
    write_thread.join(30)
    forget_thread.join(30)
    assert "error" not in wrote and "error" not in forgot, (wrote, forgot)
    # The write committed first, so the forget saw its row and took it as a copy.
    assert set(forgot["result"]["memory_ids"]) == {doomed, wrote["result"]}
    assert _live_with_text(writer) == []


def _forget(engine: Engine, memory_id: str, by: str) -> dict[str, Any]:
    """Forget ``memory_id`` by its id, or every row of its owner (by subject)."""
    target: dict[str, Any] = ({"memory_id": memory_id, "subject": None} if by == "id"
                              else {"memory_id": None, "subject": {"user_id": OWNER}})
    with engine.begin() as conn:
        out: dict[str, Any] = lifecycle.forget(conn, **target, reason=None, tombstone=True, now=NOW,
                                               actor="daemon-b", max_attempts=5)
    return out
