"""The vector index's layout (migration 0007): bounded bytes, one copy per vector, exact KNN.

In process, on real SQLite files with sqlite-vec: a store written by the 0005
layout (a partition, and so a 1.6 MB chunk, per session) is migrated and must
keep every vector bit for bit, hold it once, shrink when vacuumed, and answer
nearest-neighbour queries exactly as a brute-force reference over the same
vectors does. The daemon-level test of the same migration is in
test_vector_layout_daemon.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine, select, text, update

from memoryd.store import driver, vectors
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.migrate import upgrade
from memoryd.store.schema import memories

from ._legacy import build_0006_store, unit_vectors

N_SESSIONS = 40  # one memory each: 40 partitions in the old layout
N_AGENT = 30  # per agent, two agents
N_ORG = 10


def owner_of(i: int) -> tuple[str, str, str, str]:
    """Rows 0..39: a session each; then two agents; then org. Every 7th row is archived."""
    status = "archived" if i % 7 == 6 else "active"
    kind = "procedure" if i % 5 == 0 else "fact"
    if i < N_SESSIONS:
        return "session", f"sess-{i:03d}", kind, status
    if i < N_SESSIONS + 2 * N_AGENT:
        return "agent", f"agent-{(i - N_SESSIONS) % 2}", kind, status
    return "org", "", kind, status


N = N_SESSIONS + 2 * N_AGENT + N_ORG


def file_bytes(db: Path) -> bytes:
    """The database file after a full checkpoint (the WAL's pages copied in, the WAL emptied),
    without its empty pages (most of an old-layout file; searching them finds nothing): all
    zeros, or an overflow page's 4-byte link followed by zeros."""
    raw = driver.connect(str(db))
    try:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()
    data = db.read_bytes()
    zero = bytes(PAGE - 4)
    return b"".join(p for p in (data[i:i + PAGE] for i in range(0, len(data), PAGE)) if p[4:] != zero)


PAGE = 4096


def copies(data: bytes, vec: np.ndarray) -> int:
    """How many copies of ``vec`` the file holds. A vector inside a vec0 chunk may straddle an
    overflow page boundary (4-byte page links every 4,092 bytes), so three 32-byte pieces far
    apart are counted and the best kept: at most one of them can be cut."""
    blob = vec.tobytes()
    return max(data.count(blob[o:o + 32]) for o in (0, len(blob) // 2, len(blob) - 32))


def exact_knn(vecs: dict[int, np.ndarray], rows: dict[int, tuple[str, str, str, str]], query: np.ndarray,
              keys: set[str], statuses: set[str], kind: str | None, k: int) -> list[int]:
    """Brute force: the k seqs nearest ``query`` by cosine among rows that pass the filters."""
    ok = [s for s, (scope, owner, kd, st) in rows.items()
          if f"{scope}:{owner}" in keys and st in statuses and (kind is None or kd == kind)]
    return sorted(ok, key=lambda s: -float(vecs[s] @ query))[:k]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    db = tmp_path_factory.mktemp("layout") / "memoryd.db"
    vecs = unit_vectors(N, seed=7)
    seqs = build_0006_store(db, [f"note {i} for the layout test" for i in range(N)], owner_of, vecs)
    before = file_bytes(db)
    before_size = db.stat().st_size
    engine = create_store_engine(f"sqlite:///{db}")
    upgrade(engine)
    after = file_bytes(db)
    reclaimed = vectors.reclaim_space(engine)
    out = {"db": db, "engine": engine, "vecs": dict(zip(seqs, vecs, strict=True)),
           "rows": {s: owner_of(i) for i, s in enumerate(seqs)}, "before": before, "after": after,
           "reclaimed": reclaimed, "vacuumed_size": db.stat().st_size, "before_size": before_size}
    yield out
    engine.dispose()


def test_the_old_layout_costs_a_chunk_per_session_and_two_copies(migrated: dict[str, object]) -> None:
    before, size = migrated["before"], migrated["before_size"]
    assert isinstance(before, bytes) and isinstance(size, int)
    # 43 partitions (40 sessions, 2 agents, org) of a 1,024 x 1,536-byte chunk each.
    assert size > 43 * 1024 * 1536
    vecs = migrated["vecs"]
    assert isinstance(vecs, dict)
    assert all(copies(before, v) == 2 for v in vecs.values())


def test_migration_keeps_every_vector_bit_for_bit_and_stores_it_once(migrated: dict[str, object]) -> None:
    engine, vecs, after = migrated["engine"], migrated["vecs"], migrated["after"]
    assert isinstance(engine, Engine) and isinstance(vecs, dict) and isinstance(after, bytes)
    with read_only(engine) as conn:
        stored = dict(conn.execute(text("SELECT memory_seq, vector FROM memory_vectors")).all())
        settings = dict(conn.execute(text("SELECT key, value FROM vector_settings")).all())
    assert set(stored) == set(vecs)
    assert all(stored[s] == v.tobytes() for s, v in vecs.items())
    assert settings == {"dim": "384", "model": "all-MiniLM-L6-v2"}
    # One copy each in the file: the index's. The old table's and old chunks' were zeroed.
    assert all(copies(after, v) == 1 for v in vecs.values())


def test_the_migrated_file_shrinks_when_vacuumed(migrated: dict[str, object]) -> None:
    before, vacuumed, reclaimed = migrated["before_size"], migrated["vacuumed_size"], migrated["reclaimed"]
    assert isinstance(before, int) and isinstance(vacuumed, int)
    assert reclaimed is not None and reclaimed[1] == vacuumed and reclaimed[0] >= before
    # 110 memories: 16 buckets' partly filled 128-vector chunks at most, plus the rows.
    assert vacuumed < 4 * 1024 * 1024
    assert before > 43 * 1024 * 1536


def test_the_migrated_index_has_the_new_layout_and_its_triggers(migrated: dict[str, object]) -> None:
    engine = migrated["engine"]
    assert isinstance(engine, Engine)
    with read_only(engine) as conn:
        objects = dict(conn.execute(text("SELECT name, type FROM sqlite_master WHERE name IN "
                                         "('memory_vectors', 'memory_vec', 'memory_vectors_meta', "
                                         "'vector_owners', 'vector_moves')")).all())
        triggers = set(conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'")).scalars())
        ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'memory_vec'")).scalar_one()
        owners = conn.execute(text("SELECT id, scope_key FROM vector_owners ORDER BY id")).all()
    assert objects == {"memory_vectors": "view", "memory_vec": "table", "memory_vectors_meta": "table",
                       "vector_owners": "table", "vector_moves": "table"}
    assert {"memory_vec_ad", "memory_vec_au_content", "memory_vec_au_meta", "memory_vec_au_owner",
            "memory_vectors_insert", "memory_vectors_delete"} <= triggers
    assert "bucket integer partition key" in ddl and "owner_id integer" in ddl and "chunk_size=128" in ddl
    # Owner ids in the order of each owner's first memory.
    assert [key for _, key in owners[:3]] == ["session:sess-000", "session:sess-001", "session:sess-002"]
    assert len(owners) == 43


READERS = [
    {"session:sess-003"},
    {"agent:agent-0", "org:"},
    {"agent:agent-0", "agent:agent-1", "session:sess-010", "org:"},
    {"org:"},
]


@pytest.mark.parametrize("keys", READERS, ids=["one-session", "agent+org", "four-owners", "org"])
@pytest.mark.parametrize(("statuses", "kind"), [({"active"}, None), ({"active", "archived"}, None),
                                                ({"active"}, "procedure")])
def test_knn_after_migration_equals_the_exact_reference(migrated: dict[str, object], keys: set[str],
                                                        statuses: set[str], kind: str | None) -> None:
    engine, vecs, rows = migrated["engine"], migrated["vecs"], migrated["rows"]
    assert isinstance(engine, Engine) and isinstance(vecs, dict) and isinstance(rows, dict)
    for q in range(5):
        query = unit_vectors(1, seed=100 + q)[0]
        with read_only(engine) as conn:
            got = vectors.knn(conn, query, k=15, scope_keys=sorted(keys), statuses=sorted(statuses),
                              kind=kind)
        expected = exact_knn(vecs, rows, query, keys, statuses, kind, 15)
        assert [s for s, _ in got] == expected
        assert [d for _, d in got] == pytest.approx([1 - float(vecs[s] @ query) for s in expected], abs=1e-5)


# -- a fresh store: the view, owner moves, bytes at many sessions ----------------------------------------
@pytest.fixture
def fresh(tmp_path: Path) -> Engine:
    engine = create_store_engine(f"sqlite:///{tmp_path / 'memoryd.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


def _insert(engine: Engine, owners: list[tuple[str, str]]) -> list[int]:
    stmt = text(
        "INSERT INTO memories (id, content, content_hash, kind, scope, owner, session_id, agent_id, "
        "status, importance, importance_raw, valid_from, recorded_at, metadata, derived) VALUES "
        "(:id, :c, :h, 'fact', :scope, :owner, :sid, :aid, 'active', 0.5, 0.5, :t, :t, '{}', 0)")
    with engine.begin() as conn:
        conn.execute(stmt, [{"id": f"m{i:06d}", "c": f"note {i}", "h": f"{i:064x}", "scope": scope,
                             "owner": owner, "sid": owner if scope == "session" else None,
                             "aid": owner if scope == "agent" else None, "t": "2026-03-01T12:00:00.000000Z"}
                            for i, (scope, owner) in enumerate(owners)])
        return [int(s) for s in conn.execute(text("SELECT seq FROM memories ORDER BY seq")).scalars()]


def _embed(engine: Engine, seqs: list[int], vecs: np.ndarray) -> None:
    with engine.begin() as conn:
        vectors.upsert(conn, [{"memory_seq": s, "model": "test", "dim": len(v), "vector": v.tobytes(),
                               "content_hash": "h", "embedded_at": "2026-03-01T12:00:00.000000Z"}
                              for s, v in zip(seqs, vecs, strict=True)])


def _vector_table_bytes(db: Path) -> int:
    """Pages of the vector index and its side tables (dbstat, through the standard library's
    SQLite, which has it; it only reads pages, so sqlite-vec need not be loaded)."""
    file_bytes(db)
    conn = sqlite3.connect(str(db))
    try:
        return int(conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'memory_vec%' OR name LIKE "
            "'sqlite_autoindex_memory_vec%' OR name IN ('vector_owners', 'sqlite_autoindex_vector_owners_1')"
        ).fetchone()[0])
    finally:
        conn.close()


def test_two_thousand_sessions_cost_under_two_kilobytes_a_vector(fresh: Engine, tmp_path: Path) -> None:
    n = 2000
    seqs = _insert(fresh, [("session", f"sess-{i:05d}") for i in range(n)])
    _embed(fresh, seqs, unit_vectors(n, seed=3))
    per_vector = _vector_table_bytes(tmp_path / "memoryd.db") / n
    # A 384-d float32 vector is 1,536 bytes; the old layout's partition per session cost 1.6 MB.
    assert 1536 < per_vector < 2000


def test_inserting_a_vector_again_replaces_it(fresh: Engine, tmp_path: Path) -> None:
    seqs = _insert(fresh, [("agent", "a"), ("agent", "a")])
    first, second = unit_vectors(2, seed=11), unit_vectors(1, seed=12)
    _embed(fresh, seqs, first)
    _embed(fresh, seqs[:1], second)
    with read_only(fresh) as conn:
        stored = dict(conn.execute(text("SELECT memory_seq, vector FROM memory_vectors")).all())
        assert vectors.stored_count(conn) == 2
    assert stored == {seqs[0]: second[0].tobytes(), seqs[1]: first[1].tobytes()}
    data = file_bytes(tmp_path / "memoryd.db")
    assert copies(data, first[0]) == 0 and copies(data, second[0]) == 1


def test_an_owner_change_moves_the_vector_and_drops_the_old_owners_id(fresh: Engine, tmp_path: Path) -> None:
    seqs = _insert(fresh, [("agent", "a"), ("agent", "b"), ("agent", "b")])
    vecs = unit_vectors(3, seed=21)
    _embed(fresh, seqs, vecs)
    with fresh.begin() as conn:
        conn.execute(update(memories).where(memories.c.seq == seqs[0]).values(owner="c", agent_id="c"))
    with read_only(fresh) as conn:
        to_c = vectors.knn(conn, vecs[0], k=5, scope_keys=["agent:c"], statuses=["active"], kind=None)
        to_a = vectors.knn(conn, vecs[0], k=5, scope_keys=["agent:a"], statuses=["active"], kind=None)
        to_b = vectors.knn(conn, vecs[0], k=5, scope_keys=["agent:b"], statuses=["active"], kind=None)
        owner_keys = set(conn.execute(text("SELECT scope_key FROM vector_owners")).scalars())
        moves = conn.execute(text("SELECT count(*) FROM vector_moves")).scalar_one()
    assert [s for s, _ in to_c] == [seqs[0]] and to_c[0][1] == pytest.approx(0.0, abs=1e-6)
    assert to_a == []
    assert sorted(s for s, _ in to_b) == seqs[1:]  # positive control
    assert owner_keys == {"agent:b", "agent:c"} and moves == 0
    assert copies(file_bytes(tmp_path / "memoryd.db"), vecs[0]) == 1


def test_reembed_rebuild_makes_an_index_like_the_migrations(fresh: Engine) -> None:
    with read_only(fresh) as conn:
        migrated = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'memory_vec'")).scalar_one()
    with fresh.begin() as conn:
        vectors.rebuild_index(conn, 384, "test")
        rebuilt = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'memory_vec'")).scalar_one()
        vectors.rebuild_index(conn, 768, "test")
        wider = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'memory_vec'")).scalar_one()
        assert vectors.index_dim(conn) == 768
    assert rebuilt == migrated
    assert wider == migrated.replace("float[384]", "float[768]")


def test_a_status_and_kind_change_reach_the_index(fresh: Engine) -> None:
    seqs = _insert(fresh, [("agent", "a"), ("agent", "a")])
    vecs = unit_vectors(2, seed=31)
    _embed(fresh, seqs, vecs)
    with fresh.begin() as conn:
        conn.execute(update(memories).where(memories.c.seq == seqs[0])
                     .values(status="archived", kind="event"))
    with read_only(fresh) as conn:
        active = vectors.knn(conn, vecs[0], k=5, scope_keys=["agent:a"], statuses=["active"], kind=None)
        events = vectors.knn(conn, vecs[0], k=5, scope_keys=["agent:a"], statuses=["archived"], kind="event")
        count = conn.execute(select(memories.c.seq)).all()
    assert [s for s, _ in active] == [seqs[1]]
    assert [s for s, _ in events] == [seqs[0]]
    assert len(count) == 2
