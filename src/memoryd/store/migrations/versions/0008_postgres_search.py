"""PostgreSQL search: a generated tsvector with a GIN index, and pgvector with an HNSW index.

Nothing changes on SQLite (FTS5 and vec0 came with 0001-0007). On PostgreSQL:

* ``memories.content_tsv``: ``to_tsvector('english', content)``, a stored
  generated column, so a forget (content set to NULL) or a deleted row takes
  its lexemes with it in the same statement; a GIN index serves ``@@``
  (store/postgres/lexical.py ranks with ``ts_rank_cd``);
* ``memory_vectors.vector`` becomes pgvector ``vector(dim)``, dim from
  ``vector_settings`` (0007 recorded it; 384 for all-MiniLM-L6-v2), with an
  HNSW index on cosine distance (store/postgres/vectors.py);
* a trigger drops a memory's vector when its content changes or is cleared
  (a forget), in the same statement, as migration 0007's trigger does on
  SQLite: a vector never outlives the text it describes;
* the ``vector`` extension must be there: the daemon checks the server before
  migrating (store/postgres/server.py) and says how to get it.

Until this revision no PostgreSQL store could be created (0001's boolean
default was SQLite's ``0``), so ``memory_vectors`` is empty when its column
changes type.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    dim = int(bind.execute(sa.text("SELECT value FROM vector_settings WHERE key = 'dim'")).scalar_one())
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute("ALTER TABLE memories ADD COLUMN content_tsv tsvector "
               "GENERATED ALWAYS AS (to_tsvector('english', coalesce(content, ''))) STORED")
    op.execute("CREATE INDEX ix_memories_tsv ON memories USING gin (content_tsv)")
    op.execute("DELETE FROM memory_vectors")
    op.execute(f"ALTER TABLE memory_vectors ALTER COLUMN vector TYPE vector({dim}) USING NULL")
    op.execute("CREATE INDEX ix_memory_vectors_hnsw ON memory_vectors USING hnsw (vector vector_cosine_ops)")
    op.execute("CREATE FUNCTION memoryd_drop_stale_vector() RETURNS trigger LANGUAGE plpgsql AS $$ "
               "BEGIN DELETE FROM memory_vectors WHERE memory_seq = NEW.seq; RETURN NULL; END $$")
    op.execute("CREATE TRIGGER memory_vectors_stale AFTER UPDATE OF content ON memories FOR EACH ROW "
               "WHEN (NEW.content IS DISTINCT FROM OLD.content) EXECUTE FUNCTION memoryd_drop_stale_vector()")
