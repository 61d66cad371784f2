"""A rerank endpoint on loopback: llama.cpp's server or text-embeddings-inference.

Two request shapes, chosen by the URL's path:

* ``…/v1/rerank`` (llama.cpp's server, also Jina and Cohere):
  ``{"query", "documents", "top_n"}`` answered by
  ``{"results": [{"index", "relevance_score"}, …]}``;
* any other path, e.g. ``/rerank`` (text-embeddings-inference; llama.cpp's server serves
  the same shape there): ``{"query", "texts"}`` answered by ``[{"index", "score"}, …]``.

Either answer shape is read whatever was sent. Only loopback hosts are allowed: a search's
query and its candidates' text never leave the machine.
"""

from __future__ import annotations

import ipaddress
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class EndpointRefused(ValueError):
    """A ``search_reranker`` URL that is malformed or not on loopback."""


def check_loopback(url: str) -> None:
    """Raise EndpointRefused unless ``url`` is http(s) with a loopback host and a path."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointRefused(f"{url!r} is not an http(s) URL with a host")
    host = parts.hostname
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host.lower() in LOOPBACK_NAMES
    if not loopback:
        raise EndpointRefused(
            f"{url!r} is not on loopback: memoryd sends queries and memories only to a reranker on "
            "this machine (127.0.0.1, ::1 or localhost); run the server locally, or use a "
            "CrossEncoder directory")
    if parts.path in ("", "/"):
        raise EndpointRefused(f"{url!r} has no path: give the rerank route, e.g. "
                              "http://127.0.0.1:8080/v1/rerank (llama.cpp) or http://127.0.0.1:8080/rerank "
                              "(text-embeddings-inference)")


def request_body(url: str, query: str, texts: list[str]) -> dict[str, Any]:
    """The JSON body for this endpoint's shape."""
    if urlsplit(url).path.rstrip("/").endswith("/v1/rerank"):
        return {"query": query, "documents": texts, "top_n": len(texts)}
    return {"query": query, "texts": texts}


def parse_scores(answer: Any, n: int) -> list[float]:
    """One score per sent text, from either answer shape; ValueError when it is neither or
    does not score every text once."""
    items = answer.get("results") if isinstance(answer, dict) else answer
    if not isinstance(items, list):
        raise ValueError("the answer is neither a list nor an object with 'results'")
    scores: list[float | None] = [None] * n
    for item in items:
        if not isinstance(item, dict):
            raise ValueError("an answer item is not an object")
        index = item.get("index")
        value = item.get("relevance_score", item.get("score"))
        if not isinstance(index, int) or not 0 <= index < n or not isinstance(value, int | float):
            raise ValueError(f"an answer item has no valid index and score: {item!r}"[:200])
        scores[index] = float(value)
    missing = [i for i, s in enumerate(scores) if s is None]
    if missing:
        raise ValueError(f"the answer scored {n - len(missing)} of {n} texts")
    return [float(s) for s in scores if s is not None]


class EndpointReranker:
    """Scores through a rerank endpoint on loopback (checked again here, not only in config)."""

    def __init__(self, url: str):
        check_loopback(url)
        self.url = url
        self.name = url

    def ready(self) -> str | None:
        return None  # a down server is a failed call, reported as one

    def score(self, query: str, texts: list[str], timeout_s: float) -> list[float]:
        body = json.dumps(request_body(self.url, query, texts)).encode()
        req = urllib.request.Request(self.url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        # No proxy: a loopback URL must reach this machine, never an HTTP(S)_PROXY.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=timeout_s) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{self.url} answered HTTP {exc.code}") from exc
        except urllib.error.URLError as exc:
            raise RuntimeError(f"{self.url} unreachable: {exc.reason}") from exc
        return parse_scores(answer, len(texts))
