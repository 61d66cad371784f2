"""A bug reached by one caller's input refuses that caller alone, not the group commit's batch."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from memoryd.errors import StoreUnavailable
from memoryd.store import groupwrite
from memoryd.store.memories import WriteContext
from memoryd.store.schema import memories
from memoryd.store.writes import WriteUnit, commit_units
from tests.lifecycle.helpers import new_memory


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(memories)).scalar_one())


def test_an_op_that_raises_a_non_store_error_refuses_only_its_own_unit(
        engine: Engine, write_ctx: WriteContext) -> None:
    def buggy(conn: Connection, now: datetime, ctx: WriteContext) -> Any:
        raise OverflowError("int too large to convert to float")

    units = [WriteUnit([new_memory("the first caller's note", owner="a1")], "t1"),
             WriteUnit([], "t2", op=buggy),
             WriteUnit([new_memory("the third caller's note", owner="a1")], "t3")]
    outcomes = commit_units(engine, units, write_ctx, datetime.now(UTC))
    assert isinstance(outcomes[1], StoreUnavailable)
    assert "OverflowError" in outcomes[1].message and "nothing was written" in outcomes[1].message
    assert [o[0]["id"].startswith("mem_") for o in (outcomes[0], outcomes[2])] == [True, True]
    assert _count(engine) == 2


def test_a_group_fast_path_bug_falls_back_to_one_savepoint_per_unit(
        engine: Engine, write_ctx: WriteContext, monkeypatch: Any) -> None:
    def exploding(*args: Any, **kwargs: Any) -> Any:
        raise UnicodeEncodeError("utf-8", "x", 0, 1, "surrogates not allowed")

    monkeypatch.setattr("memoryd.store.writes.write_plain", exploding)
    assert groupwrite.write_plain is not exploding  # only the group path is broken
    units = [WriteUnit([new_memory(f"note {i}", owner="a1")], f"t{i}") for i in range(3)]
    outcomes = commit_units(engine, units, write_ctx, datetime.now(UTC))
    assert all(not isinstance(o, Exception) for o in outcomes), outcomes
    assert _count(engine) == 3
