"""Vector index partitioned by owner: ``scope_key`` becomes vec0's partition key.

A reader sees a handful of (scope, owner) pairs; with ``scope_key`` as a
partition key each nearest-neighbour query scans only that pair's vectors
instead of every vector in the store with the owner checked row by row
(bench/search.py at 100k memories, ten agents: 109 ms -> 23 ms per query).
vec0 cannot move a row between partitions, so a change of scope or owner
deletes the index entry and inserts it again from ``memory_vectors``.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SQLITE = [
    "DROP TRIGGER IF EXISTS memory_vec_au_meta",
    "DROP TABLE memory_vec",
    "CREATE VIRTUAL TABLE memory_vec USING vec0("
    "memory_seq integer primary key, embedding float[384] distance_metric=cosine, "
    "scope_key text partition key, status text, kind text)",
    "CREATE TRIGGER memory_vec_au_meta AFTER UPDATE OF status, kind ON memories BEGIN "
    "UPDATE memory_vec SET status = new.status, kind = new.kind WHERE memory_seq = new.seq; END",
    "CREATE TRIGGER memory_vec_au_owner AFTER UPDATE OF scope, owner ON memories "
    "WHEN new.scope IS NOT old.scope OR new.owner IS NOT old.owner BEGIN "
    "DELETE FROM memory_vec WHERE memory_seq = new.seq; "
    "INSERT INTO memory_vec(memory_seq, embedding, scope_key, status, kind) "
    "SELECT new.seq, v.vector, new.scope || ':' || new.owner, new.status, new.kind "
    "FROM memory_vectors v WHERE v.memory_seq = new.seq; END",
    # Refill from the durable vectors (the same statement as 0002's backfill).
    "INSERT INTO memory_vec(memory_seq, embedding, scope_key, status, kind) "
    "SELECT m.seq, v.vector, m.scope || ':' || m.owner, m.status, m.kind "
    "FROM memory_vectors v JOIN memories m ON m.seq = v.memory_seq",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE:
            op.execute(statement)
