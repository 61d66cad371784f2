"""The two search legs in process: the lexical leg's widening fetch and the partitioned vector index.

The daemon-level suites (tests/search) test the same paths over the socket;
these reach the edges cheaply: a reader whose rows rank below hundreds of
other owners' matches, the exhaustive fallback, and a row whose owner changes
moving between vector partitions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, select, update

from memoryd.clock import to_rfc3339
from memoryd.store import search, vectors
from memoryd.store.engine import read_only
from memoryd.store.memories import WriteContext
from memoryd.store.schema import memories
from memoryd.store.scope import Reader
from memoryd.store.sqlite import lexical as sqlite_lexical
from memoryd.store.writes import WriteUnit, commit_units

from .helpers import NOW, build_memory

CTX = WriteContext(actor="test:unit", passes=[], max_attempts=5, idempotency_ttl_s=86400.0)
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


@pytest.fixture
def crowded_lexical(engine: Engine) -> tuple[Engine, set[str]]:
    # 1,000 rows of another owner that rank above every one of the reader's rows.
    _write(engine, [f"deploy deploy deploy crowd note {i}" for i in range(1000)], owner="crowd")
    mine = _write(engine, [f"the deploy of service {i} went out late on a long and quiet Friday "
                           "evening after the release train had already left" for i in range(12)],
                  owner="me")
    return engine, set(mine)


def test_lexical_leg_fetches_past_other_owners_better_matches(
        crowded_lexical: tuple[Engine, set[str]]) -> None:
    engine, mine = crowded_lexical
    assert search.LEX_MIN_FETCH < 1000  # the reader's rows are not in the first fetch
    got = _lexical(engine, "deploy", "me")
    assert len(got) == 10
    assert {r["id"] for r in got} <= mine
    # Positive control: the crowd owner sees its own rows first.
    assert {r["owner"] for r in _lexical(engine, "deploy", "crowd")} == {"crowd"}


def test_lexical_leg_falls_back_to_the_exhaustive_join(crowded_lexical: tuple[Engine, set[str]],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    engine, mine = crowded_lexical
    monkeypatch.setattr(sqlite_lexical, "LEX_MAX_FETCH", 300)  # one round of 200, then the join
    got = _lexical(engine, "deploy", "me")
    assert len(got) == 10 and {r["id"] for r in got} <= mine
    assert got == sorted(got, key=lambda r: -r["bm25"])


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
    return v / np.linalg.norm(v)


def _embed(engine: Engine, ids: list[str]) -> dict[str, np.ndarray]:
    vecs = {}
    with engine.begin() as conn:
        rows = conn.execute(select(memories.c.id, memories.c.seq).where(memories.c.id.in_(ids))).all()
        payload = []
        for i, (mid, seq) in enumerate(rows):
            vecs[mid] = _unit(seq)
            payload.append({"memory_seq": seq, "model": "test", "dim": 384,
                            "vector": vectors.to_blob(vecs[mid]), "content_hash": f"h{i}",
                            "embedded_at": NOW_S})
        vectors.upsert(conn, payload)
    return vecs


def _knn_ids(engine: Engine, query: np.ndarray, keys: list[str], k: int = 5,
             statuses: tuple[str, ...] = ("active",)) -> list[str]:
    with read_only(engine) as conn:
        hits = vectors.knn(conn, query, k=k, scope_keys=keys, statuses=list(statuses), kind=None)
        seqs = [seq for seq, _ in hits]
        by_seq = dict(conn.execute(select(memories.c.seq, memories.c.id)
                                   .where(memories.c.seq.in_(seqs))).all())
    return [by_seq[s] for s in seqs]


def test_knn_merges_partitions_into_one_nearest_first_list(engine: Engine) -> None:
    a = _write(engine, [f"alpha note {i}" for i in range(6)], owner="a")
    b = _write(engine, [f"beta note {i}" for i in range(6)], owner="b")
    vecs = _embed(engine, a + b)
    query = vecs[b[2]]
    both = _knn_ids(engine, query, ["agent:a", "agent:b"], k=5)
    assert both[0] == b[2] and len(both) == 5
    exact = sorted(a + b, key=lambda m: -float(vecs[m] @ query))[:5]
    assert both == exact
    only_a = _knn_ids(engine, query, ["agent:a"], k=5)
    assert set(only_a) <= set(a) and len(only_a) == 5


def test_an_owner_change_moves_the_vector_to_the_new_partition(engine: Engine) -> None:
    a = _write(engine, ["moves between owners", "stays with a"], owner="a")
    vecs = _embed(engine, a)
    with engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == a[0]).values(owner="b", agent_id="b"))
    assert a[0] not in _knn_ids(engine, vecs[a[0]], ["agent:a"])
    assert _knn_ids(engine, vecs[a[0]], ["agent:b"]) == [a[0]]
    assert _knn_ids(engine, vecs[a[1]], ["agent:a"]) == [a[1]]  # positive control


def test_a_status_change_is_seen_inside_the_partition(engine: Engine) -> None:
    a = _write(engine, ["will be archived", "stays active"], owner="a")
    vecs = _embed(engine, a)
    with engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == a[0]).values(status="archived"))
    assert a[0] not in _knn_ids(engine, vecs[a[0]], ["agent:a"])
    assert _knn_ids(engine, vecs[a[0]], ["agent:a"], statuses=("archived",)) == [a[0]]


# -- the legs' lookups on the driver -----------------------------------------------------
def _request(owner: str, **kw: Any) -> search.SearchRequest:
    return search.SearchRequest(query="note", k=10, reader=Reader(agent_id=owner), **kw)


def _seqs(engine: Engine, ids: list[str]) -> dict[str, int]:
    with read_only(engine) as conn:
        return dict(conn.execute(select(memories.c.id, memories.c.seq).where(memories.c.id.in_(ids))).all())


def test_candidates_keep_only_rows_that_pass_the_filters_with_each_calls_time(engine: Engine) -> None:
    mine = _write(engine, ["mine expires soon", "mine stays"], owner="me")
    theirs = _write(engine, ["theirs"], owner="other")
    later = "2099-01-01T00:00:00.000000Z"
    with engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == mine[0]).values(expires_at=later))
    seq = _seqs(engine, mine + theirs)
    with read_only(engine) as conn:
        now_rows = search.candidates(conn, _request("me"), NOW_S, list(seq.values()))
        # The same compiled statement with a later "now": the expired row drops out.
        after = search.candidates(conn, _request("me"), "2100-01-01T00:00:00.000000Z", list(seq.values()))
    assert {r["id"] for r in now_rows} == set(mine)  # the other owner's row never passes
    assert {r["id"] for r in after} == {mine[1]}
    assert set(now_rows[0]) == {c.name for c in search.CANDIDATE}


def test_candidates_compile_once_per_filter_shape(engine: Engine) -> None:
    from memoryd.store import prepared

    ids = _write(engine, ["one note", "another note"], owner="me")
    seqs = list(_seqs(engine, ids).values())
    with read_only(engine) as conn:
        search.candidates(conn, _request("me"), NOW_S, seqs)
        before = len(prepared._cache)
        search.candidates(conn, _request("me"), NOW_S, seqs[:1])  # same shape, other values
        assert len(prepared._cache) == before
        search.candidates(conn, _request("me", kind="fact"), NOW_S, seqs)  # a new shape
        assert len(prepared._cache) == before + 1


def test_the_prepared_cache_is_bounded(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from memoryd.store import prepared

    monkeypatch.setattr(prepared, "_cache", {})
    monkeypatch.setattr(prepared, "CACHE_MAX", 3)
    ids = _write(engine, ["a note"], owner="me")
    seqs = list(_seqs(engine, ids).values())
    with read_only(engine) as conn:
        for owner in ("me", "u1", "u2", "u3", "u4"):
            search.candidates(conn, _request(owner), NOW_S, seqs)
        assert len(prepared._cache) == 3
        # An evicted shape compiles again and still answers.
        assert [r["id"] for r in search.candidates(conn, _request("me"), NOW_S, seqs)] == ids


def test_hydrate_decodes_json_and_booleans_like_the_orm_row(engine: Engine) -> None:
    [mid] = _write(engine, ["hydrated note"], owner="me")
    with engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == mid)
                     .values(metadata={"ticket": "ENG-1", "tags": ["a", "b"]}, derived=True))
    seq = _seqs(engine, [mid])[mid]
    with read_only(engine) as conn:
        [row] = search.hydrate(conn, [{"seq": seq, "score": 0.5}])
        core = dict(conn.execute(select(memories).where(memories.c.seq == seq)).one()._mapping)
    assert row["metadata"] == {"ticket": "ENG-1", "tags": ["a", "b"]}
    assert row["derived"] is True
    assert row["score"] == 0.5
    assert {k: v for k, v in row.items() if k != "score"} == core


def test_pending_embeds_probes_open_embed_jobs(engine: Engine) -> None:
    from memoryd.queue import jobs as jobq

    with read_only(engine) as conn:
        assert search.pending_embeds(conn) is False
    with engine.begin() as conn:
        jobq.enqueue_many(conn, [("classify", "mem_x")], now=0.0, max_attempts=3)
    with read_only(engine) as conn:
        assert search.pending_embeds(conn) is False  # another pass's job does not count
    with engine.begin() as conn:
        jobq.enqueue_many(conn, [("embed", "mem_x")], now=0.0, max_attempts=3)
    with read_only(engine) as conn:
        assert search.pending_embeds(conn) is True


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
def test_the_legs_look_rows_up_by_key(crowded_lexical: tuple[Engine, set[str]], analyzed: bool) -> None:
    """The candidate check (each leg's hits against scope, status and time) and the lexical
    leg's one statement visit memories by rowid, one lookup per hit. Left to choose, SQLite's
    planner walked ix_memories_status per hit (no statistics) or every row of the reader by
    ix_memories_identity (after ANALYZE) instead. Checked on the query plan, not the clock."""
    engine, _mine = crowded_lexical
    if analyzed:
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
    req = search.SearchRequest(query="deploy", k=10, reader=Reader(agent_id="me"))
    plans = {}
    with read_only(engine) as conn:
        assert search.lexical(conn, req, NOW_S, 10)
        assert search.candidates(conn, req, NOW_S, [1, 2, 3]) is not None
        for key, stmt in prepared_statements(conn, ("search.lexical", "search.candidates")).items():
            values = {"match": '"deploy"', "fetch": 200, "now": NOW_S, "seqs": "[1, 2, 3]"}
            args = tuple(values.get(n, stmt.defaults.get(n)) for n in stmt.names or ())
            plans[key] = " | ".join(str(r[-1]) for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + stmt.sql, args))
    assert set(plans) == {"search.lexical", "search.candidates"}
    for key, plan in plans.items():
        assert "SEARCH memories USING INTEGER PRIMARY KEY (rowid=?)" in plan, (key, plan)
        assert "ix_memories" not in plan, (key, plan)
    # FTS5 ranks its matches once, first, as the outer loop.
    assert plans["search.lexical"].startswith("CO-ROUTINE hits | SCAN memories_fts VIRTUAL TABLE")


def prepared_statements(conn: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The compiled statements cached under ``names`` for this connection's dialect."""
    from memoryd.store import prepared

    return {key[1][0]: stmt for key, stmt in list(prepared._cache.items())
            if key[0] == conn.dialect.name and isinstance(key[1], tuple) and key[1][0] in names}
