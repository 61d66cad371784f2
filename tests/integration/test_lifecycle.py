"""The daemon's life seen from outside: SIGTERM, a model set to none, and the status command."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memoryd.service.client import Client, ClientError
from tests.integration.harness import (
    DaemonHandle,
    RawConnection,
    hermetic_env,
    hold_write_lock,
    run_cli,
)


def test_sigterm_exits_zero_and_removes_both_socket_files(daemon: DaemonHandle) -> None:
    written = daemon.write("written just before shutdown")
    with RawConnection(daemon.socket) as idle:  # an open, silent client must not hold up shutdown
        idle.request("daemon.ping", req_id=1)
        assert idle.read()["id"] == 1
        assert daemon.stop() == 0  # stop() fails the test if the exit takes over 30 s
    assert not daemon.socket.exists()
    assert not daemon.admin_socket.exists()
    # What was acknowledged before the signal is there after a restart.
    daemon.start()
    assert daemon.call("memory.get", {"id": written["id"]})["content"] == "written just before shutdown"


@pytest.mark.sqlite_only("the write waits out SQLite's busy timeout (busy_timeout_ms) on the file's "
                         "write lock and is answered 1003; PostgreSQL has no such setting")
def test_sigterm_while_a_write_waits_on_a_locked_store_answers_it_and_exits_zero(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config={"busy_timeout_ms": 6000})
    kept = daemon.write("written before the store was locked")
    outcome: dict[str, object] = {}

    def blocked_write() -> None:
        try:
            with Client(daemon.socket, timeout_s=60) as c:
                outcome["result"] = c.call("memory.write", {"content": "waiting on the lock at shutdown",
                                                            "agent_id": "agent-a"})
        except ClientError as exc:
            outcome["code"] = exc.code
        except OSError as exc:
            outcome["dropped"] = repr(exc)

    with hold_write_lock(daemon.db_path):
        writer = threading.Thread(target=blocked_write)
        writer.start()
        # Nothing reports "a commit is waiting on the lock"; the write reaches the committer within
        # milliseconds and then waits up to the 6 s busy timeout, so a short pause lands the signal there.
        time.sleep(1.0)
        assert not outcome, outcome
        assert daemon.stop() == 0  # within 30 s, with the lock still held by another process
        writer.join(60)
    assert outcome.get("code") == 1003, outcome  # answered, not dropped, and nothing written
    assert daemon.count_content("waiting on the lock at shutdown") == 0
    daemon.start()
    assert daemon.call("memory.get", {"id": kept["id"]})["status"] == "active"


def test_embed_jobs_stay_queued_and_status_says_why_when_embedder_is_none(daemon: DaemonHandle) -> None:
    ids = [daemon.write(f"queued for an embedder that is off, number {i}")["id"] for i in range(3)]
    status = daemon.call("daemon.status")
    assert status["health"] == "healthy"  # none is a choice, not a fault
    embed_queue = status["queues"]["embed"]
    assert (embed_queue["ready"], embed_queue["leased"], embed_queue["dead"]) == (3, 0, 0)
    assert status["passes"]["embed"]["state"] == "paused"
    assert "none" in status["passes"]["embed"]["reason"]
    assert status["passes"]["embed"]["processed_total"] == 0
    for memory_id in ids:
        assert "embed" in daemon.call("memory.get", {"id": memory_id})["pending"]
    assert daemon.scalar("SELECT count(*) FROM memory_vectors") == 0

    # The jobs are durable: a restart finds them still queued, not dropped.
    assert daemon.stop() == 0
    daemon.start()
    assert daemon.call("daemon.status")["queues"]["embed"]["ready"] == 3
    assert daemon.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed' AND state = 'ready'") == 3


def test_status_command_exits_zero_when_the_daemon_is_healthy(daemon: DaemonHandle) -> None:
    daemon.write("something to count")
    shown = run_cli(["status", "--socket", str(daemon.socket)], daemon.env)
    assert shown.returncode == 0, shown.stderr
    assert str(daemon.proc.pid) in shown.stdout  # type: ignore[union-attr]
    as_json = run_cli(["status", "--json", "--socket", str(daemon.socket)], daemon.env)
    assert as_json.returncode == 0, as_json.stderr
    parsed = json.loads(as_json.stdout)
    assert parsed["health"] == "healthy"
    assert parsed["memories"]["active"] == 1


@pytest.mark.parametrize("leftover", ["no-file", "stale-file"])
def test_status_command_exits_three_saying_not_running_when_no_daemon_answers(
        short_tmp: Path, leftover: str, start_daemon: Callable[..., DaemonHandle]) -> None:
    path = short_tmp / "s" / "memoryd.sock"
    path.parent.mkdir(mode=0o700)
    if leftover == "stale-file":
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(str(path))
        dead.close()
    env = hermetic_env(short_tmp)
    shown = run_cli(["status", "--socket", str(path)], env)
    assert shown.returncode == 3, shown.stdout + shown.stderr
    assert "memoryd is not running" in shown.stderr
    assert "memoryd run" in shown.stderr  # says how to start it

    # Positive control: the same command against a daemon on that very path exits 0.
    start_daemon(socket=path)
    assert run_cli(["status", "--socket", str(path)], env).returncode == 0
