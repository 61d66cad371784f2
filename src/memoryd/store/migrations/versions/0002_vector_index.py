"""Vector index: a sqlite-vec vec0 table kept in step with memories.

The vec0 table carries the filter columns (scope_key, status, kind) as
metadata so nearest-neighbour queries filter inside the KNN scan. Triggers
keep them equal to the row's, and drop the vector when the row is deleted or
its content changes (a vector never outlives the text it describes).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SQLITE = [
    "CREATE VIRTUAL TABLE memory_vec USING vec0("
    "memory_seq integer primary key, embedding float[384] distance_metric=cosine, "
    "scope_key text, status text, kind text)",
    "CREATE TRIGGER memory_vec_au_meta AFTER UPDATE OF status, kind, scope, owner ON memories BEGIN "
    "UPDATE memory_vec SET status = new.status, kind = new.kind, "
    "scope_key = new.scope || ':' || new.owner WHERE memory_seq = new.seq; END",
    "CREATE TRIGGER memory_vec_ad AFTER DELETE ON memories BEGIN "
    "DELETE FROM memory_vec WHERE memory_seq = old.seq; END",
    "CREATE TRIGGER memory_vec_au_content AFTER UPDATE OF content ON memories "
    "WHEN new.content IS NOT old.content BEGIN "
    "DELETE FROM memory_vec WHERE memory_seq = new.seq; "
    "DELETE FROM memory_vectors WHERE memory_seq = new.seq; END",
    # Backfill from the stored vectors.
    "INSERT INTO memory_vec(memory_seq, embedding, scope_key, status, kind) "
    "SELECT m.seq, v.vector, m.scope || ':' || m.owner, m.status, m.kind "
    "FROM memory_vectors v JOIN memories m ON m.seq = v.memory_seq",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE:
            op.execute(statement)
