"""Store-side refusals over the real socket: 1003 locked, 1004 overloaded, 1006 tombstone, 1007 conflict.

Each refusal must leave nothing behind (no row, no audit event, no job), and a
positive control in the same test shows the same daemon writing normally.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from memoryd.service.client import Client, ClientError
from memoryd.store.engine import create_store_engine
from memoryd.store.memories import add_tombstone, content_hash
from tests.integration.harness import DaemonHandle, hold_memories_lock, hold_write_lock, wait_until


def _table_counts(daemon: DaemonHandle) -> tuple[int, int, int]:
    """(memories, write audit events, embed jobs): every new memory adds exactly one of each."""
    return (daemon.scalar("SELECT count(*) FROM memories"),
            daemon.scalar("SELECT count(*) FROM audit_events WHERE action = 'memory.write'"),
            daemon.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed'"))


# -- 1003 -------------------------------------------------------------------------------------

@pytest.mark.sqlite_only("busy_timeout_ms is SQLite's busy timeout (config.py), the wait this test "
                         "runs out on the file's write lock; PostgreSQL has no such setting")
def test_write_locked_past_busy_timeout_is_store_unavailable_and_leaves_nothing(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config={"busy_timeout_ms": 300})
    before = daemon.write("written before the lock was taken")
    assert _table_counts(daemon) == (1, 1, 1)

    with hold_write_lock(daemon.db_path), pytest.raises(ClientError) as info:
        daemon.write("written while another process holds the write lock")
    assert info.value.code == 1003
    daemon.assert_alive()

    after = daemon.write("written after the lock was released")
    assert daemon.count_content("written while another process holds the write lock") == 0
    assert _table_counts(daemon) == (2, 2, 2)
    for ack in (before, after):
        assert daemon.call("memory.get", {"id": ack["id"]})["status"] == "active"


# -- 1004 -------------------------------------------------------------------------------------

def test_writes_beyond_write_queue_max_are_overloaded_and_never_stored(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    # A long busy timeout: the writes that got a place wait for the lock instead of failing 1003.
    # One writer thread on PostgreSQL too (pg_writers): the count below is of one stuck batch.
    daemon = start_daemon(config={"write_queue_max": 1, "busy_timeout_ms": 10000, "pg_writers": 1})
    writers = 8
    outcomes: dict[int, tuple[str, Any]] = {}
    done = threading.Lock()

    def write(i: int) -> None:
        try:
            with Client(daemon.socket, timeout_s=60) as c:
                result = c.call("memory.write", {"content": f"queued write number {i}",
                                                 "agent_id": "agent-a"})
            outcome: tuple[str, Any] = ("ok", result["id"])
        except ClientError as exc:
            outcome = ("error", exc.code)
        with done:
            outcomes[i] = outcome

    with hold_memories_lock(daemon):
        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        # The committer's stuck batch holds the first write (and the one queued behind it, if
        # that arrived before the batch was cut), and at most one more waits in the queue of 1;
        # every other write must have been answered already, while the lock is still held.
        wait_until(lambda: len(outcomes) >= writers - 3, timeout_s=25,
                   message="the writes beyond the queue to be answered")
        answered_under_lock = dict(outcomes)
    for t in threads:
        t.join(60)

    assert len(outcomes) == writers
    assert all(kind == "error" and code == 1004 for kind, code in answered_under_lock.values())
    overloaded = [i for i, (kind, _) in outcomes.items() if kind == "error"]
    accepted = {i: mid for i, (kind, mid) in outcomes.items() if kind == "ok"}
    assert all(outcomes[i][1] == 1004 for i in overloaded)
    assert overloaded, "no write was refused with 1004"
    assert accepted, "no write got through once the lock was released"
    for i in overloaded:
        assert daemon.count_content(f"queued write number {i}") == 0
    for i, mid in accepted.items():
        assert daemon.call("memory.get", {"id": mid})["content"] == f"queued write number {i}"
    assert _table_counts(daemon) == (len(accepted),) * 3
    daemon.assert_alive()


# -- 1006 -------------------------------------------------------------------------------------

def _lay_tombstone(daemon: DaemonHandle, scope: str, owner: str, content: str) -> None:
    engine = create_store_engine(daemon.store_url)
    try:
        with engine.begin() as conn:
            add_tombstone(conn, scope, owner, content_hash(content), datetime.now(UTC),
                          reason="integration test")
    finally:
        engine.dispose()


def test_write_matching_a_tombstone_is_refused_for_that_owner_only(daemon: DaemonHandle) -> None:
    forgotten = "my home address is 12 Example Street"
    _lay_tombstone(daemon, "agent", "agent-a", forgotten)

    for variant in (forgotten, f"  {forgotten}\n"):  # identity is judged after trimming
        with pytest.raises(ClientError) as info:
            daemon.write(variant, agent_id="agent-a")
        assert info.value.code == 1006
        assert info.value.data.get("field") == "content"
    assert daemon.count_content(forgotten) == 0
    assert _table_counts(daemon) == (0, 0, 0)

    # Positive control: the same content for another owner, and other content for this owner.
    other_owner = daemon.write(forgotten, agent_id="agent-b")
    other_content = daemon.write("my office is on the third floor", agent_id="agent-a")
    assert daemon.call("memory.get", {"id": other_owner["id"]})["agent_id"] == "agent-b"
    assert daemon.call("memory.get", {"id": other_content["id"]})["status"] == "active"
    assert daemon.count_content(forgotten) == 1
    daemon.assert_alive()


# -- 1007 -------------------------------------------------------------------------------------

def test_idempotency_key_reused_with_other_params_is_conflict(daemon: DaemonHandle) -> None:
    first = daemon.write("the release branch is cut on Thursdays", idempotency_key="key-1")
    with pytest.raises(ClientError) as info:
        daemon.write("the release branch is cut on Fridays", idempotency_key="key-1")
    assert info.value.code == 1007
    assert daemon.count_content("the release branch is cut on Fridays") == 0
    kept = daemon.call("memory.get", {"id": first["id"]})
    assert kept["content"] == "the release branch is cut on Thursdays"
    assert _table_counts(daemon) == (1, 1, 1)
    daemon.assert_alive()


def test_idempotency_key_retried_with_same_params_returns_the_first_result(daemon: DaemonHandle) -> None:
    params: dict[str, Any] = {"importance": 0.7, "idempotency_key": "retry-me"}
    first = daemon.write("CI caches pip wheels under ~/.cache/pip", **params)
    again = daemon.write("CI caches pip wheels under ~/.cache/pip", **params)
    assert again == first
    assert "embed" in first["queued"]
    assert _table_counts(daemon) == (1, 1, 1)
    # Positive control: keys are per scope and owner, so another owner's same key writes anew.
    other = daemon.write("CI caches npm under ~/.npm", agent_id="agent-b", idempotency_key="retry-me")
    assert other["id"] != first["id"]
    assert _table_counts(daemon) == (2, 2, 2)
