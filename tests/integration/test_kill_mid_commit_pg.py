"""kill -9 while a batched commit is in flight on PostgreSQL: the batch is all or nothing, every
acknowledged write is there once, no audit lane stays held, and the log verifies; a daemon
restarted on the same data dir and database then writes on.

Two moments: with the batch's transaction open before its COMMIT was sent (held on an
identity lock the test takes: rolled back), and with the whole batch and its COMMIT sent in
the pipeline (held by a trigger inside the INSERT: the server commits it, unacknowledged).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import text

from memoryd.service.client import Client, ClientError, NotRunning
from memoryd.store import audit
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.memories import content_hash, lock_name
from memoryd.store.postgres.backend import identity_key
from tests.integration.harness import DaemonHandle, wait_until

pytestmark = pytest.mark.postgres

HOLD = "hold this batch open"


def _writer(daemon: DaemonHandle, n: int, acked: list[tuple[str, str]], stop: threading.Event,
            lock: threading.Lock) -> None:
    with Client(daemon.socket, timeout_s=60) as client:
        i = 0
        while not stop.is_set():
            content = f"writer {n} note {i} before and during the kill"
            try:
                result = client.call("memory.write", {"content": content, "agent_id": f"w{n}"})
            except (OSError, ValueError, ClientError, NotRunning):  # killed mid-request, or between two
                return
            with lock:
                acked.append((result["id"], content))
            i += 1
            time.sleep(0.005)


Writers = tuple[list[tuple[str, str]], threading.Event, list[threading.Thread]]


def _start_writers(daemon: DaemonHandle) -> Writers:
    acked: list[tuple[str, str]] = []
    lock, stop = threading.Lock(), threading.Event()
    threads = [threading.Thread(target=_writer, args=(daemon, n, acked, stop, lock), daemon=True)
               for n in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: len(acked) >= 100, timeout_s=60, message="100 acknowledged writes")
    return acked, stop, threads


def _check_after_kill(daemon: DaemonHandle, pg_url: str, acked: list[tuple[str, str]]) -> dict[str, str]:
    """Every acknowledged write is there once; every stored row has its event (the batches were
    all or nothing); the log verifies; no lane is left held. Returns the stored rows."""
    stored = dict(daemon.query("SELECT id, content FROM memories"))
    assert len(acked) >= 100
    assert all(stored.get(mid) == content for mid, content in acked), "an acknowledged write is missing"
    assert daemon.scalar("SELECT count(*) FROM audit_events WHERE action = 'memory.write'") == len(stored)
    engine = create_store_engine(pg_url)
    try:
        with read_only(engine) as conn:
            verdict = audit.check(conn)
        assert verdict.ok, verdict.problems
        # No lane is left held: a new transaction takes lane 0 at once (SKIP LOCKED would pass a
        # held lane by).
        with engine.begin() as conn:
            lane = conn.execute(text("SELECT lane FROM audit_lanes ORDER BY lane LIMIT 1 "
                                     "FOR UPDATE SKIP LOCKED")).scalar()
        assert lane == 0
    finally:
        engine.dispose()
    return stored


def _restart_and_write_on(daemon: DaemonHandle, stored: int) -> None:
    daemon.start()  # same data dir and database
    for i in range(20):
        daemon.write(f"after the restart {i}", agent_id="later")
    result = daemon.call("audit.verify", admin=True)
    assert result["ok"], result
    assert daemon.scalar("SELECT count(*) FROM memories") == stored + 20


@pytest.mark.slow
def test_a_daemon_killed_with_a_batch_open_before_its_commit_rolls_it_back(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    """The batch holding HOLD waits on HOLD's identity lock (taken here), in its first round
    trip, when the daemon is killed: its COMMIT was never sent, and nothing of it is stored."""
    daemon = start_daemon(db_url=pg_url, config={"pg_writers": 2})
    acked, stop, threads = _start_writers(daemon)
    key = identity_key(lock_name("agent", "holder", content_hash(HOLD)))
    with daemon.db() as blocker:
        blocker.execute("SELECT pg_advisory_lock(?)", (key,))
        held = threading.Thread(target=lambda: _hold(daemon), daemon=True)
        held.start()
        wait_until(lambda: _waiting_on_advisory(daemon) == 1, timeout_s=30,
                   message="a batch waiting on HOLD's identity lock")
        daemon.kill()  # SIGKILL: the held batch's transaction is open, other writers mid-request
        stop.set()
        for t in threads:
            t.join(30)
        blocker.execute("SELECT pg_advisory_unlock(?)", (key,))
    # The killed daemon's backend runs what it was sent, waits for the rest, finds its client
    # gone and rolls back.
    wait_until(lambda: _waiting_on_advisory(daemon) == 0, timeout_s=30, message="the held backend to end")
    assert daemon.scalar("SELECT count(*) FROM memories WHERE content = ?", (HOLD,)) == 0
    stored = _check_after_kill(daemon, pg_url, acked)
    _restart_and_write_on(daemon, len(stored))


@pytest.mark.slow
def test_a_daemon_killed_after_a_batch_was_sent_whole_leaves_it_all_or_nothing(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    """A trigger holds HOLD's batch inside its multi-row INSERT, its COMMIT already queued
    behind it in the pipeline, when the daemon is killed: the server finishes the batch
    (committed, unacknowledged) and it is whole: rows, events, jobs."""
    daemon = start_daemon(db_url=pg_url, config={"pg_writers": 2})
    acked, stop, threads = _start_writers(daemon)
    with daemon.db() as conn:
        conn.execute("CREATE FUNCTION hold_batch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                     f"IF NEW.content = '{HOLD}' THEN PERFORM pg_sleep(4); END IF; RETURN NULL; END $$")
        conn.execute("CREATE TRIGGER hold_batch AFTER INSERT ON memories FOR EACH ROW "
                     "EXECUTE FUNCTION hold_batch()")
    held = threading.Thread(target=lambda: _hold(daemon), daemon=True)
    held.start()
    wait_until(lambda: _sleeping(daemon) == 1, timeout_s=30, message="a batch held inside its INSERT")
    daemon.kill()
    stop.set()
    for t in threads:
        t.join(30)
    wait_until(lambda: _sleeping(daemon) == 0, timeout_s=30, message="the held backend to end")
    with daemon.db() as conn:
        conn.execute("DROP TRIGGER hold_batch ON memories")
    stored = _check_after_kill(daemon, pg_url, acked)
    [hold_id] = [mid for mid, content in stored.items() if content == HOLD]
    assert daemon.scalar("SELECT count(*) FROM jobs WHERE target = ?", (hold_id,)) >= 1
    _restart_and_write_on(daemon, len(stored))


def _waiting_on_advisory(daemon: DaemonHandle) -> int:
    return int(daemon.scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"))


def _sleeping(daemon: DaemonHandle) -> int:
    return int(daemon.scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"))


def _hold(daemon: DaemonHandle) -> None:
    try:
        with Client(daemon.socket, timeout_s=60) as client:
            client.call("memory.write", {"content": HOLD, "agent_id": "holder"})
    except (OSError, ValueError, ClientError):
        pass  # killed before the answer: that is the point
