"""The lexical leg drops question words, pronouns and contraction pieces from the query.

A question is full of them ("what did she say about her knee"), and so is
conversation: in a real daemon, a turn that shares only those words with the
question must not outrank the one that shares its content word.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memoryd.store.search import fts_match
from tests.search._daemon import stop_cleanly


@pytest.mark.parametrize(("query", "expected"), [
    ("What did Maya say about her knee?", '"Maya" OR "say" OR "knee"'),
    ("Why didn't he take his bike when it rained?", '"take" OR "bike" OR "rained"'),
    ("How's the same queue doing before the release?", '"same" OR "queue" OR "before" OR "release"'),
    ("what is it", '"what" OR "is" OR "it"'),  # nothing else left: every word is kept
    ('"what did she say"', '"what did she say"'),  # an exact phrase keeps its words
])
def test_fts_match_drops_question_words_and_pronouns(query: str, expected: str) -> None:
    assert fts_match(query) == expected


ROWS = {
    "knee": "Maya: my knee is sore after the long run.",
    "chatter": "Maya: what do you think of her new flat? what a view, what a street!",
    "other": "Sam: the flat hunt is over, we signed on Friday.",
    "filler1": "Maya: the deploy went fine today.",
    "filler2": "Sam: lunch at the usual place?",
}


@pytest.fixture(scope="module")
def daemon(spawn: Any, backend: str, module_new_db_url: Callable[[], str | None]) -> Iterator[Any]:
    d = spawn(f"search-query-words-{backend}", embedder="none", db_url=module_new_db_url())
    ids = d.write_many([{"content": c, "scope": "project", "project": "words"} for c in ROWS.values()])
    yield {"daemon": d, "ids": dict(zip(ROWS, ids, strict=True))}
    stop_cleanly(d)


def test_content_word_outranks_shared_question_words(daemon: dict[str, Any]) -> None:
    d, ids = daemon["daemon"], daemon["ids"]
    result = d.search("What did Maya say about her knee?", mode="lexical", k=5, project="words")
    assert result["results"][0]["id"] == ids["knee"]
    assert ids["chatter"] not in {r["id"] for r in result["results"][:1]}
