"""Reading a Claude Code transcript into turns (the recorded session in tests/data/claude_code)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.clock import normalize_rfc3339
from memoryd.editors.capture.transcript import ROOTS_ENV, read_turns, turn_text

DATA = Path(__file__).resolve().parents[1] / "data" / "claude_code"


@pytest.fixture(autouse=True)
def _transcript_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """These tests read transcripts from the recorded data and the test's temp dir
    (tests/editors/test_capture_bounds.py tests the folder rule itself)."""
    monkeypatch.setenv(ROOTS_ENV, os.pathsep.join([str(DATA), str(tmp_path)]))
    yield


def _expected() -> list[dict[str, object]]:
    loaded: list[dict[str, object]] = json.loads((DATA / "expected_turns.json").read_text())
    return loaded


def test_recorded_session_yields_exactly_the_seven_turns_in_order() -> None:
    found = read_turns(DATA / "session.jsonl")
    got = [{"turn_index": t.turn_index, "role": t.role, "content": t.text,
            "occurred_at": normalize_rfc3339(t.timestamp or "")} for t in found.turns]
    assert got == _expected()
    assert found.next_index == 7
    assert found.offset == (DATA / "session.jsonl").stat().st_size


def test_reading_from_an_offset_continues_the_indices(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = (DATA / "session.jsonl").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:12]))
    first = read_turns(path)
    assert [t.turn_index for t in first.turns] == [0, 1, 2]
    path.write_text("".join(lines))
    rest = read_turns(path, first.offset, first.next_index)
    expected = [(e["turn_index"], e["content"]) for e in _expected()[3:]]
    assert [(t.turn_index, t.text) for t in rest.turns] == expected


def test_a_last_line_still_being_written_is_left_for_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = (DATA / "session.jsonl").read_text().splitlines(keepends=True)
    half = lines[4][: len(lines[4]) // 2]  # the first prompt's entry, cut mid-line
    path.write_text("".join(lines[:4]) + half)
    partial = read_turns(path)
    assert partial.turns == [] and partial.offset == len("".join(lines[:4]).encode())
    path.write_text("".join(lines[:5]))
    done = read_turns(path, partial.offset, partial.next_index)
    assert [t.text for t in done.turns] == [_expected()[0]["content"]]


def test_a_replaced_shorter_transcript_is_read_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    shutil.copy(DATA / "session.jsonl", path)
    end = read_turns(path)
    lines = (DATA / "session.jsonl").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:6]))
    again = read_turns(path, end.offset, end.next_index)
    assert [t.turn_index for t in again.turns] == [0]


def test_entries_that_are_not_conversation_are_skipped() -> None:
    def entry(**kw: object) -> dict[str, object]:
        return {"type": "user", "message": {"role": "user", "content": "hello"}, **kw}

    assert turn_text(entry()) == ("user", "hello")  # positive control
    assert turn_text(entry(isMeta=True)) is None
    assert turn_text(entry(isSidechain=True)) is None
    assert turn_text(entry(isCompactSummary=True)) is None
    assert turn_text(entry(type="system")) is None
    assert turn_text(entry(message={"role": "user", "content": "   "})) is None
    command = "<command-name>/clear</command-name>"
    assert turn_text(entry(message={"role": "user", "content": command})) is None
    tool = [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}, {"type": "text", "text": "x"}]
    assert turn_text(entry(message={"role": "user", "content": tool})) is None
    said = [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "One."},
            {"type": "tool_use", "id": "t2", "name": "Bash", "input": {}}, {"type": "text", "text": "Two."}]
    assert turn_text({"type": "assistant", "message": {"role": "assistant", "content": said}}) \
        == ("assistant", "One.\n\nTwo.")
    assert turn_text("not an object") is None
