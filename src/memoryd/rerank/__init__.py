"""An optional reranker a user already has, applied to a hybrid search's fused candidates.

Off by default (``search_reranker = ""``). Two kinds, chosen by the key's value:

* a local sentence-transformers CrossEncoder directory (``crossencoder.py``), loaded in the
  daemon with the hub offline and ``local_files_only``: nothing downloads;
* the URL of a rerank endpoint on loopback (``endpoint.py``): llama.cpp's server
  (``/v1/rerank``, Jina/Cohere shape) or text-embeddings-inference (``/rerank``). A URL
  whose host is not loopback is refused when the configuration is read.

The reranker only ever sees the candidates a search has already fused, which both legs
found under the reader's scope (store/search.py ``run``): scope is applied before it. A
reranker that fails, is still loading or exceeds its budget leaves the fused order in
place and says so in the answer's ``notices`` (``stage.py``).
"""

from __future__ import annotations

from typing import Protocol


class Reranker(Protocol):
    """Scores (query, text) pairs; higher is more relevant."""

    #: What the notices and logs call it (a directory's name, or the URL).
    name: str

    def ready(self) -> str | None:
        """None when it can score now; else why not (loading, failed to load). Never blocks."""
        ...

    def score(self, query: str, texts: list[str], timeout_s: float) -> list[float]:
        """One score per text, in the texts' order; raises on any failure."""
        ...


def is_url(spec: str) -> bool:
    """Whether a ``search_reranker`` value names an endpoint (else a directory)."""
    return spec.startswith(("http://", "https://"))


def build(spec: str) -> Reranker | None:
    """The reranker a ``search_reranker`` value names, or None when it is empty (off).

    Nothing loads or connects here: a directory loads on first use, in the background.
    """
    if not spec:
        return None
    if is_url(spec):
        from memoryd.rerank.endpoint import EndpointReranker

        return EndpointReranker(spec)
    from memoryd.rerank.crossencoder import CrossEncoderReranker

    return CrossEncoderReranker(spec)
