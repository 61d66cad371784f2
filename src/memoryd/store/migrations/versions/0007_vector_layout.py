"""Vector index with bounded bytes per memory, one copy of each vector, its dimension recorded.

Up to 0006 ``memory_vec`` had a partition per (scope, owner) pair, and sqlite-vec
gives every partition a whole 1,024-vector chunk (1.6 MB at 384 dimensions):
a store of one memory per session grew 1.6 MB a memory. Every vector was also
stored twice, in ``memory_vectors`` and in the index.

From 0007 (bench/bytes.py and bench/search.py chose it; docs/architecture.md):

* each (scope, owner) pair gets an integer id in ``vector_owners``; its vectors
  live in vec0 partition ``bucket = id % 16`` with ``owner_id`` as a metadata
  column the KNN filters on inside the scan, in chunks of 128 vectors, so the
  partly filled chunks cost at most 16 x 128 vectors whatever the spread;
* on SQLite the vector is stored once, in ``memory_vec``; ``memory_vectors``
  becomes a view over ``memory_vectors_meta`` (model, dim, content hash, time)
  that reads the vector from the index, and whose INSTEAD OF triggers store,
  replace and erase vectors;
* ``vector_settings`` records the index's dimension (and the model that
  made the vectors), checked against the embedder at every start;
* every erasure overwrites the vector's bytes with zeros before deleting it
  (sqlite-vec 0.1.6 only cleared a validity bit); the old index and the old
  second copies are zeroed when they are dropped.

The old index's pages go to SQLite's free list: the file keeps its size until
the daemon vacuums it at its next start (store/vectors.py reclaim_space).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

#: The dimension migrations 0002 and 0005 gave the index.
LEGACY_DIM = 384
BUCKETS = 16
CHUNK_SIZE = 128


def index_ddl(dim: int) -> str:
    return ("CREATE VIRTUAL TABLE memory_vec USING vec0("
            f"memory_seq integer primary key, embedding float[{int(dim)}] distance_metric=cosine, "
            "bucket integer partition key, owner_id integer, status text, kind text, "
            f"chunk_size={CHUNK_SIZE})")


def erase(seq: str) -> str:
    """Zero, then delete, the vec0 entry of memory ``seq`` (an SQL expression)."""
    return (f"UPDATE memory_vec SET embedding = zeroblob(length(embedding)) WHERE memory_seq = {seq}; "
            f"DELETE FROM memory_vec WHERE memory_seq = {seq}; ")


def forget_owner(scope: str, owner: str) -> str:
    """Drop an owner's id once no memory of that (scope, owner) remains: it names a person or
    a session, and nothing should keep it after the owner's memories are gone."""
    return (f"DELETE FROM vector_owners WHERE scope_key = {scope} || ':' || {owner} AND NOT EXISTS "
            f"(SELECT 1 FROM memories WHERE scope = {scope} AND owner = {owner}); ")


def file_under_owner(seq: str, vector: str, source: str, status: str, kind: str, key: str) -> str:
    """Insert a vector into ``memory_vec`` under its owner's id and bucket."""
    return ("INSERT INTO memory_vec (memory_seq, embedding, bucket, owner_id, status, kind) "
            f"SELECT {seq}, {vector}, o.id % {BUCKETS}, o.id, {status}, {kind} FROM {source} "
            f"JOIN vector_owners o ON o.scope_key = {key}")


OLD_TRIGGERS = ["memory_vec_au_meta", "memory_vec_au_owner", "memory_vec_ad", "memory_vec_au_content"]

TABLES = [
    "CREATE TABLE vector_owners (id INTEGER PRIMARY KEY, scope_key TEXT NOT NULL UNIQUE)",
    "CREATE TABLE memory_vectors_meta ("
    "memory_seq INTEGER PRIMARY KEY REFERENCES memories (seq) ON DELETE CASCADE, "
    "model VARCHAR(128) NOT NULL, dim INTEGER NOT NULL, content_hash VARCHAR(64) NOT NULL, "
    "embedded_at VARCHAR(32) NOT NULL)",
    # Holds a vector for the length of one trigger while it moves to another partition.
    "CREATE TABLE vector_moves (memory_seq INTEGER PRIMARY KEY, vector BLOB NOT NULL)",
]

