"""The learned ranking in a real daemon (search_learned_ranking, on by default).

Project ``talk`` holds short sessions of conversation turns; project ``notes`` holds the same
texts as plain facts. A hybrid search in ``talk`` answers in the learned order (each row's
explain carries its learned score and fused rank), cut to k, from the reader's project only;
in ``notes`` (no turns) the fused order stands untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.search._daemon import stop_cleanly

SESSIONS = {
    "hackathon": ["Jonas: Hackathon is in two weeks, got an idea?",
                  "Priya: Yes: a map of lockers with live free space, so couriers stop driving to full ones.",
                  "Jonas: Love it, put it on the board."],
    "outage": ["Jonas: Postmortem draft is up for Friday's outage.", "Priya: Classic. What are the actions?",
               "Jonas: Move the cert to cert-manager with auto-renewal and alert thirty days out."],
    "lunch": ["Priya: Lunch at the Thai place?", "Jonas: Sure, at one."],
    "office": ["Priya: The office move slipped to March.", "Jonas: Again? The boxes are already packed."],
}
QUERY = "What did Priya pitch for the hackathon?"


@pytest.fixture(scope="module")
def store(spawn: Any) -> Iterator[dict[str, Any]]:
    d = spawn("learned")
    items, keys = [], []
    for day, (session, texts) in enumerate(SESSIONS.items(), start=1):
        for i, text in enumerate(texts):
            items.append({"content": text, "kind": "conversation", "project": "talk", "scope": "project",
                          "session_id": session, "occurred_at": f"2024-03-0{day}T10:0{i}:30Z"})
            keys.append(("talk", session, i))
            items.append({"content": text, "kind": "fact", "project": "notes", "scope": "project"})
            keys.append(("notes", session, i))
    ids = dict(zip(keys, d.write_many(items), strict=True))
    d.wait_embedded()
    yield {"daemon": d, "ids": ids, "project_of": {v: k[0] for k, v in ids.items()}}
    stop_cleanly(d)


def test_a_pool_of_turns_is_answered_in_the_learned_order_cut_to_k(store: dict[str, Any]) -> None:
    d = store["daemon"]
    result = d.search(QUERY, k=4, project="talk", explain=True)
    assert result["mode_used"] == "hybrid", result["notices"]
    rows = result["results"]
    assert len(rows) == 4
    assert all("learned_score" in r["explain"] and "fused_rank" in r["explain"] for r in rows)
    assert {store["project_of"][r["id"]] for r in rows} == {"talk"}
    assert store["ids"][("talk", "hackathon", 1)] in [r["id"] for r in rows]


def test_a_pool_without_turns_keeps_the_fused_order(store: dict[str, Any]) -> None:
    d = store["daemon"]
    result = d.search(QUERY, k=4, project="notes", explain=True)
    rows = result["results"]
    assert rows and all("learned_score" not in r["explain"] for r in rows)
    assert {store["project_of"][r["id"]] for r in rows} == {"notes"}
    assert [r["explain"]["rrf"] for r in rows] == sorted((r["explain"]["rrf"] for r in rows), reverse=True)
