"""The conversational recall set (tests/data/conversations/) holds together.

Each dN.json is one dialogue with its dated sessions, timestamped turns and
labelled questions. ``problems()`` below is the schema check: it returns every
rule a dialogue breaks, so the tests can show both that the shipped files are
clean and that each rule really catches a broken copy.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "conversations"
TYPES = {"single", "multi", "temporal", "inference", "changed"}
SPLITS = {"tuning", "held-out"}
DIALOGUE_KEYS = {"id", "split", "title", "description", "speakers", "sessions", "questions"}
QUESTION_KEYS = {"id", "dialogue", "type", "question", "answer", "evidence", "stale_evidence", "as_of"}
TURN_KEYS = {"id", "speaker", "timestamp", "text"}


def load_all() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(DATA.glob("d*.json"))]


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def problems(d: dict[str, Any]) -> list[str]:
    """Every rule the dialogue ``d`` breaks, as readable lines (empty when it is clean)."""
    out: list[str] = []
    if set(d) != DIALOGUE_KEYS:
        return [f"{d.get('id')}: keys {sorted(set(d) ^ DIALOGUE_KEYS)} differ"]
    did = d["id"]
    if d["split"] not in SPLITS:
        out.append(f"{did}: split {d['split']!r}")
    if len(d["sessions"]) < 15:
        out.append(f"{did}: {len(d['sessions'])} sessions, fewer than 15")
    speakers = {s["name"] for s in d["speakers"]}
    turns: dict[str, tuple[int, dict[str, Any]]] = {}  # turn id -> (session index, turn)
    seen_ids: set[str] = set()
    texts: dict[str, str] = {}
    prev_date: str | None = None
    prev_time: datetime | None = None
    for si, session in enumerate(d["sessions"]):
        sid, day = session["id"], session["date"]
        if sid in seen_ids:
            out.append(f"{did}: session id {sid} repeated")
        seen_ids.add(sid)
        date.fromisoformat(day)
        if prev_date is not None and day <= prev_date:
            out.append(f"{sid}: date {day} does not follow {prev_date}")
        prev_date = day
        if not session["turns"]:
            out.append(f"{sid}: no turns")
            continue
        if session["turns"][0]["timestamp"][:10] != day:
            out.append(f"{sid}: first turn is not on the session's date {day}")
        for turn in session["turns"]:
            tid = turn["id"]
            if set(turn) != TURN_KEYS:
                out.append(f"{tid}: keys {sorted(set(turn) ^ TURN_KEYS)} differ")
                continue
            if tid in seen_ids:
                out.append(f"{did}: id {tid} repeated")
            seen_ids.add(tid)
            if turn["speaker"] not in speakers:
                out.append(f"{tid}: unknown speaker {turn['speaker']}")
            if not turn["timestamp"].endswith("Z"):
                out.append(f"{tid}: timestamp {turn['timestamp']} is not UTC")
            stamp = _time(turn["timestamp"])
            if prev_time is not None and stamp <= prev_time:
                out.append(f"{tid}: timestamp does not increase")
            prev_time = stamp
            # The daemon would answer an identical turn as a duplicate and store one row.
            key = f"{turn['speaker']}: {turn['text']}".casefold()
            if key in texts:
                out.append(f"{tid}: same text as {texts[key]}")
            texts[key] = tid
            turns[tid] = (si, turn)
    for q in d["questions"]:
        qid = q["id"]
        if set(q) != QUESTION_KEYS:
            out.append(f"{qid}: keys {sorted(set(q) ^ QUESTION_KEYS)} differ")
            continue
        if qid in seen_ids:
            out.append(f"{did}: id {qid} repeated")
        seen_ids.add(qid)
        if q["dialogue"] != did:
            out.append(f"{qid}: names dialogue {q['dialogue']}, is in {did}")
        if q["type"] not in TYPES:
            out.append(f"{qid}: type {q['type']!r}")
        if not q["question"].strip() or not q["answer"].strip():
            out.append(f"{qid}: empty question or answer")
        missing = [t for t in q["evidence"] + q["stale_evidence"] if t not in turns]
        if missing:
            out.append(f"{qid}: evidence {missing} not in {did}")
            continue
        if not q["evidence"] or len(set(q["evidence"])) != len(q["evidence"]):
            out.append(f"{qid}: evidence empty or repeated")
        if q["type"] == "multi" and len(q["evidence"]) < 2:
            out.append(f"{qid}: a multi-hop question with one evidence turn")
        if (q["type"] == "changed") != bool(q["stale_evidence"]):
            out.append(f"{qid}: stale evidence belongs to 'changed' questions only, and they need it")
        if q["type"] == "changed":
            # The later statement is the evidence: every stale turn precedes every evidence turn.
            latest_stale = max(_time(turns[t][1]["timestamp"]) for t in q["stale_evidence"])
            earliest = min(_time(turns[t][1]["timestamp"]) for t in q["evidence"])
            if latest_stale >= earliest:
                out.append(f"{qid}: a stale turn is not older than the evidence")
        if q["type"] in ("temporal", "changed") and q["as_of"] is None:
            out.append(f"{qid}: a {q['type']} question without as_of")
        if q["as_of"] is not None:
            asked = date.fromisoformat(q["as_of"])
            said = max(date.fromisoformat(turns[t][1]["timestamp"][:10]) for t in q["evidence"])
            if asked < said:
                out.append(f"{qid}: asked on {asked}, before its evidence was said on {said}")
    return out


# -- the shipped set ---------------------------------------------------------------

def test_every_dialogue_passes_the_schema_check() -> None:
    dialogues = load_all()
    assert len(dialogues) >= 6
    found = [p for d in dialogues for p in problems(d)]
    assert found == []


def test_the_set_is_large_enough_and_covers_every_question_type() -> None:
    dialogues = load_all()
    questions = [q for d in dialogues for q in d["questions"]]
    assert len(questions) >= 400
    by_type = {t: sum(q["type"] == t for q in questions) for t in TYPES}
    assert min(by_type.values()) >= 50, by_type
    for d in dialogues:
        assert {q["type"] for q in d["questions"]} == TYPES, d["id"]
    turns = sum(len(s["turns"]) for d in dialogues for s in d["sessions"])
    assert turns >= 1200


def test_ids_are_unique_across_the_whole_set() -> None:
    ids = [x["id"] for d in load_all() for x in
           [d, *d["sessions"], *(t for s in d["sessions"] for t in s["turns"]), *d["questions"]]]
    assert len(ids) == len(set(ids))


def test_the_split_is_by_dialogue_and_both_halves_are_real() -> None:
    dialogues = load_all()
    halves: dict[str, set[str]] = {"tuning": set(), "held-out": set()}
    for d in dialogues:
        halves[d["split"]].add(d["id"])
    assert halves["tuning"].isdisjoint(halves["held-out"])
    assert len(halves["tuning"]) >= 3 and len(halves["held-out"]) >= 3
    # The split written down in the README before any measuring.
    assert halves == {"tuning": {"d1", "d3", "d5"}, "held-out": {"d2", "d4", "d6"}}
    for half in halves.values():
        n = sum(len(d["questions"]) for d in dialogues if d["id"] in half)
        assert n >= 200


# -- paraphrase, not keyword copies ---------------------------------------------------

_WORD = re.compile(r"\w+")
_STOP_TEXT = """a about after all am an and any are as at be been before being both but by can could did
do does doing during each for from had has have having he her here him his how i if in into is it its
just me more most my no not now of on once only or other our out over own same she should so some such
than that the their them then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your get got"""
_STOP = frozenset(_STOP_TEXT.split())


def _content_words(text: str, *, skip_names: bool) -> set[str]:
    words = _WORD.findall(text)
    out = set()
    for i, w in enumerate(words):
        if w.lower() in _STOP or (skip_names and i > 0 and w[0].isupper()):
            continue
        w = w.lower()
        for suffix in ("ing", "ed", "es", "s"):
            if w.endswith(suffix) and len(w) > len(suffix) + 2:
                w = w[: -len(suffix)]
                break
        out.add(w)
    return out


def copied_words(question: str, evidence_texts: list[str]) -> float:
    """The share of a question's content words (names aside) that its evidence turns contain."""
    asked = _content_words(question, skip_names=True)
    said = set().union(*(_content_words(t, skip_names=False) for t in evidence_texts))
    return len(asked & said) / len(asked) if asked else 0.0


