"""PostgreSQL under concurrent writers: two engines (two daemons' pools) writing through the
group-commit path at once leave one verifiable audit chain; and the vector index follows the
embedder's dimension on a new store."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

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


SAME_TIME = 6  # writers racing on one identity, three per engine


def _race(engines: list[Engine], unit_for: Callable[[int], WriteUnit]) -> list[Any]:
    """SAME_TIME threads, spread over ``engines``, each commit one unit at the same moment
    (a barrier); return each one's outcome."""
    barrier = threading.Barrier(SAME_TIME)
    outcomes: list[Any] = [None] * SAME_TIME

    def writer(i: int) -> None:
        unit = unit_for(i)
        barrier.wait(30)
        outcomes[i] = commit_units(engines[i % len(engines)], [unit], CTX, NOW)[0]

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(SAME_TIME)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcomes


def test_the_same_content_written_at_once_by_two_daemons_is_one_row_corroborated(pg_engine: Engine) -> None:
    """Two daemons' pools each commit the same text for the same owner at the same moment: one
    live row, corroborated by every other write, and every writer told its id."""
    other = create_store_engine(str(pg_engine.url.render_as_string(hide_password=False)))
    try:
        outcomes = _race([pg_engine, other], lambda i: WriteUnit(
            [build_memory("the staging deploy needs VPN", owner="racer")], actor=f"w{i}"))
    finally:
        other.dispose()
    assert all(isinstance(o, list) for o in outcomes), outcomes
    ids = {o[0]["id"] for o in outcomes}
    with pg_engine.connect() as conn:
        rows = conn.execute(text("SELECT id, corroboration FROM memories WHERE owner = 'racer'")).all()
    assert len(rows) == 1, rows
    assert ids == {rows[0].id}
    assert rows[0].corroboration == SAME_TIME


def test_one_idempotency_key_used_at_once_by_two_daemons_writes_once_and_answers_alike(
        pg_engine: Engine) -> None:
    """The same keyed write retried through two daemons at once: one row, one key, and every
    attempt answered with the first one's result (none refused by the key's uniqueness)."""
    other = create_store_engine(str(pg_engine.url.render_as_string(hide_password=False)))
    try:
        outcomes = _race([pg_engine, other], lambda i: WriteUnit(
            [build_memory("retry me once", owner="keyed", idempotency_key="k-1")], actor=f"w{i}"))
    finally:
        other.dispose()
    assert all(isinstance(o, list) for o in outcomes), outcomes
    assert len({o[0]["id"] for o in outcomes}) == 1
    with pg_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM memories WHERE owner = 'keyed'")).scalar_one() == 1
        keys = conn.execute(text("SELECT count(*) FROM idempotency_keys WHERE owner = 'keyed'"))
        assert keys.scalar_one() == 1
