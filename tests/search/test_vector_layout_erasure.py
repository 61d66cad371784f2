"""Erased vectors leave no floats in the file, whichever path erases them.

Each test writes vectors whose bytes are unique, erases one by one path
(``vectors.erase``, a deleted row, changed content, a forget, a re-embed, an
index rebuild, a delete through the view), checkpoints the WAL and searches
the database file for the erased vector's bytes; another memory's vector must
still be found (the positive control). The store's connections run with
``secure_delete`` off, so what is shown is memoryd's own overwriting, not
SQLite's zeroing of freed space (which the daemon's connections also turn on).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlite_vec
from sqlalchemy import Connection, Engine, event, text, update

from memoryd.store import driver, vectors
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.migrate import upgrade
from memoryd.store.schema import memories

from ._legacy import unit_vectors

Store = tuple[Engine, Path, list[int], np.ndarray]


def copies(data: bytes, vec: np.ndarray) -> int:
    """Copies of ``vec`` in ``data``: the best count of three 32-byte pieces far apart (a
    vector in a vec0 chunk may straddle an overflow page's 4-byte link; one piece at most)."""
    blob = vec.tobytes()
    return max(data.count(blob[o:o + 32]) for o in (0, len(blob) // 2, len(blob) - 32))


def on_disk(db: Path) -> bytes:
    """The database file after a full checkpoint, plus whatever the WAL still holds."""
    raw = driver.connect(str(db))
    try:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()
    wal = db.with_name(db.name + "-wal")
    return db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """Four embedded memories (agents a and b) on connections with secure_delete off."""
    db = tmp_path / "memoryd.db"
    engine = create_store_engine(f"sqlite:///{db}")

    @event.listens_for(engine, "connect")
    def _insecure(dbapi_conn: Any, _record: Any) -> None:  # runs after memoryd's own hook
        dbapi_conn.execute("PRAGMA secure_delete = 0")

    upgrade(engine)
    stmt = text(
        "INSERT INTO memories (id, content, content_hash, kind, scope, owner, agent_id, status, "
        "importance, importance_raw, valid_from, recorded_at, metadata, derived) VALUES "
        "(:id, :c, :h, 'fact', 'agent', :o, :o, 'active', 0.5, 0.5, :t, :t, '{}', 0)")
    vecs = unit_vectors(4, seed=41)
    with engine.begin() as conn:
        assert conn.exec_driver_sql("PRAGMA secure_delete").scalar() == 0
        conn.execute(stmt, [{"id": f"m{i}", "c": f"secret note {i}", "h": f"{i:064x}", "o": "ab"[i % 2],
                             "t": "2026-03-01T12:00:00.000000Z"} for i in range(4)])
        seqs = [int(s) for s in conn.execute(text("SELECT seq FROM memories ORDER BY seq")).scalars()]
        vectors.upsert(conn, [{"memory_seq": s, "model": "test", "dim": 384, "vector": v.tobytes(),
                               "content_hash": "h", "embedded_at": "2026-03-01T12:00:00.000000Z"}
                              for s, v in zip(seqs, vecs, strict=True)])
    assert all(copies(on_disk(db), v) == 1 for v in vecs)
    yield engine, db, seqs, vecs
    engine.dispose()


def _erase_fn(conn: Connection, seq: int) -> None:
    assert vectors.erase(conn, [seq]) == 1


def _delete_row(conn: Connection, seq: int) -> None:
    conn.execute(memories.delete().where(memories.c.seq == seq))


def _change_content(conn: Connection, seq: int) -> None:
    conn.execute(update(memories).where(memories.c.seq == seq).values(content="rewritten"))


def _forget(conn: Connection, seq: int) -> None:
    # What store/lifecycle.erase writes: no content, no owner, status forgotten.
    conn.execute(update(memories).where(memories.c.seq == seq).values(
        content=None, owner="", agent_id=None, status="forgotten"))


def _delete_through_view(conn: Connection, seq: int) -> None:
    conn.execute(text("DELETE FROM memory_vectors WHERE memory_seq = :s"), {"s": seq})


def _reembed(conn: Connection, seq: int) -> None:
    new = unit_vectors(1, seed=99)[0]
    vectors.upsert(conn, [{"memory_seq": seq, "model": "test", "dim": 384, "vector": new.tobytes(),
                           "content_hash": "h2", "embedded_at": "2026-03-02T12:00:00.000000Z"}])


PATHS: dict[str, Callable[[Connection, int], None]] = {
    "vectors.erase": _erase_fn, "row deleted": _delete_row, "content changed": _change_content,
    "forgotten": _forget, "deleted through the view": _delete_through_view, "re-embedded": _reembed,
}


@pytest.mark.parametrize("path", list(PATHS))
def test_an_erased_vector_leaves_no_bytes(store: Store, path: str) -> None:
    engine, db, seqs, vecs = store
    with engine.begin() as conn:
        PATHS[path](conn, seqs[0])
    data = on_disk(db)
    assert copies(data, vecs[0]) == 0
    assert all(copies(data, v) == 1 for v in vecs[1:])  # positive control
    with read_only(engine) as conn:
        left = conn.execute(text("SELECT count(*) FROM memory_vectors WHERE memory_seq = :s"),
                            {"s": seqs[0]}).scalar_one()
    assert left == (1 if path == "re-embedded" else 0)


def test_an_owner_change_keeps_one_copy_and_no_stash(store: Store) -> None:
    engine, db, seqs, vecs = store
    with engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.seq == seqs[0]).values(owner="c", agent_id="c"))
    # The vector was set aside in vector_moves for the move; that copy is zeroed, not left
    # in the table's free space.
    assert copies(on_disk(db), vecs[0]) == 1


def test_an_index_rebuild_leaves_no_vector(store: Store) -> None:
    engine, db, _seqs, vecs = store
    with engine.begin() as conn:
        assert vectors.rebuild_index(conn, 768, "other") == 4
    data = on_disk(db)
    assert all(copies(data, v) == 0 for v in vecs)


def test_what_sqlite_vec_does_alone(tmp_path: Path) -> None:
    """The finding behind vectors.erase: sqlite-vec 0.1.6's DELETE only cleared the slot's
    validity bit and left the floats in the chunk; from 0.1.7 it zeroes them (0.1.9 is
    installed here). memoryd zeroes before every delete either way."""
    version = tuple(int(p) for p in sqlite_vec.__version__.split(".")[:3])
    db = tmp_path / "bare.db"
    conn = driver.connect(str(db))
    conn.isolation_level = None
    conn.execute("PRAGMA secure_delete = 0")
    conn.execute("CREATE VIRTUAL TABLE v USING vec0(id integer primary key, e float[384])")
    vecs = unit_vectors(2, seed=5)
    conn.executemany("INSERT INTO v (id, e) VALUES (?, ?)", [(1, vecs[0].tobytes()), (2, vecs[1].tobytes())])
    conn.execute("DELETE FROM v WHERE id = 1")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = db.read_bytes()
    assert copies(data, vecs[1]) == 1
    if version >= (0, 1, 7):
        assert copies(data, vecs[0]) == 0
    else:
        assert copies(data, vecs[0]) == 1
