"""Capture's per-transcript cursors are pruned once their transcript is gone.

A cursor file is written for every transcript a hook ever read; without a
prune, a user with daily sessions collects one file a session forever.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from memoryd.editors.capture.hook import Options, prune_cursors, run, state_path
from memoryd.editors.capture.transcript import ROOTS_ENV

DAY = 86_400.0


def _cursor(data_dir: Path, transcript: Path, age_s: float) -> str:
    path = state_path(str(data_dir), str(transcript))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"transcript": str(transcript), "offset": 10, "next_index": 2}, fh)
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


def test_only_old_cursors_of_deleted_transcripts_are_removed(tmp_path: Path) -> None:
    live = tmp_path / "live.jsonl"
    live.write_text("", encoding="utf-8")
    kept_live = _cursor(tmp_path, live, age_s=90 * DAY)  # old, but a resumed session needs it
    kept_young = _cursor(tmp_path, tmp_path / "gone-today.jsonl", age_s=60)
    gone = _cursor(tmp_path, tmp_path / "gone.jsonl", age_s=2 * DAY)
    assert prune_cursors(str(tmp_path)) == 1
    assert os.path.exists(kept_live) and os.path.exists(kept_young)
    assert not os.path.exists(gone)
    assert prune_cursors(str(tmp_path)) == 0


def test_a_damaged_cursor_is_pruned_and_a_missing_folder_is_nothing(tmp_path: Path) -> None:
    assert prune_cursors(str(tmp_path / "nowhere")) == 0
    path = _cursor(tmp_path, tmp_path / "x.jsonl", age_s=2 * DAY)
    Path(path).write_text("not json {", encoding="utf-8")
    os.utime(path, (time.time() - 2 * DAY,) * 2)
    assert prune_cursors(str(tmp_path)) == 1  # no transcript named: nothing to resume


def test_session_end_prunes_but_other_events_do_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROOTS_ENV, str(tmp_path))
    stale = _cursor(tmp_path, tmp_path / "deleted.jsonl", age_s=40 * DAY)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("", encoding="utf-8")
    opts = Options("project", None, str(tmp_path / "no.sock"), str(tmp_path), time.monotonic() + 5)
    hook = {"session_id": "s1", "transcript_path": str(transcript), "cwd": str(tmp_path)}
    run({**hook, "hook_event_name": "Stop"}, opts)
    assert os.path.exists(stale)
    run({**hook, "hook_event_name": "SessionEnd"}, opts)
    assert not os.path.exists(stale)
    assert os.path.exists(state_path(str(tmp_path), str(transcript)))  # its own cursor stays
