"""PostgreSQL under concurrent writers: two engines (two daemons' pools) writing through the
group-commit path at once leave one verifiable audit chain; and the vector index follows the
embedder's dimension on a new store."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Engine, text

from memoryd.store import audit, vectors
from memoryd.store.engine import create_store_engine
from memoryd.store.writes import WriteUnit, commit_units
from tests.postgres_store.test_pg_search_legs import CTX, NOW
from tests.unit.helpers import build_memory

pytestmark = pytest.mark.postgres

THREADS_PER_ENGINE, UNITS, ITEMS = 3, 20, 3


def test_concurrent_writers_on_two_engines_keep_one_verifiable_audit_chain(pg_engine: Engine) -> None:
    other = create_store_engine(str(pg_engine.url.render_as_string(hide_password=False)))
    errors: list[BaseException] = []

    def writer(engine: Engine, name: str) -> None:
        try:
            for u in range(UNITS):
                items = [build_memory(f"{name} unit {u} item {i}", owner=name) for i in range(ITEMS)]
                unit = WriteUnit(items, actor=name)
                commit_units(engine, [unit], CTX, NOW)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(engine, f"w{e}{t}"))
               for e, engine in enumerate((pg_engine, other)) for t in range(THREADS_PER_ENGINE)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    other.dispose()
    assert not errors, errors
    with pg_engine.connect() as conn:
        checked, broken_at = audit.verify(conn)
        memories = conn.execute(text("SELECT count(*) FROM memories")).scalar_one()
    assert memories == 2 * THREADS_PER_ENGINE * UNITS * ITEMS
    assert broken_at is None
    assert checked >= memories  # one event per write at least


def test_a_new_store_adopts_the_embedders_dimension_and_then_refuses_another(pg_engine: Engine) -> None:
    vectors.check_dimension(pg_engine, 768, "other-model", "other")
    with pg_engine.connect() as conn:
        column = conn.execute(text(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'memory_vectors'::regclass AND attname = 'vector'")).scalar_one()
        hnsw = conn.execute(text(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'ix_memory_vectors_hnsw'"))
        assert vectors.index_dim(conn) == 768
        assert hnsw.scalar_one() == 1
    assert column == "vector(768)"
    with pytest.raises(vectors.DimensionMismatch, match="768-dimensional"):
        vectors.check_dimension(pg_engine, 384, "all-MiniLM-L6-v2", "bundled")
