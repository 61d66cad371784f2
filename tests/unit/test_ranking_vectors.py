"""The learned ranking reads the pool's stored vectors (store/vectors.py ``stored``) inside a
hybrid search, on SQLite; tests/postgres_store/test_pg_ranking_vectors.py runs the same checks
on PostgreSQL.

Maya's employer is said in March (session s1) and again in May (s2), their stored vectors
alike; the March turn is nearer the query on both legs, so fused order puts it first. With the
vectors read, the learned ranking's ``said_later`` puts the May turn above it; the control is
the same store with the May turn's vector unlike March's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import Engine, select, update

from memoryd.clock import to_rfc3339
from memoryd.store import search, vectors
from memoryd.store.engine import read_only
from memoryd.store.memories import WriteContext
from memoryd.store.schema import memories
from memoryd.store.scope import Reader
from memoryd.store.writes import WriteUnit, commit_units
from tests.unit.helpers import NOW, build_memory

CTX = WriteContext(actor="test:ranking", passes=[], max_attempts=5, idempotency_ttl_s=86400.0)
NOW_S = to_rfc3339(NOW)
DIM = 384
TURNS = [  # text, session, occurred_at
    ("Maya: I work at Acme on the billing team, and I have for a year.", "s1", "2024-03-01T10:00:00Z"),
    ("Maya: I work at Globex on the billing team now.", "s2", "2024-05-01T10:00:00Z"),
    *[(f"Sam: lunch plan number {i} at the usual place", f"f{i}", f"2024-04-{i + 1:02d}T12:00:00Z")
      for i in range(8)],
]
QUERY = "Where does Maya work on the billing team?"


def _unit(v: np.ndarray) -> np.ndarray:  # float32, as the embedder gives
    return (v / np.linalg.norm(v)).astype(np.float32)


def store_turns(engine: Engine, may_like_march: bool) -> tuple[list[str], list[int], dict[int, np.ndarray]]:
    """Write the turns (conversation turns of their sessions) with stored vectors; return their
    ids, seqs and vectors by seq. The query's vector is the first of the orthonormal axes."""
    units = [WriteUnit([build_memory(t) for t, _, _ in TURNS], actor="t")]
    ids = [r["id"] for unit in commit_units(engine, units, CTX, NOW) for r in unit]
    rng = np.random.default_rng(7)
    axes = np.linalg.qr(rng.standard_normal((DIM, len(TURNS) + 1)))[0].T  # orthonormal
    query, other = axes[0], axes[1:]
    march = 0.8 * query + 0.6 * other[0]
    # Like March (cosine 0.98), or not (0.62, below features.py's SAME_SUBJECT): 0.78 to the query.
    may = 0.78 * query + (0.6 * other[0] + 0.15 * other[1] if may_like_march else 0.626 * other[1])
    vecs = [_unit(march), _unit(may), *(_unit(other[i]) for i in range(2, len(TURNS)))]
    with engine.begin() as conn:
        seqs = []
        for mid, (_, session, when), v in zip(ids, TURNS, vecs, strict=True):
            conn.execute(update(memories).where(memories.c.id == mid).values(
                kind="conversation", session_id=session, occurred_at=when))
            seq = int(conn.execute(select(memories.c.seq).where(memories.c.id == mid)).scalar_one())
            seqs.append(seq)
            vectors.upsert(conn, [{"memory_seq": seq, "model": "test", "dim": DIM,
                                   "vector": vectors.to_blob(v), "content_hash": "h", "embedded_at": NOW_S}])
    return ids, seqs, dict(zip(seqs, vecs, strict=True))


def hybrid(engine: Engine) -> list[dict[str, Any]]:
    query = np.linalg.qr(np.random.default_rng(7).standard_normal((DIM, len(TURNS) + 1)))[0].T[0]
    req = search.SearchRequest(query=QUERY, k=5, reader=Reader(agent_id="a1"), explain=True)
    with read_only(engine) as conn:
        out = search.run(conn, req, NOW, query, None, learned_ranking=True)
    assert out.mode_used == "hybrid", out.notices
    return out.results


def check_stored_reads_the_vectors_of_the_seqs_asked(engine: Engine) -> None:
    _, seqs, vecs = store_turns(engine, may_like_march=True)
    with engine.begin() as conn:
        vectors.erase(conn, [seqs[-1]])
    with read_only(engine) as conn:
        got = vectors.stored(conn, [*seqs[:3], seqs[-1], 10 ** 9])
        assert vectors.stored(conn, []) == {}
    assert sorted(got) == sorted(seqs[:3])  # the erased and the unknown seq have none
    for seq in seqs[:3]:
        assert got[seq].dtype == np.float32 and np.array_equal(got[seq], vecs[seq])


def check_a_search_ranks_the_statement_said_again_later_below_it(engine: Engine, like: bool) -> None:
    ids, _, _ = store_turns(engine, may_like_march=like)
    rows = hybrid(engine)
    march, may = ids[0], ids[1]
    fused = sorted(rows, key=lambda r: r["explain"]["fused_rank"])
    assert [r["id"] for r in fused][:2] == [march, may]  # fused order: March first
    ranked = [r["id"] for r in rows]
    if like:
        assert ranked.index(may) < ranked.index(march)
    else:  # the control: May's vector is unlike March's, nothing says March was superseded
        assert ranked.index(march) < ranked.index(may)


def test_stored_reads_the_vectors_of_the_seqs_asked(engine: Engine) -> None:
    check_stored_reads_the_vectors_of_the_seqs_asked(engine)


def test_a_search_puts_the_statement_said_again_later_below_it(engine: Engine) -> None:
    check_a_search_ranks_the_statement_said_again_later_below_it(engine, like=True)


def test_control_unlike_vectors_leave_the_older_statement_first(engine: Engine) -> None:
    check_a_search_ranks_the_statement_said_again_later_below_it(engine, like=False)
