"""The optional reranker in a real daemon over its real socket (search_reranker).

Project ``p1`` and project ``p2`` hold memories that all match the query. The reranker
(a tiny CrossEncoder the test builds, or a real HTTP server on loopback) must see only the
fused candidates of the reader's own project, its order must be the answer's order, and a
failing or slow reranker must leave the fused order with a notice. p2's texts are those the
reranker would score highest: were scope applied after it, they would lead the answer.

SQLite only: the reranker runs in the service on rows both legs have already filtered by
scope (the legs' scope is proven on both backends in test_search_scope.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.search import _tiny_crossencoder as tiny
from tests.search._daemon import SearchDaemon, stop_cleanly
from tests.search._rerank_server import serving

QUERY = "what did we decide about the deploy freeze"
TEXTS = [f"Deploy freeze note {i}: {what}" for i, what in enumerate([
    "the freeze starts Friday at noon", "hotfixes still need two approvals", "the freeze ends Monday",
    "the release manager is Dana", "staging stays open during the freeze", "we decided to skip the freeze",
    "rollbacks go through the on-call", "the freeze covers the mobile apps", "no schema migrations",
    "the deploy bot is paused", "feature flags may still change", "the freeze was moved to May",
])]
K = 6


def seed(d: SearchDaemon, p1: list[str], p2: list[str]) -> dict[str, str]:
    items = [{"content": t, "kind": "fact", "scope": "project", "project": "p1"} for t in p1]
    items += [{"content": t, "kind": "fact", "scope": "project", "project": "p2"} for t in p2]
    ids = d.write_many(items)
    d.wait_embedded()
    return dict(zip(ids, p1 + p2, strict=True))


def settled(d: SearchDaemon, **params: Any) -> dict[str, Any]:
    """A hybrid search once the reranker has loaded (the first searches start its load)."""
    deadline = time.monotonic() + 120
    while True:
        result = d.search(QUERY, k=K, project="p1", explain=True, **params)
        assert result["mode_used"] == "hybrid", result["notices"]
        if not any("loading" in n for n in result["notices"]) or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


@pytest.fixture(scope="module")
def crossencoder(spawn: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    model = tiny.build(tmp_path_factory.mktemp("ce") / "tiny-ce", [*TEXTS, QUERY])
    scores = dict(zip(TEXTS, tiny.scores(model, QUERY, TEXTS), strict=True))
    by_score = sorted(TEXTS, key=lambda t: -scores[t])
    p2, p1 = by_score[:4], by_score[4:]  # p2 holds what the model likes best
    d = spawn("rerank-ce", config={"search_reranker": str(model), "search_rerank_budget_ms": 5000.0})
    text_of = seed(d, p1, p2)
    yield {"daemon": d, "scores": scores, "text_of": text_of, "p1": p1, "p2": p2}
    stop_cleanly(d)


def test_a_crossencoders_order_is_the_answer_and_it_sees_only_the_readers_rows(
        crossencoder: dict[str, Any]) -> None:
    d, scores, text_of = crossencoder["daemon"], crossencoder["scores"], crossencoder["text_of"]
    result = settled(d)
    assert not [n for n in result["notices"] if "reranker" in n], result["notices"]
    got = [text_of[r["id"]] for r in result["results"]]
    assert not set(got) & set(crossencoder["p2"])
    assert got == sorted(crossencoder["p1"], key=lambda t: -scores[t])[:K]
    for r in result["results"]:
        assert r["explain"]["rerank_score"] == pytest.approx(scores[text_of[r["id"]]], abs=1e-3)
    # Control: the fused order it replaced was a different one.
    assert [r["explain"]["fused_rank"] for r in result["results"]] != list(range(1, K + 1))
    # Control: p2's reader gets p2's rows, which the model ranks above all of p1's.
    other = d.search(QUERY, k=K, project="p2")
    assert {text_of[r["id"]] for r in other["results"]} == set(crossencoder["p2"])


def test_lexical_and_vector_searches_are_not_reranked(crossencoder: dict[str, Any]) -> None:
    d = crossencoder["daemon"]
    for mode in ("lexical", "vector"):
        result = d.search(QUERY, k=K, project="p1", mode=mode, explain=True)
        assert all("rerank_score" not in r["explain"] for r in result["results"])


@pytest.fixture(scope="module")
def endpoint(spawn: Any) -> Iterator[dict[str, Any]]:
    with serving() as server:
        d = spawn("rerank-http", config={"search_reranker": server.url("/v1/rerank"),
                                         "search_rerank_budget_ms": 2000.0})
        p1, p2 = TEXTS[:8], TEXTS[8:]
        server.preferred = [p1[5], p1[2], p1[7]]
        text_of = seed(d, p1, p2)
        yield {"daemon": d, "server": server, "text_of": text_of, "p1": p1, "p2": p2}
        stop_cleanly(d)


def test_an_endpoints_order_is_the_answer_and_it_is_sent_only_the_readers_rows(
        endpoint: dict[str, Any]) -> None:
    d, server, text_of = endpoint["daemon"], endpoint["server"], endpoint["text_of"]
    server.mode = "ok"
    server.requests.clear()
    result = settled(d)
    assert not [n for n in result["notices"] if "reranker" in n], result["notices"]
    got = [text_of[r["id"]] for r in result["results"]]
    assert got == sorted(endpoint["p1"], key=lambda t: -server.score(t))[:K]
    assert got[:3] == server.preferred
    path, body = server.requests[-1]
    assert path == "/v1/rerank" and body["query"] == QUERY
    assert set(body["documents"]) == set(endpoint["p1"])  # every candidate of p1, none of p2


@pytest.mark.parametrize("mode,said", [("fail", "failed (RuntimeError: http://127.0.0.1"),
                                       ("slow", "took longer than its 2000 ms budget")])
def test_a_failing_or_slow_endpoint_leaves_the_fused_order_with_a_notice(
        endpoint: dict[str, Any], mode: str, said: str) -> None:
    d, server = endpoint["daemon"], endpoint["server"]
    server.mode, server.slow_s = mode, 3.0
    try:
        started = time.monotonic()
        result = d.search(QUERY, k=K, project="p1", explain=True)
        elapsed = time.monotonic() - started
    finally:
        server.mode = "ok"
    notices = [n for n in result["notices"] if "reranker" in n]
    assert len(notices) == 1 and said in notices[0] and "results in fused order" in notices[0], notices
    assert all("rerank_score" not in r["explain"] for r in result["results"])
    scores = [r["score"] for r in result["results"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == K
    assert elapsed < 2.9  # the answer did not wait for the slow server
    time.sleep(server.slow_s if mode == "slow" else 0)  # let the slow call end before the next test

