"""A hybrid search reads its whole fused pool only when the learned ranking orders it (SQLite;
tests/postgres_store/test_pg_search_legs.py runs the same check on PostgreSQL)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from .search_pool import check_only_a_pool_of_turns_is_read_whole


def test_only_a_pool_of_turns_is_read_whole(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    check_only_a_pool_of_turns_is_read_whole(engine, monkeypatch)
