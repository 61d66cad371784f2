"""Fixtures for the PostgreSQL store suite: a migrated database per test on the session's
embedded PostgreSQL 18 + pgvector 0.8 (tests/postgres.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from memoryd.store.engine import create_store_engine
from memoryd.store.migrate import upgrade


@pytest.fixture
def pg_engine(pg_url: str) -> Iterator[Engine]:
    """A migrated PostgreSQL store (disposed at teardown, before its database is dropped)."""
    engine = create_store_engine(pg_url)
    upgrade(engine)
    yield engine
    engine.dispose()
