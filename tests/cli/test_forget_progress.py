"""`memoryd forget --subject`: an owner with more rows than one batch is forgotten batch by
batch on the operator socket, with progress on a terminal, while writes go on being answered."""

from __future__ import annotations

import json
import re
import threading
import time

from tests.cli.conftest import MEMORYD, Cli
from tests.cli.test_status import on_a_terminal, read_for
from tests.integration.harness import DaemonHandle

ROWS = 1_200  # more than two batches of 500 (cli.py's _forget_subject)


def _seed(daemon: DaemonHandle, user: str, n: int) -> None:
    for start in range(0, n, 200):
        items = [{"content": f"{user}'s note {i} about the deploy", "scope": "user", "user_id": user}
                 for i in range(start, min(n, start + 200))]
        daemon.call("memory.write_many", {"items": items})


def test_forget_by_subject_goes_batch_by_batch_with_progress_on_a_terminal(
        daemon: DaemonHandle, cli: Cli) -> None:
    _seed(daemon, "carol", ROWS)
    keep = daemon.call("memory.write", {"content": "dave's own note", "scope": "user", "user_id": "dave"})
    with on_a_terminal([str(MEMORYD), "forget", "--subject", "user_id=carol"], cli.env) as (proc, tty):
        shown = b""
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            shown += read_for(tty, 0.5)
        shown += read_for(tty, 0.5)
    text = shown.decode(errors="replace")
    assert proc.returncode == 0, text
    # One progress line per batch of 500, redrawn in place, then the summary.
    marked = [(int(a), int(b)) for a, b in re.findall(r"forgetting: (\d+)/(\d+) rows marked", text)]
    assert marked == [(500, ROWS), (1000, ROWS), (ROWS, ROWS)], text
    assert f": {ROWS} memory(ies) now deleting" in text, text
    assert daemon.scalar("SELECT count(*) FROM memories WHERE status IN ('deleting', 'forgotten')") == ROWS
    assert daemon.scalar("SELECT count(*) FROM memories WHERE user_id = ? "
                         "AND status NOT IN ('deleting', 'forgotten')", ("carol",)) == 0
    assert daemon.call("memory.get", {"id": keep["id"]})["status"] == "active"


def test_writes_are_answered_while_a_large_forget_by_subject_runs(daemon: DaemonHandle, cli: Cli) -> None:
    """The forget's batches go through the writer one at a time: another client's writes are
    answered between them, none refused or timed out."""
    _seed(daemon, "erin", ROWS)
    answered: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            with daemon.client() as conn:
                i = 0
                while not stop.is_set():
                    out = conn.call("memory.write", {"content": f"frank's note {i}", "agent_id": "frank"})
                    answered.append(out["id"])
                    i += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        done = cli("forget", "--subject", "user_id=erin", "--json")
    finally:
        stop.set()
        thread.join(30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["matched"] == ROWS
    assert not errors, errors
    assert answered, "no write was answered while the forget ran"
    assert daemon.scalar("SELECT count(*) FROM memories WHERE agent_id = 'frank'") == len(answered)