def test_questions_are_paraphrases_not_keyword_copies() -> None:
    shares = []
    for d in load_all():
        text = {t["id"]: t["text"] for s in d["sessions"] for t in s["turns"]}
        for q in d["questions"]:
            share = copied_words(q["question"], [text[t] for t in q["evidence"]])
            assert share < 0.75 or len(_content_words(q["question"], skip_names=True)) < 2, q["id"]
            shares.append(share)
    assert sum(shares) / len(shares) < 0.3


def test_copied_words_measures_shared_content_words() -> None:
    turn = "I'm doing a soft opening for friends on the tenth of July."
    assert copied_words("When was the soft opening for friends?", [turn]) == 1.0
    assert copied_words("When did the guests get a preview night?", [turn]) == 0.0


# -- the JSON is what the sources say ----------------------------------------------------

def test_json_files_are_the_build_of_the_hand_written_sources() -> None:
    spec = importlib.util.spec_from_file_location("conversation_build", DATA / "source" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    for path in sorted(DATA.glob("d*.json")):
        assert build.build(path.stem) == json.loads(path.read_text()), path.name


# -- the check catches each kind of damage --------------------------------------------------

def _first(dialogues: list[dict[str, Any]], qtype: str) -> tuple[dict[str, Any], dict[str, Any]]:
    d = copy.deepcopy(dialogues[0])
    return d, next(q for q in d["questions"] if q["type"] == qtype)


@pytest.mark.parametrize("damage, expected", [
    ("unknown evidence", "not in d1"),
    ("repeated turn id", "repeated"),
    ("sessions out of order", "does not follow"),
    ("too few sessions", "fewer than 15"),
    ("stale after evidence", "not older than the evidence"),
    ("temporal without as_of", "without as_of"),
    ("asked before said", "before its evidence was said"),
    ("duplicate turn text", "same text as"),
    ("one-turn multi-hop", "multi-hop question with one evidence turn"),
    ("question in the wrong file", "names dialogue"),
])
def test_the_schema_check_reports_each_kind_of_damage(damage: str, expected: str) -> None:
    dialogues = load_all()
    d, q = _first(dialogues, "single")
    sessions = d["sessions"]
    if damage == "unknown evidence":
        q["evidence"] = ["d1-s99-t99"]
    elif damage == "repeated turn id":
        sessions[2]["turns"][1]["id"] = sessions[2]["turns"][0]["id"]
    elif damage == "sessions out of order":
        sessions[3]["date"] = sessions[1]["date"]
    elif damage == "too few sessions":
        kept = {t["id"] for s in sessions[:14] for t in s["turns"]}
        d["sessions"] = sessions[:14]
        d["questions"] = [x for x in d["questions"] if set(x["evidence"] + x["stale_evidence"]) <= kept]
    elif damage == "stale after evidence":
        d, q = _first(dialogues, "changed")
        q["evidence"], q["stale_evidence"] = q["stale_evidence"], q["evidence"]
    elif damage == "temporal without as_of":
        d, q = _first(dialogues, "temporal")
        q["as_of"] = None
    elif damage == "asked before said":
        d, q = _first(dialogues, "temporal")
        q["as_of"] = "2000-01-01"
    elif damage == "duplicate turn text":
        sessions[5]["turns"][2]["text"] = sessions[4]["turns"][2]["text"]
        sessions[5]["turns"][2]["speaker"] = sessions[4]["turns"][2]["speaker"]
    elif damage == "one-turn multi-hop":
        d, q = _first(dialogues, "multi")
        q["evidence"] = q["evidence"][:1]
    elif damage == "question in the wrong file":
        q["dialogue"] = "d2"
    found = problems(d)
    assert any(expected in p for p in found), found
