"""The extract pass's store path on PostgreSQL: derived facts, entities and the extraction
record (an upsert on both backends; SQLite's INSERT OR REPLACE failed every extract job on
PostgreSQL, found by the end-to-end suite's first run there)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, select

from memoryd.config import Config
from memoryd.passes.base import PassContext
from memoryd.store.memories import WriteContext
from memoryd.store.schema import extractions
from tests.cognition.conftest import T0, HashEmbedder
from tests.cognition.test_extract_store import (
    ANSWER,
    EXPECTED_FACTS,
    SOURCE,
    FixedLLM,
    derived_contents,
    run_extract,
    write,
)

pytestmark = pytest.mark.postgres

CTX = WriteContext(actor="test:pg", passes=["embed", "extract"], max_attempts=5, idempotency_ttl_s=86400.0)


def test_extract_on_postgres_derives_the_facts_and_records_the_extraction_once(pg_engine: Engine) -> None:
    embedder: Any = HashEmbedder()  # the embedder's interface, as the cognition suite's make_ctx
    ctx = PassContext(engine=pg_engine, config=Config(), embedder=embedder, now=lambda: T0,
                      llm=FixedLLM(ANSWER))
    source = write(pg_engine, CTX, SOURCE)
    first = run_extract(ctx, source)
    assert first.failed == [] and first.processed == 1
    assert derived_contents(pg_engine) == EXPECTED_FACTS
    # Extracted again (the record is replaced, not duplicated): nothing new, no failure.
    with pg_engine.begin() as conn:
        conn.execute(extractions.update().where(extractions.c.memory_id == source).values(content_hash="old"))
    again = run_extract(ctx, source)
    assert again.failed == []
    assert derived_contents(pg_engine) == EXPECTED_FACTS
    with pg_engine.connect() as conn:
        rows = conn.execute(select(extractions.c.memory_id, extractions.c.facts_kept)).all()
    assert [r.memory_id for r in rows] == [source]
