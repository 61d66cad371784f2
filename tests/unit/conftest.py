"""Fixtures for the unit suite: a real, migrated SQLite file per test.

Every engine comes from ``create_store_engine`` and every raw connection from
``memoryd.store.driver``, so only one SQLite library is ever loaded in the process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from memoryd.store.engine import create_store_engine
from memoryd.store.memories import WriteContext
from memoryd.store.migrate import upgrade

from .helpers import effect_metadata


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memoryd.db"


@pytest.fixture
def make_engine(db_path: Path) -> Iterator[Callable[..., Engine]]:
    """Open more engines on the same file (migrated unless asked not to); disposed at teardown."""
    opened: list[Engine] = []

    def _make(busy_timeout_ms: int = 5000, migrate: bool = True) -> Engine:
        engine = create_store_engine(f"sqlite:///{db_path}", busy_timeout_ms=busy_timeout_ms)
        opened.append(engine)
        if migrate:
            upgrade(engine)
        return engine

    yield _make
    for engine in opened:
        engine.dispose()


@pytest.fixture
def engine(make_engine: Callable[..., Engine]) -> Engine:
    """A migrated store, plus the test-only effects table."""
    eng = make_engine()
    with eng.begin() as conn:
        effect_metadata.create_all(conn)
    return eng


@pytest.fixture
def write_ctx() -> WriteContext:
    return WriteContext(actor="test:unit", passes=["embed"], max_attempts=5, idempotency_ttl_s=86400.0)
