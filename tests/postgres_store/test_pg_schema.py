"""The one Alembic history on PostgreSQL: it reaches head with the PostgreSQL search objects,
and a server or database memoryd cannot use is refused at start, saying what to do."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine, text

from memoryd.store.engine import create_store_engine
from memoryd.store.migrate import SchemaTooNew, current_revision, head_revision, upgrade
from memoryd.store.postgres.server import ServerUnsuitable
from tests.postgres import SYSTEM_PG_URL

pytestmark = pytest.mark.postgres

PUBLIC_TABLES = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"


def test_migrations_reach_head_with_tsvector_gin_and_hnsw(pg_engine: Engine) -> None:
    assert current_revision(pg_engine) == head_revision() == "0011_pg_hnsw_build"
    with pg_engine.connect() as conn:
        vec_type = conn.execute(text(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'memory_vectors'::regclass AND attname = 'vector'")).scalar_one()
        generated = conn.execute(text(
            "SELECT attgenerated FROM pg_attribute "
            "WHERE attrelid = 'memories'::regclass AND attname = 'content_tsv'")).scalar_one()
        indexes = dict(conn.execute(text(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE tablename IN ('memories', 'memory_vectors')")).all())
    assert vec_type == "vector(384)"
    assert generated == "s"  # stored generated column
    assert "USING gin (content_tsv)" in indexes["ix_memories_tsv"]
    assert "USING hnsw (vector vector_cosine_ops)" in indexes["ix_memory_vectors_hnsw"]


def test_a_second_upgrade_changes_nothing(pg_engine: Engine) -> None:
    assert upgrade(pg_engine) == "0011_pg_hnsw_build"


def test_a_database_at_a_newer_revision_is_refused(pg_engine: Engine) -> None:
    with pg_engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(SchemaTooNew, match="newer than this memoryd"):
        upgrade(pg_engine)
    assert current_revision(pg_engine) == "0099"  # untouched


@pytest.fixture
def system_pg() -> Iterator[Engine]:
    """The machine's PostgreSQL 15, which has no pgvector (skipped where it is not running)."""
    try:
        psycopg.connect(SYSTEM_PG_URL.replace("+psycopg", ""), connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {SYSTEM_PG_URL}: {exc}")
    engine = create_store_engine(SYSTEM_PG_URL)
    yield engine
    engine.dispose()


def test_a_server_without_pgvector_is_refused_before_any_migration(system_pg: Engine) -> None:
    with system_pg.connect() as conn:
        assert conn.execute(text(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")).scalar_one() == 0
        tables_before = conn.execute(text(PUBLIC_TABLES)).scalar()
    with pytest.raises(ServerUnsuitable) as refused:
        upgrade(system_pg)
    message = str(refused.value)
    assert "CREATE EXTENSION vector" in message
    assert "pgvector" in message and "apt install postgresql-<major>-pgvector" in message
    with system_pg.connect() as conn:
        tables_after = conn.execute(text(PUBLIC_TABLES)).scalar()
    assert tables_after == tables_before  # refused at start: nothing was created
