"""A turn the daemon refuses is refused the same way live and from the spool, and alone.

A transcript turn holding U+0000 is refused on the socket (PostgreSQL cannot store it, so no
backend may). It must be refused too when the daemon was down and replays the spool at start
(the replay once skipped the socket's NUL check and stored it, and the stored row then broke
`memoryd import`), and in both cases the batch's other turns are written and the count the
hook reports is the count stored. Real daemons, both backends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from memoryd.editors.capture import spool as capture_spool
from memoryd.editors.capture.transcript import ROOTS_ENV
from tests.editors.test_capture_bounds import SESSION, entry
from tests.integration.harness import DaemonHandle, wait_until

TURNS = ["the first turn, fine", "the second turn holds a NUL \x00 here", "the third turn, fine"]


def _transcript(root: Path) -> Path:
    folder = root / "projects"
    folder.mkdir()
    path = folder / f"{SESSION}.jsonl"
    path.write_text("".join(entry(n, text, "user" if n % 2 == 0 else "assistant") + "\n"
                            for n, text in enumerate(TURNS)))
    return path


def _hook(daemon: DaemonHandle, transcript: Path) -> subprocess.CompletedProcess[str]:
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket), "MEMORYD_DATA_DIR": str(daemon.data_dir),
           ROOTS_ENV: str(transcript.parent)}
    payload = {"hook_event_name": "Stop", "session_id": SESSION, "cwd": str(transcript.parent),
               "transcript_path": str(transcript)}
    return subprocess.run([sys.executable, "-m", "memoryd", "capture", "claude-code", "--verbose", "--scope",
                           "user", "--user-id", "dev1", "--budget-ms", "10000"], input=json.dumps(payload),
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def _stored(daemon: DaemonHandle) -> list[str]:
    return sorted(r[0] for r in daemon.query("SELECT content FROM memories WHERE kind = 'conversation'"))


def test_live_a_refused_turn_is_skipped_alone_and_the_count_is_what_was_stored(
        daemon: DaemonHandle, short_tmp: Path) -> None:
    done = _hook(daemon, _transcript(short_tmp))
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert done.stderr.startswith("capture: sent 2 refused 1: turn 1:"), done.stderr
    assert "NUL" in done.stderr and "(error -32602)" in done.stderr
    assert _stored(daemon) == [TURNS[0], TURNS[2]]


def test_replayed_from_the_spool_the_same_turn_is_refused_and_the_others_are_written(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    daemon = start_daemon()
    assert daemon.stop() == 0
    done = _hook(daemon, _transcript(short_tmp))
    assert done.stderr.startswith("capture: spooled 3"), done.stderr
    folder = capture_spool.spool_dir(daemon.data_dir)
    assert len(capture_spool.pending(folder)) == 1

    daemon.start()  # replays the spool before the sockets open
    wait_until(lambda: capture_spool.pending(folder) == [], timeout_s=30, message="the spool to empty")
    assert _stored(daemon) == [TURNS[0], TURNS[2]]
    assert daemon.scalar("SELECT count(*) FROM memories") == 2
    # The refusal is in the daemon's log, with the code and field the socket would have given.
    refusals = [json.loads(line) for line in daemon.stderr_text().splitlines()
                if "capture.spool_item_refused" in line]
    assert [(r["code"], "content" in r["error"]) for r in refusals] == [(-32602, True)]


def test_a_turn_under_a_tombstone_is_skipped_alone_when_the_batch_is_refused_without_an_index(
        daemon: DaemonHandle, short_tmp: Path) -> None:
    # The forgotten text's tombstone refuses the whole write_many without naming the item, so
    # the hook writes the batch one turn at a time: the count is still the count stored.
    clean = "the second turn, forgotten before the hook ran"
    forgotten = daemon.call("memory.write", {"content": clean, "scope": "user", "user_id": "dev1"})["id"]
    daemon.call("memory.forget", {"id": forgotten})
    transcript = _transcript(short_tmp)
    transcript.write_text("".join(entry(n, text, "user" if n % 2 == 0 else "assistant") + "\n"
                                  for n, text in enumerate([TURNS[0], clean, TURNS[2]])))
    done = _hook(daemon, transcript)
    assert done.stderr.startswith("capture: sent 2 refused 1: turn 1:"), done.stderr
    assert _stored(daemon) == [TURNS[0], TURNS[2]]
