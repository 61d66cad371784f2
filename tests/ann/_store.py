"""A migrated store (SQLite, or PostgreSQL given its URL) filled through memoryd's own vector path,
for the ANN tests."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine, insert, text

from memoryd.clock import to_rfc3339, utcnow
from memoryd.store import migrate, vectors
from memoryd.store.annindex.index_set import source_for
from memoryd.store.engine import create_store_engine
from memoryd.store.ids import new_memory_id
from memoryd.store.schema import memories

DIM = 384


def clustered(n: int, seed: int, centres: int = 64) -> np.ndarray:
    """Unit vectors around ``centres`` random directions (closer to real embeddings than noise)."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, DIM)).astype(np.float32)
    x = c[rng.integers(0, centres, n)] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_store(path: Path | str, owners: dict[str, int], seed: int = 1, kinds: tuple[str, ...] = ("fact",),
               ) -> tuple[Engine, dict[str, list[int]], np.ndarray]:
    """A store with ``owners[scope:owner]`` rows each, every row embedded; returns the engine,
    each owner's seqs, and the vectors in seq order. ``path``: a SQLite file, or a database URL."""
    engine = create_store_engine(path if isinstance(path, str) else f"sqlite:///{path}")
    migrate.upgrade(engine)
    stamp = to_rfc3339(utcnow())
    seqs: dict[str, list[int]] = {}
    total = sum(owners.values())
    vecs = clustered(total, seed)
    with engine.begin() as conn:
        source_for(engine).log.ensure(conn)
        i = 0
        for key, n in owners.items():
            scope, owner = key.split(":", 1)
            rows: list[dict[str, Any]] = []
            for j in range(n):
                content = f"note {i + j} of {key}"
                rows.append({"id": new_memory_id(), "content": content,
                             "content_hash": hashlib.sha256(content.encode()).hexdigest(),
                             "kind": kinds[j % len(kinds)], "scope": scope, "owner": owner,
                             "status": "active", "importance": 0.5, "importance_raw": 0.5,
                             "valid_from": stamp, "recorded_at": stamp, "metadata": {}, "derived": False,
                             "agent_id": owner if scope == "agent" else None,
                             "user_id": owner if scope == "user" else None})
            conn.execute(insert(memories), rows)
            i += n
        got = [int(r[0]) for r in conn.execute(text("SELECT seq FROM memories ORDER BY seq"))]
        vectors.upsert(conn, [{"memory_seq": s, "model": "test-model", "dim": DIM, "vector": v.tobytes(),
                               "content_hash": "t", "embedded_at": stamp}
                              for s, v in zip(got, vecs, strict=True)])
        start = 0
        for key, n in owners.items():
            seqs[key] = got[start:start + n]
            start += n
    return engine, seqs, vecs