VIEW_AND_TRIGGERS = [
    # A correlated subquery rather than a join: SQLite can then flatten the view into the
    # caller's query (a LEFT JOIN onto a joined view materialised the whole index first).
    "CREATE VIEW memory_vectors AS SELECT m.memory_seq AS memory_seq, m.model AS model, m.dim AS dim, "
    "(SELECT v.embedding FROM memory_vec v WHERE v.memory_seq = m.memory_seq) AS vector, "
    "m.content_hash AS content_hash, m.embedded_at AS embedded_at FROM memory_vectors_meta m",
    # Inserting a vector replaces the memory's vector, if it had one.
    "CREATE TRIGGER memory_vectors_insert INSTEAD OF INSERT ON memory_vectors BEGIN "
    + erase("new.memory_seq")
    + "DELETE FROM memory_vectors_meta WHERE memory_seq = new.memory_seq; "
    "INSERT INTO memory_vectors_meta (memory_seq, model, dim, content_hash, embedded_at) "
    "VALUES (new.memory_seq, new.model, new.dim, new.content_hash, new.embedded_at); "
    "INSERT OR IGNORE INTO vector_owners (scope_key) "
    "SELECT scope || ':' || owner FROM memories WHERE seq = new.memory_seq; "
    + file_under_owner("m.seq", "new.vector", "memories m", "m.status", "m.kind",
                       "m.scope || ':' || m.owner")
    + " WHERE m.seq = new.memory_seq; END",
    "CREATE TRIGGER memory_vectors_delete INSTEAD OF DELETE ON memory_vectors BEGIN "
    + erase("old.memory_seq")
    + "DELETE FROM memory_vectors_meta WHERE memory_seq = old.memory_seq; END",
    "CREATE TRIGGER memory_vec_ad AFTER DELETE ON memories BEGIN "
    + erase("old.seq")
    + "DELETE FROM memory_vectors_meta WHERE memory_seq = old.seq; "
    + forget_owner("old.scope", "old.owner") + "END",
    "CREATE TRIGGER memory_vec_au_content AFTER UPDATE OF content ON memories "
    "WHEN new.content IS NOT old.content BEGIN "
    + erase("new.seq")
    + "DELETE FROM memory_vectors_meta WHERE memory_seq = new.seq; END",
    "CREATE TRIGGER memory_vec_au_meta AFTER UPDATE OF status, kind ON memories "
    "WHEN new.status IS NOT old.status OR new.kind IS NOT old.kind BEGIN "
    "UPDATE memory_vec SET status = new.status, kind = new.kind WHERE memory_seq = new.seq; END",
    # vec0 cannot move a row between partitions: the vector is set aside, erased from its old
    # place and filed under the new owner (unless the row lost its content: a forget).
    "CREATE TRIGGER memory_vec_au_owner AFTER UPDATE OF scope, owner ON memories "
    "WHEN new.scope IS NOT old.scope OR new.owner IS NOT old.owner BEGIN "
    "INSERT INTO vector_moves (memory_seq, vector) SELECT memory_seq, embedding FROM memory_vec "
    "WHERE memory_seq = new.seq AND new.content IS NOT NULL; "
    + erase("new.seq")
    + "INSERT OR IGNORE INTO vector_owners (scope_key) SELECT new.scope || ':' || new.owner "
    "WHERE EXISTS (SELECT 1 FROM vector_moves WHERE memory_seq = new.seq); "
    + file_under_owner("new.seq", "mv.vector", "vector_moves mv", "new.status", "new.kind",
                       "new.scope || ':' || new.owner")
    + " WHERE mv.memory_seq = new.seq; "
    "UPDATE vector_moves SET vector = zeroblob(length(vector)) WHERE memory_seq = new.seq; "
    "DELETE FROM vector_moves WHERE memory_seq = new.seq; "
    + forget_owner("old.scope", "old.owner") + "END",
]


def upgrade() -> None:
    bind = op.get_bind()
    op.create_table(
        "vector_settings",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(1024), nullable=False),
    )
    # Every stored vector has the index's dimension: vec0 refused any other.
    first = bind.execute(sa.text("SELECT dim, model FROM memory_vectors LIMIT 1")).first()
    dim = int(first[0]) if first else LEGACY_DIM
    settings = [{"key": "dim", "value": str(dim)}]
    if first:
        settings.append({"key": "model", "value": str(first[1])})
    bind.execute(sa.text("INSERT INTO vector_settings (key, value) VALUES (:key, :value)"), settings)
    if bind.dialect.name != "sqlite":
        return

    # The old index's chunks (deleted slots included: sqlite-vec 0.1.6 left their floats) and
    # the old second copies must not survive in free pages. Under secure_delete (memoryd's
    # connections set it) the DROP zeroes every page it frees; otherwise they are zeroed first.
    zero_first = bind.exec_driver_sql("PRAGMA secure_delete").scalar() != 1
    for name in OLD_TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    if zero_first:
        op.execute("UPDATE memory_vec_vector_chunks00 SET vectors = zeroblob(length(vectors))")
    op.execute("DROP TABLE memory_vec")
    op.execute("ALTER TABLE memory_vectors RENAME TO memory_vectors_0006")
    for statement in TABLES:
        op.execute(statement)
    op.execute(index_ddl(dim))
    op.execute("INSERT INTO memory_vectors_meta (memory_seq, model, dim, content_hash, embedded_at) "
               "SELECT memory_seq, model, dim, content_hash, embedded_at FROM memory_vectors_0006")
    # Owner ids in the order of each owner's first memory: the owners a store starts with
    # (the agent, the user, the project) get buckets of their own.
    op.execute("INSERT INTO vector_owners (scope_key) SELECT m.scope || ':' || m.owner "
               "FROM memory_vectors_0006 v JOIN memories m ON m.seq = v.memory_seq "
               "GROUP BY m.scope, m.owner ORDER BY min(m.seq)")
    op.execute(file_under_owner("m.seq", "v.vector", "memory_vectors_0006 v JOIN memories m "
                                "ON m.seq = v.memory_seq", "m.status", "m.kind",
                                "m.scope || ':' || m.owner") + " ORDER BY m.seq")
    if zero_first:
        op.execute("UPDATE memory_vectors_0006 SET vector = zeroblob(length(vector))")
    op.execute("DROP TABLE memory_vectors_0006")
    for statement in VIEW_AND_TRIGGERS:
        op.execute(statement)
