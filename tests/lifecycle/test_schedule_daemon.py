"""The time-driven passes run from the daemon's own schedule (short intervals, real clock, polled)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.integration.harness import DaemonHandle, wait_until
from tests.lifecycle.helpers import error_of, get, wait_status

FAST_SCHEDULE: dict[str, Any] = {
    "retention_interval_s": 1, "decay_interval_s": 1, "tick_interval_s": 1, "session_ttl_s": 2,
    "governor_enabled": False,
}


def _pass_stats(daemon: DaemonHandle, name: str) -> dict[str, Any]:
    stats: dict[str, Any] = daemon.call("daemon.status")["passes"][name]
    return stats


def test_retention_and_decay_run_from_the_schedule_and_archive_session_rows(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=FAST_SCHEDULE)
    session = daemon.write("We are bisecting the memory leak in the parser", scope="session",
                           session_id="sess-1")
    agent = daemon.write("The parser lives in src/parse.py", agent_id="agent-a")

    archived = wait_status(daemon, session["id"], "archived")

    assert archived["retired_at"] is not None
    assert archived["content"] == "We are bisecting the memory leak in the parser"
    assert get(daemon, agent["id"])["status"] == "active"  # positive control: not a session row
    wait_until(lambda: _pass_stats(daemon, "retention")["processed_total"] > 0, message="retention to run")
    wait_until(lambda: _pass_stats(daemon, "decay")["processed_total"] > 0, message="decay to run")
    assert _pass_stats(daemon, "retention")["errors_total"] == 0
    assert _pass_stats(daemon, "decay")["errors_total"] == 0
    assert daemon.scalar("SELECT count(*) FROM audit_events WHERE action = 'memory.expire' AND memory_id = ?",
                         (session["id"],)) == 1
    # Time-driven passes never show as pending on a memory (embed does: the embedder is off).
    pending = get(daemon, agent["id"])["pending"]
    assert "embed" in pending
    assert "retention" not in pending and "decay" not in pending


def test_archived_rows_are_purged_by_the_schedule_and_then_read_as_not_found(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config={**FAST_SCHEDULE, "session_ttl_s": 1, "archive_window_s": 1})
    session = daemon.write("A throwaway note for this session", scope="session", session_id="sess-2")
    agent = daemon.write("A note that outlives the session", agent_id="agent-a")

    wait_until(lambda: daemon.scalar("SELECT count(*) FROM memories WHERE id = ?", (session["id"],)) == 0,
               timeout_s=30, message="the archived session row to be purged")

    assert error_of(daemon, "memory.get", {"id": session["id"]}).code == 1002
    assert daemon.scalar("SELECT count(*) FROM audit_events WHERE action = 'memory.purge' AND memory_id = ?",
                         (session["id"],)) == 1
    assert get(daemon, agent["id"])["status"] == "active"
