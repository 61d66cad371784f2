"""The texts and stored vectors of bench/search.py's and bench/pg_search.py's stores and of
bench/import.py's export files.

Two kinds (``--vectors``):

* ``random``: ``_harness.dev_notes(n, seed)`` with random 384-d unit vectors
  drawn from ``numpy.random.default_rng(seed)`` in row order (the benches'
  stores since they were written; HNSW's worst case, so their recall is a floor);
* ``real``: the first ``n`` sentences of bench/studies/ann_million_real.py (the
  conversation set's turns, then sentences of developer notes) with their real
  all-MiniLM-L6-v2 vectors from that study's cache. Issue 21 asks for recall on
  real vectors; this puts them through the daemon. The cache must hold ``n``
  vectors first: encode them with
  ``nice -n 10 .venv/bin/python bench/studies/ann_million_real.py --encode-only --n N``
  (about 30 minutes for a million on a quiet 2-core machine).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import _harness as h

DIM = 384
KINDS = ("random", "real")
#: bench/studies/ann_million_real.py's cache of real vectors (git-ignored): texts-N.txt (the
#: first N sentences, one a line), chunk-NNNN.npy (CHUNK vectors each) and manifest.json (each
#: chunk's text digest, so a chunk is only read for the texts it was made from).
CACHE = Path(__file__).resolve().parent / "results" / "ann_million_cache"
MANIFEST = CACHE / "manifest.json"
CHUNK = 50_000


def digest(texts: list[str]) -> str:
    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:24]


def load_manifest() -> dict[str, Any]:
    if MANIFEST.exists():
        return dict(json.loads(MANIFEST.read_text()))
    return {"chunk": CHUNK, "chunks": {}}


def cached_texts(n: int) -> list[str] | None:
    """The first ``n`` sentences from a texts file of the cache that holds that many, or None."""
    for path in sorted(CACHE.glob("texts-*.txt")):
        if int(path.stem.split("-")[1]) >= n:
            with open(path, encoding="utf-8", newline="\n") as f:
                return [line.rstrip("\n") for _, line in zip(range(n), f, strict=False)]
    return None


def cached_chunk(manifest: dict[str, Any], i: int, texts: list[str]) -> np.ndarray | None:
    """Chunk ``i``'s vectors if the cache holds them for exactly ``texts``."""
    entry = manifest["chunks"].get(str(i))
    path = CACHE / f"chunk-{i:04d}.npy"
    if entry and entry["hash"] == digest(texts) and entry["count"] == len(texts) and path.exists():
        return np.load(path)
    return None


def cached_vectors(texts: list[str]) -> np.ndarray:
    """The cached vectors of ``texts``, chunk by chunk, up to the first chunk not cached."""
    manifest = load_manifest()
    parts: list[np.ndarray] = []
    for i, lo in enumerate(range(0, len(texts), CHUNK)):
        vecs = cached_chunk(manifest, i, texts[lo:lo + CHUNK])
        if vecs is None:
            break
        parts.append(vecs)
    return np.concatenate(parts) if parts else np.zeros((0, DIM), dtype=np.float32)


class Corpus:
    """``n`` texts and, chunk by chunk in row order, their stored vectors."""

    def __init__(self, n: int, seed: int, kind: str = "random", *, text_seed: int | None = None) -> None:
        """``seed`` draws the random vectors; ``text_seed`` (``seed`` unless given) the notes."""
        if kind not in KINDS:
            raise ValueError(f"vectors must be one of {', '.join(KINDS)} (got {kind!r})")
        self.n, self.seed, self.kind = n, seed, kind
        self._real: np.ndarray | None = None
        if kind == "random":
            self.texts = h.dev_notes(n, seed=seed if text_seed is None else text_seed)
            return
        hint = ("encode them first: nice -n 10 .venv/bin/python bench/studies/ann_million_real.py "
                f"--encode-only --n {n}")
        texts = cached_texts(n)
        if texts is None:
            raise SystemExit(f"--vectors real: {CACHE} holds no texts file of {n:,} sentences; {hint}")
        self.texts = texts
        vecs = cached_vectors(texts)
        if len(vecs) < n:
            raise SystemExit(f"--vectors real: the vector cache holds {len(vecs):,} of the {n:,} "
                             f"sentences; {hint}")
        self._real = np.ascontiguousarray(vecs[:n], dtype=np.float32)

    def vector_chunks(self, step: int) -> Iterator[np.ndarray]:
        """The stored vectors of rows 0..n-1, ``step`` rows at a time, in row order."""
        rng = np.random.default_rng(self.seed)
        for start in range(0, self.n, step):
            stop = min(self.n, start + step)
            if self._real is not None:
                yield self._real[start:stop]
                continue
            vecs = rng.standard_normal((stop - start, DIM)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            yield vecs
