"""The embedder runs the model once as it loads (models/embedder.py ``WARM_UP_TEXTS``).

The first forward pass of a freshly built model pays one-time costs (0.5 s of
CPU for 8 short texts against 0.2 s warm on the bench machine); paid inside
``load()`` they count as the model's load, not as the first search's query or
the first embed batch. A spy wraps the real SentenceTransformer.encode (the
bundled model runs): slow, it loads the model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memoryd.models.embedder import WARM_UP_TEXTS, LocalEmbedder

pytestmark = pytest.mark.slow


def test_load_runs_the_model_once_and_encode_does_not_load_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from sentence_transformers import SentenceTransformer

    calls: list[list[str]] = []
    real = SentenceTransformer.encode

    def spy(self: Any, sentences: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(list(sentences))
        return real(self, sentences, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformer, "encode", spy)
    embedder = LocalEmbedder("bundled", batch_size=32)
    embedder.load()
    assert calls == [WARM_UP_TEXTS], "load() did not run the model on the warm-up texts"

    out = embedder.encode(["the deploy script lives in ops/deploy.sh"])
    assert calls[1:] == [["the deploy script lives in ops/deploy.sh"]]
    assert out.shape == (1, 384) and out.dtype == np.float32
    assert abs(float(np.linalg.norm(out[0])) - 1.0) < 1e-5
