"""PostgreSQL's lock_timeout and statement_timeout bound a daemon's waits (pg_lock_timeout_ms,
pg_statement_timeout_ms), as busy_timeout_ms bounds them on SQLite.

Another connection holds a table lock, as a stuck migration, a long manual
transaction or another daemon could: a write answers 1003 instead of waiting
for ever, a read cancelled by the statement timeout answers 1003 too, and a
pass whose statement hit the lock timeout gives its job back (ready, the
attempt uncounted, never dead), and does it once the lock is gone. A real
daemon on the session's embedded PostgreSQL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memoryd.service.client import Client, ClientError
from tests.integration.harness import DaemonHandle, pg_connection, wait_until

pytestmark = pytest.mark.postgres

#: A hang guard for one call: without the timeouts the write below waits as long as the lock.
CALL_TIMEOUT_S = 30.0


@contextlib.contextmanager
def hold_table_lock(daemon: DaemonHandle, table: str, mode: str) -> Iterator[None]:
    assert daemon.db_url is not None
    with pg_connection(daemon.db_url) as pg:
        pg.execute("BEGIN")
        pg.execute(f"LOCK TABLE {table} IN {mode} MODE")
        try:
            yield
        finally:
            pg.execute("ROLLBACK")


def _call(daemon: DaemonHandle, method: str, params: dict[str, Any]) -> Any:
    with Client(daemon.socket, timeout_s=CALL_TIMEOUT_S) as client:
        return client.call(method, params)


def test_a_write_waiting_on_a_lock_past_the_lock_timeout_answers_1003_and_leaves_nothing(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    daemon = start_daemon(db_url=pg_url, config={"pg_lock_timeout_ms": 300})
    before = _call(daemon, "memory.write", {"content": "written before the lock", "agent_id": "a1"})
    # Every mutation appends an audit event: with the log's table locked, no write can commit.
    with hold_table_lock(daemon, "audit_events", "EXCLUSIVE"), pytest.raises(ClientError) as info:
        _call(daemon, "memory.write", {"content": "written while the audit log is locked", "agent_id": "a1"})
    assert info.value.code == 1003
    assert "lock timeout" in info.value.message
    assert daemon.count_content("written while the audit log is locked") == 0
    after = _call(daemon, "memory.write", {"content": "written after the lock", "agent_id": "a1"})
    for ack in (before, after):  # positive controls on the same daemon
        assert _call(daemon, "memory.get", {"id": ack["id"]})["status"] == "active"
    daemon.assert_alive()


def test_a_read_past_the_statement_timeout_answers_1003(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    daemon = start_daemon(db_url=pg_url, config={"pg_lock_timeout_ms": 10000, "pg_statement_timeout_ms": 400})
    _call(daemon, "memory.write", {"content": "the deploy runs on Tuesdays", "agent_id": "a1"})
    search = {"query": "deploy Tuesdays", "agent_id": "a1", "mode": "lexical"}
    # ACCESS EXCLUSIVE stops reads too; the lock timeout (10 s) is longer than the statement's.
    with hold_table_lock(daemon, "memories", "ACCESS EXCLUSIVE"), pytest.raises(ClientError) as info:
        _call(daemon, "memory.search", search)
    assert info.value.code == 1003
    assert "statement timeout" in info.value.message
    assert [r["content"] for r in _call(daemon, "memory.search", search)["results"]] == [
        "the deploy runs on Tuesdays"]
    daemon.assert_alive()


def _decay_jobs(daemon: DaemonHandle) -> list[tuple[int, str, int]]:
    return [(int(i), str(s), int(a)) for i, s, a in
            daemon.query("SELECT id, state, attempts FROM jobs WHERE pass = 'decay' ORDER BY id")]


def test_a_pass_whose_statement_hits_the_lock_timeout_gives_its_job_back_and_runs_it_later(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    # Decay runs every second and writes an audit event per batch.
    daemon = start_daemon(db_url=pg_url, config={"pg_lock_timeout_ms": 300, "decay_interval_s": 1.0,
                                                 "tick_interval_s": 1.0, "backoff_base_s": 0.5})
    _call(daemon, "memory.write", {"content": "a row for decay to touch", "agent_id": "a1"})
    with hold_table_lock(daemon, "audit_events", "EXCLUSIVE"):
        def given_back() -> list[int]:
            """Decay jobs back in the queue uncharged (a job's attempts count its claims, and a
            job given back has its claim undone), once decay reported the lock timeout."""
            error = daemon.call("daemon.status")["passes"]["decay"].get("last_error") or ""
            jobs = _decay_jobs(daemon)
            return [i for i, state, attempts in jobs if state == "ready" and attempts == 0] \
                if "lock timeout" in error else []

        waiting = wait_until(given_back, timeout_s=60, message="decay to give its job back")
        assert all(state != "dead" for _, state, _ in _decay_jobs(daemon))
    waiting_id = max(waiting)
    wait_until(lambda: dict((i, s) for i, s, _ in _decay_jobs(daemon)).get(waiting_id) == "done",
               timeout_s=60, message="the given-back decay job to run once the lock is gone")
    assert all(state != "dead" for _, state, _ in _decay_jobs(daemon))
    daemon.assert_alive()


def test_a_pass_cancelled_by_the_statement_timeout_is_retried_not_dead(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    # Decay reads the memories it decays; with the table locked against reads, its statement
    # runs into the statement timeout (the lock timeout is longer): a failed attempt, retried.
    daemon = start_daemon(db_url=pg_url, config={"pg_lock_timeout_ms": 10000, "pg_statement_timeout_ms": 300,
                                                 "decay_interval_s": 1.0, "tick_interval_s": 1.0,
                                                 "backoff_base_s": 0.5, "job_max_attempts": 5})
    _call(daemon, "memory.write", {"content": "a row for decay to read", "agent_id": "a1"})
    with hold_table_lock(daemon, "memories", "ACCESS EXCLUSIVE"):
        def charged() -> list[int]:
            """Decay jobs back in the queue with the attempt counted and the cause recorded
            (daemon.status reads memories too, so it is asked nothing while they are locked)."""
            rows = daemon.query("SELECT id, attempts, last_error FROM jobs WHERE pass = 'decay' "
                                "AND state = 'ready'")
            return [int(i) for i, attempts, error in rows
                    if int(attempts) >= 1 and "statement timeout" in (error or "")]

        waiting = wait_until(charged, timeout_s=60, message="decay to fail an attempt on the timeout")
        assert all(state != "dead" for _, state, _ in _decay_jobs(daemon))
    waiting_id = max(waiting)
    wait_until(lambda: dict((i, s) for i, s, _ in _decay_jobs(daemon)).get(waiting_id) == "done",
               timeout_s=60, message="the retried decay job to run once the lock is gone")
    daemon.assert_alive()
