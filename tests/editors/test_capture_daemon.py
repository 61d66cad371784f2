"""`memoryd capture claude-code` replaying a recorded Claude Code session against a real daemon.

The hook runs as Claude Code runs it: a subprocess with the hook JSON on
stdin, in an environment naming the daemon's socket and data dir. The
transcript grows line by line as the session did, and each hook fires when
it fired (tests/data/claude_code/hooks.json).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memoryd.editors.capture import spool as capture_spool
from memoryd.editors.capture.transcript import ROOTS_ENV
from tests.integration.harness import DaemonHandle, wait_until

DATA = Path(__file__).resolve().parents[1] / "data" / "claude_code"
SESSION = "5f3c2a9e-8b1d-4e7a-9c0f-2d6b8e4a1c37"
#: Generous: these tests are about what is written, not how fast (bench/capture.py is).
BUDGET = ["--budget-ms", "10000"]


class Session:
    """A project checkout and a transcript that grows as the recorded session did."""

    def __init__(self, root: Path):
        self.project = root / "webshop"
        (self.project / ".git").mkdir(parents=True)
        # A repository with no origin is keyed on its real path (docs/projects.md), never on
        # its folder name, which another checkout may share.
        self.key = f"path:{os.path.realpath(self.project)}"
        self.cwd = self.project / "src" / "cart"  # a subdirectory: the project is the git top-level
        self.cwd.mkdir(parents=True)
        self.transcript = root / ".claude" / "projects" / "-home-dev-webshop" / f"{SESSION}.jsonl"
        self.transcript.parent.mkdir(parents=True)
        self.lines = (DATA / "session.jsonl").read_text().splitlines(keepends=True)
        self.hooks: list[dict[str, Any]] = json.loads((DATA / "hooks.json").read_text())

    def grow_to(self, n: int) -> None:
        self.transcript.write_text("".join(self.lines[:n]))

    def payload(self, hook: dict[str, Any]) -> dict[str, Any]:
        return {**hook["payload"], "transcript_path": str(self.transcript), "cwd": str(self.cwd)}


def hook_env(daemon: DaemonHandle) -> dict[str, str]:
    # The sessions' transcripts live under the test's temp dir, beside the daemon's home.
    return {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket), "MEMORYD_DATA_DIR": str(daemon.data_dir),
            ROOTS_ENV: str(daemon.home.parent)}


def run_hook(env: dict[str, str], payload: Any, *args: str) -> subprocess.CompletedProcess[str]:
    stdin = payload if isinstance(payload, str) else json.dumps(payload)
    return subprocess.run([sys.executable, "-m", "memoryd", "capture", "claude-code", *args],
                          input=stdin, env=env, capture_output=True, text=True, timeout=60, check=False)


def replay(session: Session, env: dict[str, str], *args: str) -> None:
    """Fire every recorded hook at its point in the session; each must exit 0 and print nothing."""
    for hook in session.hooks:
        session.grow_to(hook["after_lines"])
        done = run_hook(env, session.payload(hook), *args)
        assert (done.returncode, done.stdout) == (0, ""), done.stderr


def captured(daemon: DaemonHandle) -> list[dict[str, Any]]:
    rows = daemon.query(
        "SELECT content, kind, scope, project, user_id, agent_id, session_id, occurred_at, metadata "
        "FROM memories WHERE kind = 'conversation' ORDER BY seq")
    names = ("content", "kind", "scope", "project", "user_id", "agent_id", "session_id", "occurred_at",
             "metadata")
    found = [dict(zip(names, r, strict=True)) | {"metadata": json.loads(r[-1])} for r in rows]
    # By turn (a row without one, such as a spooled turn, first), then by seq: a stable sort
    # of rows read in seq order.
    return sorted(found, key=lambda row: (row["metadata"].get("turn_index") is not None,
                                          row["metadata"].get("turn_index") or 0))


def expected_rows(session: Session, scope: str = "project",
                  user_id: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for turn in json.loads((DATA / "expected_turns.json").read_text()):
        rows.append({
            "content": turn["content"], "kind": "conversation", "scope": scope, "project": session.key,
            "user_id": user_id, "agent_id": "claude-code", "session_id": SESSION,
            "occurred_at": turn["occurred_at"],
            "metadata": {"source": "claude-code", "role": turn["role"], "turn_index": turn["turn_index"],
                         "transcript_path": str(session.transcript)},
        })
    return rows


def _without_uuid(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for row in rows:
        assert row["metadata"].pop("entry_uuid", "").count("-") == 4  # the transcript entry's uuid
    return rows


def test_recorded_session_is_captured_turn_by_turn_and_a_second_replay_adds_nothing(
        daemon: DaemonHandle, short_tmp: Path) -> None:
    session = Session(short_tmp / "work")
    env = hook_env(daemon)
    replay(session, env, *BUDGET)
    assert _without_uuid(captured(daemon)) == expected_rows(session)

    # An agent corrects the first turn's memory: that row is no longer live, so only the
    # turn's idempotency key (not duplicate detection) can keep a re-delivery from writing it anew.
    listing = daemon.call("memory.list", {"project": session.key, "scope": "project", "limit": 100})
    first = listing["memories"][-1]
    assert first["content"] == expected_rows(session)[0]["content"]
    daemon.call("memory.supersede", {"old_id": first["id"], "content": "Checkout times out above 50 items",
                                     "kind": "fact", "project": session.key})

    # Every event again, with the cursor lost: each turn is delivered again and still written once.
    for state in (daemon.data_dir / "capture" / "claude-code").iterdir():
        state.unlink()
    replay(session, env, *BUDGET)
    assert _without_uuid(captured(daemon)) == expected_rows(session)
    assert daemon.count_content(expected_rows(session)[0]["content"]) == 1
    # The project's listing and search see the turns (the project named from the hook's cwd).
    listed = daemon.call("memory.list", {"project": session.key, "scope": "project", "kind": "conversation",
                                         "limit": 100})["memories"]
    assert len(listed) == 6  # the corrected first turn is superseded
    hits = daemon.call("memory.search", {"query": "when do we deploy checkout changes",
                                         "project": session.key,
                                         "mode": "lexical"})["results"]
    assert hits[0]["content"] == "Thanks. Remember that we deploy checkout changes only on Tuesdays."
    assert hits[0]["occurred_at"] == "2025-06-02T09:19:05.128000Z"


@pytest.mark.slow  # two daemon starts and 16 hook processes (~20 s on a loaded 2-core box)
def test_daemon_down_spools_the_turns_and_the_next_start_writes_them_once(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    daemon = start_daemon()
    assert daemon.stop() == 0
    session = Session(short_tmp / "work")
    env = hook_env(daemon)
    replay(session, env, *BUDGET)

    folder = capture_spool.spool_dir(daemon.data_dir)
    files = capture_spool.pending(folder)
    assert len(files) == 3  # one per hook run that found new turns (the three Stop events)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in files)
    spooled = [item["content"] for f in files for item in capture_spool.read(f)[0]]
    assert len(spooled) == 7
    assert captured(daemon) == []  # nothing reached the store while it was down

    daemon.start()
    assert _without_uuid(captured(daemon)) == expected_rows(session)
    assert capture_spool.pending(folder) == []
    # The same turns again (the editor re-delivers them): still once each.
    for state in (daemon.data_dir / "capture" / "claude-code").iterdir():
        state.unlink()
    replay(session, env, *BUDGET)
    assert len(captured(daemon)) == 7


def test_a_hook_that_reaches_the_daemon_also_sends_what_was_spooled(
        daemon: DaemonHandle, short_tmp: Path) -> None:
    folder = capture_spool.spool_dir(daemon.data_dir)
    capture_spool.append(folder, [{"content": "spooled while the daemon was down", "kind": "conversation",
                                   "scope": "project", "project": "webshop", "session_id": "s0",
                                   "idempotency_key": "claude-code:spooled-0"}])
    session = Session(short_tmp / "work")
    session.grow_to(12)
    stop = next(h for h in session.hooks if h["payload"]["hook_event_name"] == "Stop")
    done = run_hook(hook_env(daemon), session.payload(stop), *BUDGET)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert daemon.count_content("spooled while the daemon was down") == 1
    assert capture_spool.pending(folder) == []
    assert len(captured(daemon)) == 4  # the three new turns and the spooled one


def test_a_running_daemon_writes_what_hooks_spooled_within_a_tick(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    # A hook whose budget ran out before the answer spools its turns while the daemon is up.
    daemon = start_daemon(config={"tick_interval_s": 1.0})
    folder = capture_spool.spool_dir(daemon.data_dir)
    capture_spool.append(folder, [{"content": "spooled while the daemon was slow", "kind": "conversation",
                                   "scope": "project", "project": "webshop", "session_id": "s0",
                                   "idempotency_key": "claude-code:slow-0"}])
    wait_until(lambda: daemon.count_content("spooled while the daemon was slow") == 1, timeout_s=30,
               message="the spooled turn to be written")
    wait_until(lambda: capture_spool.pending(folder) == [], timeout_s=30, message="the spool to empty")
    assert daemon.count_content("spooled while the daemon was slow") == 1


def test_user_scope_writes_the_turns_for_the_user(daemon: DaemonHandle, short_tmp: Path) -> None:
    session = Session(short_tmp / "work")
    replay(session, hook_env(daemon), "--scope", "user", "--user-id", "dev1", *BUDGET)
    assert _without_uuid(captured(daemon)) == expected_rows(session, scope="user", user_id="dev1")


@pytest.mark.parametrize("stdin", ["", "not json", "[1, 2]", '{"hook_event_name": "Stop"}',
                                   '{"hook_event_name": "Stop", "session_id": "s", "cwd": "/", '
                                   '"transcript_path": "/nonexistent/t.jsonl"}'])
def test_bad_or_partial_payloads_exit_0_and_print_nothing(module_daemon: DaemonHandle, stdin: str) -> None:
    done = run_hook(hook_env(module_daemon), stdin)
    assert (done.returncode, done.stdout) == (0, "")
    assert captured(module_daemon) == []


def test_a_mistyped_option_exits_0_with_the_error_on_stderr(module_daemon: DaemonHandle) -> None:
    # Claude Code reads exit 2 from a UserPromptSubmit hook as "block the prompt".
    done = run_hook(hook_env(module_daemon), '{"hook_event_name": "Stop"}', "--scope", "team")
    assert (done.returncode, done.stdout) == (0, "")
    assert "Invalid value for '--scope'" in done.stderr


def test_an_unwritable_data_dir_still_exits_0_and_prints_nothing(daemon: DaemonHandle,
                                                                 short_tmp: Path) -> None:
    session = Session(short_tmp / "work")
    session.grow_to(12)
    stop = next(h for h in session.hooks if h["payload"]["hook_event_name"] == "Stop")
    blocked = short_tmp / "blocked"
    blocked.write_text("a file where the data dir should be")
    env = {**hook_env(daemon), "MEMORYD_DATA_DIR": str(blocked)}
    done = run_hook(env, session.payload(stop), *BUDGET)
    assert (done.returncode, done.stdout) == (0, "")
    assert "memoryd capture" in done.stderr


def test_print_config_gives_the_hooks_block_with_this_installs_command(module_daemon: DaemonHandle) -> None:
    done = run_hook(hook_env(module_daemon), "", "--print-config")
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert sorted(config["hooks"]) == ["SessionEnd", "Stop", "UserPromptSubmit"]
    for entries in config["hooks"].values():
        (hook,) = entries[0]["hooks"]
        assert hook["type"] == "command"
        words = shlex.split(hook["command"])
        assert os.path.isabs(words[0]), words
        # The paths this install resolves are written into the command (no lookup at hook time).
        at = words.index("capture")
        assert words[at:] == ["capture", "claude-code", "--socket", str(module_daemon.socket),
                              "--data-dir", str(module_daemon.data_dir)]
