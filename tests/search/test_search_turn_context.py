"""A conversation turn is embedded with the turn before it, so a reply is found by what it answers.

A real daemon with the bundled embedder. Project ``talk`` holds four short
sessions as ``conversation`` turns; project ``notes`` holds the same texts as
plain facts (no session, no context), the control. "Yes! They said yes, I
start in June." says nothing of a bakery or a job: alone it ranks below an
unrelated turn; embedded after the question it answers, it ranks first. Once
that question is forgotten, the reply is embedded again on its own text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select

from memoryd.store.schema import memories
from tests.search._daemon import stop_cleanly

SESSIONS = {
    "dentist": ["Elena: How was the dentist on Tuesday?", "Sam: Fine, no cavities this time."],
    "bakery": ["Elena: Did the bakery in Porto call you back about the baker job?",
               "Sam: Yes! They said yes, I start in June."],
    "film": ["Sam: I watched the new Dune film last night.", "Elena: Was it any good?",
             "Sam: Honestly it was great, the sound was huge."],
    "sister": ["Elena: My sister is moving to Berlin next month.",
               "Sam: That's a big change, is she excited?"],
}
QUESTION = "bakery", 0
REPLY = "bakery", 1
QUERY = "Did Sam get the job at the bakery?"


@pytest.fixture(scope="module")
def store(spawn: Any, backend: str, module_new_db_url: Callable[[], str | None]) -> Iterator[dict[str, Any]]:
    d = spawn(f"turn-context-{backend}", embedder="bundled", db_url=module_new_db_url())
    items: list[dict[str, Any]] = []
    keys: list[tuple[str, str, int]] = []
    for day, (session, texts) in enumerate(SESSIONS.items(), start=1):
        for i, text in enumerate(texts):
            items.append({"content": text, "kind": "conversation", "project": "talk", "scope": "project",
                          "session_id": session, "occurred_at": f"2024-03-0{day}T10:0{i}:00Z"})
            keys.append(("talk", session, i))
            items.append({"content": text, "kind": "fact", "project": "notes", "scope": "project"})
            keys.append(("notes", session, i))
    ids = dict(zip(keys, d.write_many(items), strict=True))
    d.wait_embedded()
    yield {"daemon": d, "ids": ids}
    stop_cleanly(d)


def vector_ranking(d: Any, project: str) -> list[dict[str, Any]]:
    result = d.search(QUERY, mode="vector", k=10, project=project, explain=True)
    assert result["mode_used"] == "vector", result["notices"]
    return list(result["results"])


def test_a_reply_is_found_by_the_question_it_answers(store: dict[str, Any]) -> None:
    d, ids = store["daemon"], store["ids"]
    talk = [r["id"] for r in vector_ranking(d, "talk")]
    assert talk[0] == ids[("talk", *REPLY)]
    # Control: the same words embedded alone rank below the question and an unrelated turn.
    notes = [r["id"] for r in vector_ranking(d, "notes")]
    assert notes.index(ids[("notes", *REPLY)]) >= 2
    assert notes[0] == ids[("notes", *QUESTION)]
    hybrid = d.search_ids(QUERY, k=10, project="talk")
    assert ids[("talk", *REPLY)] in hybrid[:2]


def test_forgetting_the_question_re_embeds_the_reply_on_its_own_text(store: dict[str, Any]) -> None:
    d, ids = store["daemon"], store["ids"]
    question = ids[("talk", *QUESTION)]
    d.call("memory.forget", {"id": question, "reason": "test"})
    deadline = time.monotonic() + 120
    with d.engine().connect() as conn:
        status = select(memories.c.status).where(memories.c.id == question)
        while conn.execute(status).scalar() != "forgotten":
            assert time.monotonic() < deadline, d.log_tail()
            conn.rollback()
            time.sleep(0.2)
    d.wait_embedded()
    talk = {r["id"]: r for r in vector_ranking(d, "talk")}
    notes = {r["id"]: r for r in vector_ranking(d, "notes")}
    reply = talk[ids[("talk", *REPLY)]]["explain"]["vector_score"]
    alone = notes[ids[("notes", *REPLY)]]["explain"]["vector_score"]
    # The session's first turn is gone: the reply has no context left, and its vector is the plain one.
    assert reply == pytest.approx(alone, abs=1e-4)
    assert question not in talk
