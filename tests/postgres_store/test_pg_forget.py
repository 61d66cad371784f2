"""Forget on PostgreSQL: the retention pass's erase (store/lifecycle.py) leaves no text, no
lexemes and no vector of the row (the generated tsvector follows the content; a trigger drops
the vector when the content changes, as on SQLite)."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import Engine, select, text, update

from memoryd.store import lifecycle, vectors
from memoryd.store.schema import memories, memory_vectors
from tests.postgres_store.test_pg_search_legs import NOW, NOW_S, _lexical, _write

pytestmark = pytest.mark.postgres


def _embed_all(engine: Engine) -> dict[str, int]:
    with engine.begin() as conn:
        seqs = dict(conn.execute(select(memories.c.id, memories.c.seq)).all())
        rng = np.random.default_rng(0)
        vectors.upsert(conn, [{"memory_seq": seq, "model": "test", "dim": 384,
                               "vector": vectors.to_blob(rng.standard_normal(384).astype(np.float32)),
                               "content_hash": "h", "embedded_at": NOW_S} for seq in seqs.values()])
    return seqs


def test_erase_leaves_no_text_lexemes_or_vector_of_the_row(pg_engine: Engine) -> None:
    doomed, kept = _write(pg_engine, ["the vault password is hunter2", "the vault door is grey"], owner="me")
    seqs = _embed_all(pg_engine)
    with pg_engine.begin() as conn:
        assert lifecycle.erase(conn, doomed, NOW, "test") == 1
    with pg_engine.connect() as conn:
        content, lexemes = conn.execute(
            text("SELECT content, content_tsv::text FROM memories WHERE id = :id"), {"id": doomed}).one()
        vector_rows = conn.execute(select(memory_vectors.c.memory_seq)).scalars().all()
    assert content is None and lexemes == ""
    assert vector_rows == [seqs[kept]]  # the kept row's vector is the positive control
    assert [r["id"] for r in _lexical(pg_engine, "vault", "me")] == [kept]


def test_changed_content_drops_the_stale_vector(pg_engine: Engine) -> None:
    (mid,) = _write(pg_engine, ["the cache is warmed at 02:00"], owner="me")
    _embed_all(pg_engine)
    with pg_engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == mid).values(importance=0.9))
    assert _vectors(pg_engine) == 1  # other columns leave the vector alone
    with pg_engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == mid)
                     .values(content="the cache is warmed at 03:00"))
    assert _vectors(pg_engine) == 0


def _vectors(engine: Engine) -> int:
    with engine.connect() as conn:
        return vectors.stored_count(conn)
