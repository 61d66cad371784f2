"""Serialise the hand-written dialogue sources (dN.txt, dN.q.txt) into ../dN.json.

The text of every turn and question is written by hand in the source files;
this script only numbers the turns, gives each turn a timestamp, resolves the
evidence anchors to turn ids and writes JSON. It refuses a source with an
unknown or repeated anchor, a duplicate turn, a session out of date order or a
temporal question without an "as of" date, so a bad edit fails here before any
test or benchmark sees it.

Source format (``#`` starts a comment line):

    id: d1                      header lines: id, split, title, description,
    speaker M: Maya (user)      and one ``speaker LETTER: Name (role)`` per speaker
    == 2024-01-09 20:14         a session: its start, in UTC
    M {tag1 tag2}: text         a turn; the optional anchors name it for questions

Questions (``dN.q.txt``), one a line:

    type [as_of] | evidence anchors [/ stale anchors] | question | answer

    .venv/bin/python tests/data/conversations/source/build.py
"""

from __future__ import annotations

import json
import re
import sys
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parent
OUT = SOURCE.parent
TYPES = ("single", "multi", "temporal", "inference", "changed")
SPLITS = ("tuning", "held-out")

_SESSION = re.compile(r"^== (\d{4}-\d{2}-\d{2}) (\d{2}):(\d{2})$")
_TURN = re.compile(r"^([A-Z][a-z]?)(?: \{([^}]*)\})?: (.+)$")
_SPEAKER = re.compile(r"^speaker ([A-Z][a-z]?): (.+) \((\w+)\)$")


class SourceError(Exception):
    """A source file that does not follow the format; the message names the file and line."""


def _turn_gap_s(text: str) -> int:
    """Seconds between a turn and the next: time to read it and type the answer, roughly."""
    return 15 + len(text) // 4


def parse_dialogue(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The dialogue as JSON-ready data, and its anchors (tag -> turn id)."""
    header: dict[str, str] = {}
    speakers: dict[str, dict[str, str]] = {}
    sessions: list[dict[str, Any]] = []
    anchors: dict[str, str] = {}
    clock: datetime | None = None
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        where = f"{path.name}:{n}"
        if not line.strip() or line.startswith("#"):
            continue
        if m := _SPEAKER.match(line):
            speakers[m.group(1)] = {"name": m.group(2), "role": m.group(3)}
        elif m := _SESSION.match(line):
            day, hh, mm = m.groups()
            clock = datetime.fromisoformat(f"{day}T{hh}:{mm}:00")
            if sessions and day <= sessions[-1]["date"]:
                raise SourceError(f"{where}: session dates must increase ({day})")
            sid = f"{header['id']}-s{len(sessions) + 1:02d}"
            sessions.append({"id": sid, "date": day, "turns": []})
        elif m := _TURN.match(line):
            if clock is None:
                raise SourceError(f"{where}: a turn before the first session")
            letter, tags, text = m.groups()
            if letter not in speakers:
                raise SourceError(f"{where}: unknown speaker {letter}")
            session = sessions[-1]
            tid = f"{session['id']}-t{len(session['turns']) + 1:02d}"
            session["turns"].append({"id": tid, "speaker": speakers[letter]["name"],
                                     "timestamp": clock.strftime("%Y-%m-%dT%H:%M:%SZ"), "text": text})
            clock += timedelta(seconds=_turn_gap_s(text))
            for tag in (tags or "").split():
                if tag in anchors:
                    raise SourceError(f"{where}: anchor {tag} used twice")
                anchors[tag] = tid
        elif ":" in line and not sessions:
            key, value = line.split(":", 1)
            header[key.strip()] = value.strip()
        else:
            raise SourceError(f"{where}: cannot parse {line!r}")
    seen: dict[str, str] = {}
    for session in sessions:
        for turn in session["turns"]:
            key = f"{turn['speaker']}: {turn['text']}".casefold()
            if key in seen:
                raise SourceError(f"{path.name}: {turn['id']} repeats {seen[key]}")
            seen[key] = turn["id"]
    if header.get("split") not in SPLITS:
        raise SourceError(f"{path.name}: split must be one of {SPLITS}")
    dialogue = {"id": header["id"], "split": header["split"], "title": header["title"],
                "description": header["description"], "speakers": list(speakers.values()),
                "sessions": sessions}
    return dialogue, anchors


def parse_questions(path: Path, dialogue: dict[str, Any], anchors: dict[str, str]) -> list[dict[str, Any]]:
    """The questions, with anchors resolved to turn ids."""
    last_day = date.fromisoformat(dialogue["sessions"][-1]["date"])
    questions = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        where = f"{path.name}:{n}"
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 4:
            raise SourceError(f"{where}: expected 4 fields separated by |")
        head, refs, text, answer = parts
        qtype, *rest = head.split()
        if qtype not in TYPES:
            raise SourceError(f"{where}: unknown type {qtype}")
        as_of = rest[0] if rest else None
        if qtype == "temporal" and as_of is None:
            raise SourceError(f"{where}: a temporal question needs an as-of date")
        if qtype == "changed" and as_of is None:
            # Asked after the last session: "now" is when the later statement holds.
            as_of = (last_day + timedelta(days=1)).isoformat()
        gold, _, stale = refs.partition("/")
        try:
            evidence = [anchors[t] for t in gold.split()]
            stale_ids = [anchors[t] for t in stale.split()]
        except KeyError as exc:
            raise SourceError(f"{where}: unknown anchor {exc}") from None
        if not evidence or (qtype == "changed") != bool(stale_ids):
            raise SourceError(f"{where}: needs evidence, and stale evidence exactly for 'changed'")
        questions.append({"id": f"{dialogue['id']}-q{len(questions) + 1:03d}", "dialogue": dialogue["id"],
                          "type": qtype, "question": text, "answer": answer, "evidence": evidence,
                          "stale_evidence": stale_ids, "as_of": as_of})
    return questions


def build(name: str) -> dict[str, Any]:
    dialogue, anchors = parse_dialogue(SOURCE / f"{name}.txt")
    dialogue["questions"] = parse_questions(SOURCE / f"{name}.q.txt", dialogue, anchors)
    return dialogue


def main() -> None:
    names = sys.argv[1:] or sorted(p.stem for p in SOURCE.glob("d*.txt") if not p.stem.endswith(".q"))
    for name in names:
        try:
            data = build(name)
        except SourceError as exc:
            sys.exit(str(exc))
        (OUT / f"{name}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        turns = sum(len(s["turns"]) for s in data["sessions"])
        sys.stderr.write(f"{name}: {len(data['sessions'])} sessions, {turns} turns, "
                         f"{len(data['questions'])} questions\n")


if __name__ == "__main__":
    main()
