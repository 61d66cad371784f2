"""A sentence-transformers CrossEncoder from a local directory, in the daemon's process.

Loaded on the first search that wants it, in a background thread (a search never waits for
a load: until the model is ready the fused order stands, with a notice), with the hub
offline and ``local_files_only``: a directory that is missing or incomplete fails to load
and says so; nothing is fetched to complete it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: Texts longer than this many tokens are cut by the model's tokenizer (cross-encoders are
#: trained on short passages; a long memory costs time, not relevance).
MAX_LENGTH = 256


class CrossEncoderReranker:
    """Scores (query, text) pairs with a local CrossEncoder; loads lazily, in the background."""

    def __init__(self, path: str):
        self.path = str(Path(path).expanduser())
        self.name = Path(self.path).name or self.path
        self.load_error: str | None = None
        self._model: Any = None
        self._lock = threading.Lock()
        self._loading = False

    def ready(self) -> str | None:
        if self._model is not None:
            return None
        if self.load_error:
            return f"it failed to load: {self.load_error}"
        self._start_loading()
        return "it is loading"

    def _start_loading(self) -> None:
        with self._lock:
            if self._loading or self._model is not None or self.load_error:
                return
            self._loading = True
        threading.Thread(target=self.load, name="memoryd-reranker-load", daemon=True).start()

    def load(self) -> None:
        """Load the model now (searches load it in the background on first use)."""
        from memoryd.models.embedder import quiet_offline_env

        started = time.perf_counter()
        try:
            if not Path(self.path).is_dir():
                raise FileNotFoundError(f"{self.path} is not a directory; set search_reranker to a "
                                        "CrossEncoder directory (config.json, weights, tokenizer)")
            quiet_offline_env()
            from sentence_transformers import CrossEncoder

            model = CrossEncoder(self.path, device="cpu", max_length=MAX_LENGTH, local_files_only=True)
        except Exception as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("model.load_failed", model="reranker", path=self.path, error=self.load_error)
            return
        finally:
            self._loading = False
        self._model = model
        log.info("model.loaded", model="reranker", path=self.path,
                 ms=round((time.perf_counter() - started) * 1000, 1))

    def score(self, query: str, texts: list[str], timeout_s: float) -> list[float]:
        model = self._model
        if model is None:
            raise RuntimeError(self.ready() or "not loaded")
        scores = model.predict([(query, t) for t in texts], batch_size=max(1, len(texts)),
                               show_progress_bar=False, convert_to_numpy=True)
        return [float(s) for s in scores]
