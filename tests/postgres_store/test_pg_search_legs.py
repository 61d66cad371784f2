"""The PostgreSQL search legs in process: tsvector + ts_rank_cd, and pgvector HNSW KNN with the
scope filter inside the search, in a store crowded by another owner's nearer rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, select, text, update

from memoryd.clock import to_rfc3339
from memoryd.store import search, vectors
from memoryd.store.engine import read_only
from memoryd.store.memories import WriteContext
from memoryd.store.schema import memories, memory_vectors
from memoryd.store.scope import Reader
from memoryd.store.writes import WriteUnit, commit_units
from tests.unit.helpers import NOW, build_memory
from tests.unit.search_pool import check_only_a_pool_of_turns_is_read_whole

pytestmark = pytest.mark.postgres

CTX = WriteContext(actor="test:pg", passes=[], max_attempts=5, idempotency_ttl_s=86400.0)
NOW_S = to_rfc3339(NOW)


def _write(engine: Engine, texts: list[str], owner: str) -> list[str]:
    units = [WriteUnit([build_memory(t, owner=owner) for t in texts[i:i + 500]], actor="t")
             for i in range(0, len(texts), 500)]
    out = commit_units(engine, units, CTX, NOW)
    return [r["id"] for unit in out for r in unit]


def _lexical(engine: Engine, query: str, owner: str, k: int = 10) -> list[dict[str, Any]]:
    req = search.SearchRequest(query=query, k=k, reader=Reader(agent_id=owner), mode="lexical")
    with read_only(engine) as conn:
        return search.lexical(conn, req, NOW_S, k)


def test_lexical_leg_finds_the_readers_rows_past_other_owners_better_matches(pg_engine: Engine) -> None:
    _write(pg_engine, [f"deploy deploy deploy crowd note {i}" for i in range(1000)], owner="crowd")
    mine = set(_write(pg_engine, [f"the deploy of service {i} went out late on a quiet Friday"
                                  for i in range(12)], owner="me"))
    got = _lexical(pg_engine, "deploy", "me")
    assert len(got) == 10 and {r["id"] for r in got} <= mine
    assert got == sorted(got, key=lambda r: -r["bm25"])
    # Positive control: the crowd's rows rank for the crowd.
    assert {r["owner"] for r in _lexical(pg_engine, "deploy", "crowd")} == {"crowd"}


def test_lexical_words_are_or_ed_stemmed_and_never_parsed_as_tsquery_syntax(pg_engine: Engine) -> None:
    ids = _write(pg_engine, ["the billing service restarts nightly", "payments moved to Stripe",
                             "unrelated note about lunch"], owner="me")
    got = [r["id"] for r in _lexical(pg_engine, "what restarted the billing thing?", "me")]
    assert got[0] == ids[0] and ids[2] not in got
    # Operators and quotes in user text are words (or nothing), never syntax errors.
    hostile_queries = ["billing & !payments", "stripe:* | (lunch", "'); DROP TABLE memories; --"]
    for hostile in hostile_queries:
        _lexical(pg_engine, hostile, "me")
    assert [r["id"] for r in _lexical(pg_engine, '"billing service"', "me")] == [ids[0]]
    assert [r["id"] for r in _lexical(pg_engine, '"service billing"', "me")] == []  # a phrase keeps order


def test_a_forgotten_rows_text_leaves_the_tsvector(pg_engine: Engine) -> None:
    ids = _write(pg_engine, ["the vault password rotates monthly", "the vault door is grey"], owner="me")
    with pg_engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == ids[0]).values(content=None))
        lexemes = conn.execute(text("SELECT content_tsv::text FROM memories WHERE id = :id"),
                               {"id": ids[0]}).scalar_one()
    assert lexemes == ""
    assert [r["id"] for r in _lexical(pg_engine, "vault", "me")] == [ids[1]]


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
    return v / np.linalg.norm(v)


def _embed(engine: Engine, vecs: dict[str, np.ndarray]) -> None:
    with engine.begin() as conn:
        seqs = dict(conn.execute(select(memories.c.id, memories.c.seq)
                                 .where(memories.c.id.in_(list(vecs)))).all())
        vectors.upsert(conn, [{"memory_seq": seqs[mid], "model": "test", "dim": 384,
                               "vector": vectors.to_blob(v), "content_hash": "h", "embedded_at": NOW_S}
                              for mid, v in vecs.items()])


def _knn_ids(engine: Engine, query: np.ndarray, keys: list[str], k: int = 5,
             statuses: tuple[str, ...] = ("active",)) -> list[str]:
    with read_only(engine) as conn:
        hits = vectors.knn(conn, query, k=k, scope_keys=keys, statuses=list(statuses), kind=None)
        by_seq = dict(conn.execute(select(memories.c.seq, memories.c.id)
                                   .where(memories.c.seq.in_([s for s, _ in hits]))).all())
    assert [d for _, d in hits] == sorted(d for _, d in hits)
    return [by_seq[s] for s, _ in hits]


def test_a_vector_reads_back_bit_for_bit(pg_engine: Engine) -> None:
    (mid,) = _write(pg_engine, ["one vector"], owner="me")
    vec = _unit(7)
    _embed(pg_engine, {mid: vec})
    with pg_engine.connect() as conn:
        blob = conn.execute(select(memory_vectors.c.vector)).scalar_one()
    assert blob == vectors.to_blob(vec)


def test_knn_filters_inside_the_search_when_other_owners_crowd_the_index(pg_engine: Engine) -> None:
    """3,000 vectors of another owner lie nearer the query than any of the reader's 8; whatever
    plan the planner picks, the reader gets its own 5 nearest."""
    query, mine = _crowded(pg_engine)
    got = _knn_ids(pg_engine, query, ["agent:me"], k=5)
    assert got == sorted(mine, key=lambda m: -float(mine[m] @ query))[:5]
    # Positive control: the crowd's own search returns the crowd.
    assert set(_knn_ids(pg_engine, query, ["agent:crowd"], k=5)).isdisjoint(mine)
    # No key, no access.
    assert _knn_ids(pg_engine, query, ["agent:nobody"], k=5) == []


def test_knn_follows_status_and_owner_changes_of_the_row(pg_engine: Engine) -> None:
    a = _write(pg_engine, ["will be archived", "moves to b", "stays"], owner="a")
    vecs = {mid: _unit(i) for i, mid in enumerate(a)}
    _embed(pg_engine, vecs)
    with pg_engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == a[0]).values(status="archived"))
        conn.execute(update(memories).where(memories.c.id == a[1]).values(owner="b", agent_id="b"))
    assert a[0] not in _knn_ids(pg_engine, vecs[a[0]], ["agent:a"])
    assert _knn_ids(pg_engine, vecs[a[0]], ["agent:a"], statuses=("archived",)) == [a[0]]
    assert _knn_ids(pg_engine, vecs[a[1]], ["agent:b"]) == [a[1]]
    assert _knn_ids(pg_engine, vecs[a[2]], ["agent:a"]) == [a[2]]  # positive control


def test_erase_and_row_delete_take_the_vector(pg_engine: Engine) -> None:
    a = _write(pg_engine, ["erased", "deleted", "kept"], owner="a")
    _embed(pg_engine, {mid: _unit(i) for i, mid in enumerate(a)})
    with pg_engine.begin() as conn:
        seqs = dict(conn.execute(select(memories.c.id, memories.c.seq)).all())
        assert vectors.erase(conn, [seqs[a[0]]]) == 1
        conn.execute(memories.delete().where(memories.c.id == a[1]))
    with pg_engine.connect() as conn:
        left = conn.execute(select(memory_vectors.c.memory_seq)).scalars().all()
    assert left == [seqs[a[2]]]


def _crowded(pg_engine: Engine) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """3,000 crowd vectors near the query, then 8 of the reader's farther away."""
    query = _unit(1)
    rng = np.random.default_rng(2)
    crowd = _write(pg_engine, [f"crowd {i}" for i in range(3000)], owner="crowd")
    near = {}
    for mid in crowd:
        v = query + 0.15 * rng.standard_normal(384).astype(np.float32) / np.sqrt(384)
        near[mid] = v / np.linalg.norm(v)
    _embed(pg_engine, near)
    mine = _write(pg_engine, [f"mine {i}" for i in range(8)], owner="me")
    my_vecs = {mid: _unit(100 + i) for i, mid in enumerate(mine)}
    _embed(pg_engine, my_vecs)
    return query, my_vecs


