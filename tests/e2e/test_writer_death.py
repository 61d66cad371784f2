"""The group committer's writer thread dies inside a live ``memoryd run``.

The fault comes from writer_fault.py (an asynchronous exception raised in the
unmodified writer thread; see there why no request can cause it). What is
tested is the daemon's own answer, as docs/protocol.md and docs/operations.md
state it: writes fail with 1003 at once, nothing is written, ``daemon.status``
is ``degraded`` with ``write_queue.writer = "stopped"`` and a problem line that
says to restart, ``memoryd status`` exits 1, reads still work, and SIGTERM still
stops the daemon cleanly (the fixture expects exit 0).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from memoryd.client import ClientError
from tests.e2e.conftest import E2EDaemon
from tests.e2e.helpers import error_of, get
from tests.integration.harness import run_cli, wait_until

WRITER_FAULT = Path(__file__).with_name("writer_fault.py")


def test_a_dead_writer_thread_fails_writes_with_1003_and_turns_the_daemon_degraded(
        start_e2e: Callable[..., E2EDaemon], short_tmp: Path) -> None:
    trigger = short_tmp / "kill-writer"
    # One writer thread: on PostgreSQL the committer runs pg_writers (3) of them, and the fault
    # kills one, after which the next write may go to another (the test below covers that).
    d = start_e2e("writer", launcher=[str(WRITER_FAULT), str(trigger)], config={"pg_writers": 1})
    kept = d.write("The release branch is cut every second Tuesday", agent_id="e2e-writer")["id"]
    before = d.call("daemon.status")
    assert (before["health"], before["write_queue"]["writer"]) == ("healthy", "running")  # control

    trigger.touch()
    done = trigger.with_name(trigger.name + ".done")
    wait_until(done.exists, timeout_s=10, message="the fault to be raised in the writer thread")
    assert done.read_text(encoding="utf-8") == "1", "the writer thread was not found"

    # The next write wakes the thread, which dies; that write is answered, not stranded.
    first = error_of(d, "memory.write", {"content": "Staging deploys freeze at 16:00 on Fridays",
                                         "agent_id": "e2e-writer"})
    assert first.code == 1003, first
    assert "writer thread stopped" in first.message and "restart memoryd" in first.message, first.message
    # Every write after it fails at once, single or many.
    later = error_of(d, "memory.write", {"content": "The on-call rota lives in ops/rota.md",
                                         "agent_id": "e2e-writer"})
    assert later.code == 1003
    many = error_of(d, "memory.write_many",
                    {"items": [{"content": "One more note", "agent_id": "e2e-writer"}]})
    assert many.code == 1003
    assert d.scalar("SELECT count(*) FROM memories") == 1, "nothing was written"

    status = d.call("daemon.status")
    assert status["health"] == "degraded"
    assert status["write_queue"]["writer"] == "stopped"
    stopped = [p for p in status["problems"] if p.startswith("the writer thread stopped (")]
    assert len(stopped) == 1, status["problems"]
    assert "InjectedWriterFault" in stopped[0]
    assert stopped[0].endswith("writes fail with 1003; restart memoryd")
    # Reads do not need the writer.
    assert get(d, kept)["content"] == "The release branch is cut every second Tuesday"
    found = d.call("memory.search", {"query": "release branch", "mode": "lexical", "agent_id": "e2e-writer"})
    assert [r["id"] for r in found["results"]] == [kept]

    shown = run_cli(["status", "--socket", str(d.socket)], d.env)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert "degraded" in shown.stdout
    assert "the writer thread stopped" in shown.stdout
    assert '"event": "commit.writer_crashed"' in d.stderr_text()


def test_one_writer_dying_among_several_turns_every_later_write_away(
        start_e2e: Callable[..., E2EDaemon], short_tmp: Path) -> None:
    """Three writer threads on PostgreSQL (one on SQLite); the fault kills the first. Writes the
    live ones take before it wakes are stored; from the dead one's first batch on, every write
    fails with 1003 (the daemon is degraded as a whole, not left writing on two threads of
    three), and each write answered with an id is stored exactly once."""
    trigger = short_tmp / "kill-writer"
    d = start_e2e("writers", launcher=[str(WRITER_FAULT), str(trigger)], config={"pg_writers": 3})
    acked = [d.write(f"Control note {i} before the fault", agent_id="e2e-writers")["id"] for i in range(3)]
    trigger.touch()
    done = trigger.with_name(trigger.name + ".done")
    wait_until(done.exists, timeout_s=10, message="the fault to be raised in the first writer thread")
    assert done.read_text(encoding="utf-8") == "1"

    refused = None
    for i in range(60):  # each write wakes one waiting writer; the dead one's turn comes soon
        try:
            acked.append(d.call("memory.write", {"content": f"Note {i} after the fault",
                                                 "agent_id": "e2e-writers"})["id"])
        except ClientError as exc:
            refused = exc
            break
    assert refused is not None, "60 writes went through: the dead writer never took a batch"
    assert refused.code == 1003 and "writer thread stopped" in refused.message, refused
    for _ in range(5):  # every later write is refused at once, whichever thread is free
        assert error_of(d, "memory.write", {"content": "One note too many",
                                            "agent_id": "e2e-writers"}).code == 1003
    stored = dict(d.query("SELECT id, count(*) FROM memories GROUP BY id"))
    assert sorted(stored) == sorted(acked) and set(stored.values()) == {1}
    status = d.call("daemon.status")
    assert (status["health"], status["write_queue"]["writer"]) == ("degraded", "stopped")
