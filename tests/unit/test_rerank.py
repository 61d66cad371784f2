"""The reranker plug-in's parts, each real: the loopback rule, the two endpoint shapes against a
real HTTP server, and the rerank stage with a tiny CrossEncoder the test builds (its order used,
a budget overrun and a failed load falling back to the fused order with a notice).

The daemon-level tests (scope, the answer's order, fallbacks over the socket) are in
tests/search/test_search_rerank.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import Config, load_config
from memoryd.errors import ConfigError
from memoryd.rerank import build
from memoryd.rerank.crossencoder import CrossEncoderReranker
from memoryd.rerank.endpoint import EndpointRefused, EndpointReranker, check_loopback, parse_scores
from memoryd.rerank.stage import RerankStage
from tests.search import _tiny_crossencoder as tiny
from tests.search._rerank_server import RerankServer, serving

QUERY = "when is the deploy freeze"
TEXTS = ["The deploy freeze starts on Friday.", "Lunch is at noon.", "The freeze ends Monday morning.",
         "Deploys need two approvals.", "The staging database listens on port 5433."]


def fused_rows() -> list[dict[str, Any]]:
    return [{"id": f"m{i}", "seq": i, "content": t, "score": 1.0 / (i + 1)} for i, t in enumerate(TEXTS)]


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/v1/rerank", "http://127.3.4.5/rerank",
                                 "http://[::1]:9000/rerank", "https://localhost:8443/v1/rerank"])
def test_a_loopback_endpoint_is_accepted(url: str) -> None:
    check_loopback(url)


@pytest.mark.parametrize("url", ["http://10.0.0.5:8080/rerank", "http://reranker.example.com/rerank",
                                 "http://0.0.0.0:8080/rerank", "http://127.0.0.1:8080/", "ftp://127.0.0.1/x"])
def test_an_endpoint_off_loopback_or_without_a_route_is_refused(url: str) -> None:
    with pytest.raises(EndpointRefused):
        check_loopback(url)


def test_config_refuses_a_non_loopback_reranker_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[search]\nreranker = "http://192.168.1.20:8080/v1/rerank"\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "not on loopback" in err.value.message and "search_reranker" in err.value.message
    # Positive control: the same table with a loopback URL sets the key.
    path.write_text('[search]\nreranker = "http://127.0.0.1:8080/v1/rerank"\nrerank_budget_ms = 150\n')
    cfg = load_config(path)
    assert cfg.search_reranker == "http://127.0.0.1:8080/v1/rerank" and cfg.search_rerank_budget_ms == 150.0
    assert load_config(tmp_path / "config.toml").search_rerank_candidates == 40


def test_the_reranker_is_off_by_default() -> None:
    assert Config().search_reranker == "" and build(Config().search_reranker) is None


def test_both_answer_shapes_are_read_and_a_short_answer_refused() -> None:
    assert parse_scores({"results": [{"index": 1, "relevance_score": 0.9},
                                     {"index": 0, "relevance_score": 0.1}]}, 2) == [0.1, 0.9]
    assert parse_scores([{"index": 0, "score": 2.0}, {"index": 1, "score": -1.0}], 2) == [2.0, -1.0]
    with pytest.raises(ValueError, match="scored 1 of 2"):
        parse_scores([{"index": 0, "score": 2.0}], 2)


@pytest.fixture(scope="module")
def server() -> Iterator[RerankServer]:
    with serving() as s:
        yield s


@pytest.mark.parametrize("path,field", [("/v1/rerank", "documents"), ("/rerank", "texts")])
def test_an_endpoint_is_called_in_its_shape_and_its_scores_kept(server: RerankServer, path: str,
                                                                  field: str) -> None:
    server.mode, server.preferred = "ok", [TEXTS[3], TEXTS[0]]
    server.requests.clear()
    scores = EndpointReranker(server.url(path)).score(QUERY, TEXTS, 5.0)
    assert [server.score(t) for t in TEXTS] == scores
    sent_path, body = server.requests[-1]
    assert sent_path == path and body[field] == TEXTS and body["query"] == QUERY


def test_a_tiny_crossencoder_orders_the_candidates(tmp_path: Path) -> None:
    model = tiny.build(tmp_path / "ce", [*TEXTS, QUERY])
    reranker = CrossEncoderReranker(str(model))
    reranker.load()
    assert reranker.ready() is None, reranker.load_error
    expected = tiny.scores(model, QUERY, TEXTS)
    stage = RerankStage(reranker, budget_ms=30000)
    try:
        out, notices = stage(QUERY, fused_rows(), explain=True)
    finally:
        stage.close()
    assert notices == []
    want = sorted(range(len(TEXTS)), key=lambda i: -expected[i])
    assert [r["id"] for r in out] == [f"m{i}" for i in want]
    assert want != list(range(len(TEXTS)))  # control: the model's order is not the fused one
    assert [r["explain"]["fused_rank"] for r in out] == [i + 1 for i in want]
    assert out[0]["score"] == pytest.approx(max(expected), abs=1e-4)


class HeldBack:
    """The real cross-encoder, whose scoring starts only once the test lets it: over any budget
    whatever the machine's load (a budget of 1 µs alone was beaten by a scheduler that ran the
    tiny model before the stage began to wait, in a CI run at load 17)."""

    def __init__(self, inner: CrossEncoderReranker):
        self.inner = inner
        self.name = inner.name
        self.go = threading.Event()

    def ready(self) -> str | None:
        return self.inner.ready()

    def score(self, query: str, texts: list[str], timeout_s: float) -> list[float]:
        self.go.wait(10.0)
        return self.inner.score(query, texts, timeout_s)


def test_a_crossencoder_over_its_budget_leaves_the_fused_order_with_a_notice(tmp_path: Path) -> None:
    real = CrossEncoderReranker(str(tiny.build(tmp_path / "ce", [*TEXTS, QUERY])))
    real.load()
    reranker = HeldBack(real)
    stage = RerankStage(reranker, budget_ms=50)
    try:
        out, notices = stage(QUERY, fused_rows())
    finally:
        reranker.go.set()
        stage.close()
    assert [r["id"] for r in out] == [r["id"] for r in fused_rows()]
    assert len(notices) == 1 and "budget" in notices[0] and "fused order" in notices[0]


def test_a_crossencoder_that_cannot_load_leaves_the_fused_order_with_a_notice(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    for path in (broken, tmp_path / "missing"):
        reranker = CrossEncoderReranker(str(path))
        stage = RerankStage(reranker, budget_ms=1000)
        try:
            out, notices = stage(QUERY, fused_rows())
            deadline = time.monotonic() + 60
            while "loading" in notices[0] and time.monotonic() < deadline:
                time.sleep(0.05)
                out, notices = stage(QUERY, fused_rows())
        finally:
            stage.close()
        assert [r["id"] for r in out] == [r["id"] for r in fused_rows()]
        assert "failed to load" in notices[0], notices
        assert reranker.load_error


class _Raises:
    """A unit-test fake beside the real endpoint and CrossEncoder tests above."""

    name = "fake"

    def ready(self) -> str | None:
        return None

    def score(self, query: str, texts: list[str], timeout_s: float) -> list[float]:
        raise RuntimeError("out of memory")


def test_a_reranker_that_raises_leaves_the_fused_order_with_a_notice() -> None:
    stage = RerankStage(_Raises(), budget_ms=1000)
    try:
        out, notices = stage(QUERY, fused_rows())
    finally:
        stage.close()
    assert [r["id"] for r in out] == [r["id"] for r in fused_rows()]
    assert notices == ["reranker fake failed (RuntimeError: out of memory); results in fused order"]