def _knn_on_the_index(pg_engine: Engine, query: np.ndarray, *settings: str) -> list[str]:
    """knn with the planner pushed onto the HNSW index (as it goes at scale, where the reader's
    rows are too many to sort), after checking that it really plans an index scan."""
    with read_only(pg_engine) as conn:
        conn.exec_driver_sql("SET LOCAL enable_sort = off")
        for setting in settings:
            conn.exec_driver_sql(f"SET LOCAL {setting}")
        plan = "\n".join(r[0] for r in conn.exec_driver_sql(
            "EXPLAIN SELECT v.memory_seq FROM memory_vectors v JOIN memories m ON m.seq = v.memory_seq "
            "WHERE (m.scope, m.owner) IN (('agent', 'me')) AND m.status IN ('active') "
            "ORDER BY v.vector <=> %(q)s::vector LIMIT 5", {"q": "[" + ",".join(["0.05"] * 384) + "]"}))
        assert "ix_memory_vectors_hnsw" in plan
        hits = vectors.knn(conn, query, k=5, scope_keys=["agent:me"], statuses=["active"], kind=None)
        by_seq = dict(conn.execute(select(memories.c.seq, memories.c.id)).all())
    return [by_seq[s] for s, _ in hits]


def test_knn_on_the_hnsw_index_walks_past_other_owners_nearer_vectors(pg_engine: Engine) -> None:
    """The first ef_search (200) graph candidates are all the crowd's: a post-filtered cut would
    return nothing; the iterative index scan keeps walking until the reader's 5 are found."""
    query, mine = _crowded(pg_engine)
    exact = sorted(mine, key=lambda m: -float(mine[m] @ query))[:5]
    assert _knn_on_the_index(pg_engine, query) == exact


def test_knn_falls_back_to_an_exact_scan_when_the_index_scan_stops_short(pg_engine: Engine) -> None:
    """hnsw.max_scan_tuples caps the iterative scan below the crowd's size: the index scan
    returns fewer than k, and the exact scan over the reader's rows answers instead."""
    query, mine = _crowded(pg_engine)
    exact = sorted(mine, key=lambda m: -float(mine[m] @ query))[:5]
    assert _knn_on_the_index(pg_engine, query, "hnsw.max_scan_tuples = 200") == exact


def test_only_a_pool_of_turns_is_read_whole(pg_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    check_only_a_pool_of_turns_is_read_whole(pg_engine, monkeypatch)
