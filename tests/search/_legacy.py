"""Stores as memoryd wrote them before migration 0007, for the vector-layout tests and bench/bytes.py.

A store at revision 0006 has the 0005 index: a vec0 partition per (scope,
owner) pair, each with a whole 1,024-vector chunk, and every vector stored a
second time in the ``memory_vectors`` table. Rows are written with the SQL of
that revision (not schema.py, which follows later migrations).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from alembic import command
from sqlalchemy import text

from memoryd.clock import to_rfc3339, utcnow
from memoryd.store import migrate
from memoryd.store.engine import create_store_engine
from memoryd.store.ids import new_memory_id

#: Recorded now: a daemon's retention pass expires session rows a day old.
STAMP = to_rfc3339(utcnow())
#: (scope, owner, kind, status) of row i.
Owner = Callable[[int], tuple[str, str, str, str]]

_MEMORY = text(
    "INSERT INTO memories (id, content, content_hash, kind, scope, owner, agent_id, user_id, project, "
    "session_id, status, importance, importance_raw, valid_from, recorded_at, metadata, derived) "
    "VALUES (:id, :content, :hash, :kind, :scope, :owner, :agent_id, :user_id, :project, :session_id, "
    ":status, 0.5, 0.5, :stamp, :stamp, '{}', 0)")
_FIELD = {"agent": "agent_id", "user": "user_id", "project": "project", "session": "session_id"}


def unit_vectors(n: int, seed: int, dim: int = 384) -> np.ndarray:
    """``n`` random unit float32 vectors (each one's bytes are unique in a file)."""
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype("<f4")
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def build_0006_store(db: Path, texts: Sequence[str], owner_of: Owner, vecs: np.ndarray) -> list[int]:
    """A store at revision 0006 holding ``texts`` with vectors ``vecs``; returns the rows' seqs."""
    engine = create_store_engine(f"sqlite:///{db}")
    cfg = migrate._alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0006")
    rows = []
    for i, content in enumerate(texts):
        scope, owner, kind, status = owner_of(i)
        fields = dict.fromkeys(_FIELD.values())
        if scope in _FIELD:
            fields[_FIELD[scope]] = owner
        rows.append({"id": new_memory_id(), "content": content, "kind": kind, "scope": scope,
                     "owner": owner, "status": status, "stamp": STAMP,
                     "hash": hashlib.sha256(content.encode()).hexdigest(), **fields})
    with engine.begin() as conn:
        conn.execute(_MEMORY, rows)
        seqs = [int(s) for s in conn.execute(text("SELECT seq FROM memories ORDER BY seq")).scalars()]
        conn.execute(text(
            "INSERT INTO memory_vectors (memory_seq, model, dim, vector, content_hash, embedded_at) "
            "SELECT :seq, 'all-MiniLM-L6-v2', 384, :vec, content_hash, :stamp FROM memories "
            "WHERE seq = :seq"),
            [{"seq": s, "vec": v.tobytes(), "stamp": STAMP} for s, v in zip(seqs, vecs, strict=True)])
        # The 0005 index, filled as its migration did.
        conn.execute(text(
            "INSERT INTO memory_vec (memory_seq, embedding, scope_key, status, kind) "
            "SELECT m.seq, v.vector, m.scope || ':' || m.owner, m.status, m.kind "
            "FROM memory_vectors v JOIN memories m ON m.seq = v.memory_seq"))
    engine.dispose()
    return seqs
