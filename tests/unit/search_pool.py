"""What a hybrid search reads of its fused pool, shared by the SQLite and PostgreSQL tests.

With the learned ranking on (the daemon's default), a pool that holds a conversation turn is
read whole (search.hydrate) and ordered by the model; any other pool keeps its fused order, so
only its top k is read. Reading the whole pool of notes cost about 0.45 ms a search at 10k
memories (bench/search.py, 10k hybrid p50 3.71-3.81 ms before the learned ranking, 4.14-4.36 ms
with it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, select

from memoryd.clock import to_rfc3339
from memoryd.store import search, vectors
from memoryd.store.engine import read_only
from memoryd.store.memories import NewMemory, WriteContext
from memoryd.store.schema import memories
from memoryd.store.scope import Reader
from memoryd.store.turns import TURN_KIND
from memoryd.store.writes import WriteUnit, commit_units

from .helpers import NOW, build_memory

CTX = WriteContext(actor="test:unit", passes=[], max_attempts=5, idempotency_ttl_s=86400.0)
QUERY = "deploy the payments worker"
K = 5


def _write(engine: Engine, rows: list[NewMemory]) -> list[str]:
    out = commit_units(engine, [WriteUnit(rows, actor="t")], CTX, NOW)
    return [r["id"] for unit in out for r in unit]


def _embed(engine: Engine, ids: list[str]) -> None:
    with engine.begin() as conn:
        rows = conn.execute(select(memories.c.seq).where(memories.c.id.in_(ids))).all()
        payload = []
        for (seq,) in rows:
            v = np.random.default_rng(seq).standard_normal(384).astype(np.float32)
            payload.append({"memory_seq": seq, "model": "test", "dim": 384,
                            "vector": vectors.to_blob(v / np.linalg.norm(v)),
                            "content_hash": f"h{seq}", "embedded_at": to_rfc3339(NOW)})
        vectors.upsert(conn, payload)


def check_only_a_pool_of_turns_is_read_whole(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    notes = [build_memory(f"note {i}: deploy the payments worker after the {i}th check", owner="me")
             for i in range(30)]
    turns = [dataclasses.replace(build_memory(f"turn {i}: shall we deploy the payments worker {i}?",
                                              owner="talk", session_id=f"s{i % 3}"), kind=TURN_KIND)
             for i in range(30)]
    _embed(engine, _write(engine, notes) + _write(engine, turns))
    query_vec = np.full(384, 384 ** -0.5, dtype=np.float32)

    read: list[int] = []
    real_hydrate = search.hydrate

    def counting(conn: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        read.append(len(rows))
        return real_hydrate(conn, rows)

    monkeypatch.setattr(search, "hydrate", counting)

    def run(owner: str, learned: bool) -> list[str]:
        req = search.SearchRequest(query=QUERY, k=K, reader=Reader(agent_id=owner), mode="hybrid")
        with read_only(engine) as conn:
            out = search.run(conn, req, NOW, query_vec, "off", learned_ranking=learned)
        assert out.mode_used == "hybrid", out.notices
        return [r["id"] for r in out.results]

    # Notes: the top k alone is read, and the answer is the fused order's.
    learned_notes = run("me", learned=True)
    assert read[-1] == K
    assert learned_notes == run("me", learned=False) and len(learned_notes) == K
    # Turns (positive control): the whole pool, both legs' rows, is read and ordered.
    assert len(run("talk", learned=True)) == K
    assert read[-1] > K
