"""The capture hook reads only a regular transcript file in the editor's folders, a bounded
piece per run.

A hook payload's ``transcript_path`` is untrusted: it may name a FIFO (which would block the
hook, holding the transcript's cursor lock, until the editor kills it), a device
(``/dev/zero`` never ends), a symlink out of the transcript folders, or a transcript of
hundreds of MB (read whole, it took 937 MB of RSS). The reader refuses the first three at
once and reads the last over several runs, a few MiB each, the cursor moving over whole lines
only, so every turn is written once. The unit tests drive read_turns; the daemon tests run
the hook against real daemons on both backends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memoryd.editors.capture import hook as capture_hook
from memoryd.editors.capture import transcript as capture_transcript
from memoryd.editors.capture.transcript import ROOTS_ENV, TranscriptRefused, read_turns, transcript_roots
from tests.integration.harness import DaemonHandle

SESSION = "0c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f"


def entry(n: int, text: str, role: str = "user") -> str:
    """One transcript line: a prompt or an assistant text block."""
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    return json.dumps({"type": role, "uuid": f"00000000-0000-4000-8000-{n:012d}", "sessionId": SESSION,
                       "timestamp": "2025-06-02T09:15:10.482Z",
                       "message": {"role": role, "content": content}})


def tool_output(n: int, size: int) -> str:
    """A line that is not a turn (a tool's result fed back), ``size`` bytes of payload."""
    return json.dumps({"type": "user", "uuid": f"10000000-0000-4000-8000-{n:012d}", "message": {
        "role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "y" * size}]}})


def test_the_default_folders_are_claude_codes_projects_folder(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.delenv(ROOTS_ENV, raising=False)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert transcript_roots() == [str(tmp_path / ".claude" / "projects")]
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cc"))
    assert transcript_roots() == [str(tmp_path / "cc" / "projects")]
    monkeypatch.setenv(ROOTS_ENV, os.pathsep.join(["/a", "/b"]))
    assert transcript_roots() == ["/a", "/b"]


def test_a_fifo_is_refused_at_once_and_never_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    outcome: list[Any] = []

    def read() -> None:
        try:
            read_turns(fifo, roots=[str(tmp_path)])
        except TranscriptRefused as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)  # a hang guard, not a timing: a blocked open never returns at all
    if reader.is_alive():  # unblock the stuck open so the test process can go on
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO blocked")
    assert len(outcome) == 1 and "not a regular file" in str(outcome[0])


def test_a_device_is_refused_not_read(tmp_path: Path) -> None:
    with pytest.raises(TranscriptRefused, match="not a regular file"):
        read_turns("/dev/zero", roots=["/dev"])  # inside the folders named, still not a file
    with pytest.raises(TranscriptRefused, match="not inside the editor's transcript folders"):
        read_turns("/dev/zero", roots=[str(tmp_path)])


def test_a_symlink_out_of_the_folders_is_refused_and_one_within_them_is_read(tmp_path: Path) -> None:
    folder, outside = tmp_path / "projects", tmp_path / "elsewhere"
    folder.mkdir()
    outside.mkdir()
    secret = outside / "secret.jsonl"
    secret.write_text(entry(0, "a private note outside the transcripts") + "\n")
    (folder / "out.jsonl").symlink_to(secret)
    with pytest.raises(TranscriptRefused, match="not inside"):
        read_turns(folder / "out.jsonl", roots=[str(folder)])
    with pytest.raises(TranscriptRefused, match="not inside"):
        read_turns(secret, roots=[str(folder)])
    # Positive control: a symlink that stays inside the folders is followed.
    real = folder / "real.jsonl"
    real.write_text(entry(0, "inside") + "\n")
    (folder / "in.jsonl").symlink_to(real)
    assert [t.text for t in read_turns(folder / "in.jsonl", roots=[str(folder)]).turns] == ["inside"]


def _consume(path: Path, roots: list[str], max_bytes: int) -> tuple[list[capture_transcript.Turn], int]:
    """Read ``path`` run after run, as the hook's cursor would, until a run finds nothing new."""
    turns: list[capture_transcript.Turn] = []
    offset, index, skipping, runs = 0, 0, False, 0
    while True:
        found = read_turns(path, offset, index, skipping=skipping, roots=roots, max_bytes=max_bytes)
        runs += 1
        turns.extend(found.turns)
        if (found.offset, found.skipping) == (offset, skipping):
            return turns, runs
        offset, index, skipping = found.offset, found.next_index, found.skipping


def test_a_long_transcript_is_read_over_several_runs_with_every_turn_once(tmp_path: Path) -> None:
    lines, said = [], []
    for n in range(60):
        text = f"turn {n}: " + "word " * (n * 37 % 500)
        lines.append(entry(n, text, "user" if n % 2 else "assistant"))
        said.append(text.strip())
        lines.append(tool_output(n, 3000 + n * 211 % 9000))  # not a turn: read and passed over
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    size = path.stat().st_size
    turns, runs = _consume(path, [str(tmp_path)], max_bytes=40_000)
    assert [(t.turn_index, t.text) for t in turns] == list(enumerate(said))
    assert runs >= size // 40_000  # no run read more than its bytes


def test_a_line_longer_than_a_run_is_skipped_and_the_turns_after_it_are_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([entry(0, "before"), tool_output(1, 100_000), entry(2, "after"),
                               entry(3, "y" * 30_000), entry(4, "last")]) + "\n")
    turns, _ = _consume(path, [str(tmp_path)], max_bytes=40_000)
    # The 30 kB turn fits a run and is read; the 100 kB line does not and is passed over.
    assert [(t.turn_index, t.text[:6]) for t in turns] == [(0, "before"), (1, "after"), (2, "yyyyyy"),
                                                           (3, "last")]


def test_a_partial_last_line_waits_even_when_a_run_ends_inside_it(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    whole = entry(0, "first") + "\n"
    path.write_text(whole + entry(1, "second")[:50])  # the second entry is still being written
    first = read_turns(path, roots=[str(tmp_path)], max_bytes=1000)
    assert [t.text for t in first.turns] == ["first"] and first.offset == len(whole)
    assert not first.skipping
    path.write_text(whole + entry(1, "second") + "\n")
    rest = read_turns(path, first.offset, first.next_index, roots=[str(tmp_path)], max_bytes=1000)
    assert [(t.turn_index, t.text) for t in rest.turns] == [(1, "second")]


# -- the hook, against real daemons ---------------------------------------------------------

def _hook(daemon: DaemonHandle, transcript: Path | str, roots: Path) -> subprocess.CompletedProcess[str]:
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket), "MEMORYD_DATA_DIR": str(daemon.data_dir),
           ROOTS_ENV: str(roots)}
    payload = {"hook_event_name": "Stop", "session_id": SESSION, "cwd": str(roots),
               "transcript_path": str(transcript)}
    return subprocess.run([sys.executable, "-m", "memoryd", "capture", "claude-code", "--verbose",
                           "--budget-ms", "10000"], input=json.dumps(payload), env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_hook_refuses_a_fifo_and_a_device_and_writes_nothing(daemon: DaemonHandle,
                                                                 short_tmp: Path) -> None:
    folder = short_tmp / "projects"
    folder.mkdir()
    fifo = folder / "fifo.jsonl"
    os.mkfifo(fifo)
    try:
        done = _hook(daemon, fifo, folder)  # blocked, this would time out (a hang guard)
    except subprocess.TimeoutExpired:  # (subprocess.run has killed the blocked hook)
        pytest.fail("the hook blocked on a FIFO")
    assert (done.returncode, done.stdout) == (0, "")
    assert "capture: refused" in done.stderr and "not a regular file" in done.stderr
    # The cursor lock was let go: a second run on the same path gets past it (refused, not busy).
    assert "capture: refused" in _hook(daemon, fifo, folder).stderr
    (folder / "zero.jsonl").symlink_to("/dev/zero")
    done = _hook(daemon, folder / "zero.jsonl", folder)
    assert done.returncode == 0 and "capture: refused" in done.stderr and "not inside" in done.stderr
    assert daemon.scalar("SELECT count(*) FROM memories") == 0


def test_a_large_transcript_is_captured_over_several_hook_runs_with_nothing_lost_or_doubled(
        daemon: DaemonHandle, short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = short_tmp / "projects"
    folder.mkdir()
    path = folder / "big.jsonl"
    said = []
    with open(path, "w", encoding="utf-8") as fh:
        for n in range(120):
            text = f"turn {n} of the long session"
            said.append(text)
            fh.write(entry(n, text, "user" if n % 2 else "assistant") + "\n")
            fh.write(tool_output(n, 20_000) + "\n")
    monkeypatch.setattr(capture_transcript, "RUN_BYTES", 400_000)  # ~2.4 MB over 7 runs
    monkeypatch.setenv(ROOTS_ENV, str(folder))
    hook = {"hook_event_name": "Stop", "session_id": SESSION, "cwd": str(folder),
            "transcript_path": str(path)}
    outcomes = []
    for _ in range(20):
        opts = capture_hook.Options("user", "dev1", str(daemon.socket), str(daemon.data_dir),
                                    time.monotonic() + 10)
        outcome = capture_hook.run(hook, opts)
        outcomes.append((outcome.action, outcome.turns))
        if outcome.action == "nothing":
            break
    assert outcomes[-1][0] == "nothing"
    sent = [turns for action, turns in outcomes if action == "sent"]
    assert len(sent) >= 6 and sum(sent) == 120, outcomes
    rows = daemon.query("SELECT content FROM memories WHERE kind = 'conversation' ORDER BY content")
    assert sorted(r[0] for r in rows) == sorted(said)
