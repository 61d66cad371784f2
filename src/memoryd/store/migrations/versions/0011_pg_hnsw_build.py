"""PostgreSQL: the HNSW index is built with ef_construction 200 (pgvector's default is 64).

On real all-MiniLM-L6-v2 vectors (bench/studies/pg_hnsw_real.py, 20,000 of
them, 200 real questions) the index pgvector builds by default found 0.82 –
0.85 of the exact top 10 when the reader sees a quarter of the rows, and
0.75 – 0.86 when one owner holds them all, at the ef_search values the daemon
could afford; built with ef_construction 200 and searched at ef_search 200
(store/postgres/vectors.py) it finds 0.97 – 0.98 in both.

The parameters are set on the index (``ALTER INDEX ... SET``: m stays
pgvector's 16), so every later build of it uses them. A store with at most :data:`REBUILD_ROWS` vectors is
rebuilt here (seconds: 20,000 vectors in about 12 s on two cores); a larger
one keeps its graph until ``memoryd store reindex`` rebuilds it (at a million
vectors the build takes most of an hour, which a daemon's start should not).
SQLite stores are untouched: their graphs live beside the store.

Revision ID: 0011_pg_hnsw_build
Revises: 0010_audit_lanes
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memoryd.store.postgres.vectors import HNSW_INDEX, index_exists, set_build_parameters

revision = "0011_pg_hnsw_build"
down_revision = "0010_audit_lanes"
branch_labels = None
depends_on = None

#: Rebuild the index during the migration up to this many vectors.
REBUILD_ROWS = 50_000


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    if not index_exists(bind):  # dropped for a bulk load in progress: its build will use the new parameter
        return
    set_build_parameters(bind)
    # At most REBUILD_ROWS + 1 rows are counted: the check costs nothing on a big store.
    small = bind.execute(sa.text(
        f"SELECT count(*) FROM (SELECT 1 FROM memory_vectors LIMIT {REBUILD_ROWS + 1}) s")).scalar_one()
    if small <= REBUILD_ROWS:
        op.execute(f"REINDEX INDEX {HNSW_INDEX}")
