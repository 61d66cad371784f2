"""Group commit: concurrent writes share transactions; a full queue answers Overloaded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from memoryd.errors import Overloaded, Tombstoned
from memoryd.service.committer import GroupCommitter
from memoryd.store import driver
from memoryd.store.engine import read_only
from memoryd.store.memories import WriteContext, add_tombstone, content_hash
from memoryd.store.schema import memories
from memoryd.store.writes import WriteUnit

from .helpers import NOW, build_memory, count


def unit(content: str, owner: str = "a1") -> WriteUnit:
    return WriteUnit(items=[build_memory(content, owner=owner)], actor="test:committer")


def make_committer(engine: Engine, ctx: WriteContext, *, max_queue: int = 4096,
                   on_commit: Callable[[], None] = lambda: None,
                   access_flush_s: float = 1.0) -> GroupCommitter:
    return GroupCommitter(engine, ctx, max_queue=max_queue, max_batch=512, clock=lambda: NOW,
                          on_commit=on_commit, access_flush_s=access_flush_s)


def contents(engine: Engine) -> set[str]:
    with read_only(engine) as conn:
        return set(conn.execute(select(memories.c.content)).scalars())


def test_concurrent_submits_complete_in_far_fewer_batches_than_units(engine: Engine,
                                                                   write_ctx: WriteContext) -> None:
    wakeups: list[int] = []

    async def scenario() -> tuple[list[Any], GroupCommitter]:
        committer = make_committer(engine, write_ctx, on_commit=lambda: wakeups.append(1))
        committer.start()

        async def client(i: int) -> Any:
            await asyncio.sleep(0)
            return await committer.submit(unit(f"note number {i}"))

        results = await asyncio.gather(*(client(i) for i in range(200)))
        await committer.drain()
        return results, committer

    results, committer = asyncio.run(scenario())
    assert committer.units == 200
    assert committer.batches * 10 <= committer.units, f"{committer.batches} batches for 200 units"
    assert len({r[0]["id"] for r in results}) == 200
    assert count(engine, memories) == 200
    assert wakeups  # the runner is woken after a commit that enqueued work


def test_refused_unit_fails_only_its_own_future(engine: Engine, write_ctx: WriteContext) -> None:
    with engine.begin() as conn:
        add_tombstone(conn, "agent", "a1", content_hash("forbidden"), NOW)

    async def scenario() -> list[Any]:
        committer = make_committer(engine, write_ctx)
        committer.start()
        futures = [committer.submit(unit("allowed one")), committer.submit(unit("forbidden")),
                   committer.submit(unit("allowed two"))]
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        await committer.drain()
        return outcomes

    first, refused, third = asyncio.run(scenario())
    assert isinstance(refused, Tombstoned)
    assert first[0]["id"].startswith("mem_") and third[0]["id"].startswith("mem_")
    assert contents(engine) == {"allowed one", "allowed two"}


def test_full_queue_with_the_store_locked_raises_overloaded(db_path: Path,
                                                            make_engine: Callable[..., Engine],
                                                            write_ctx: WriteContext) -> None:
    engine = make_engine(busy_timeout_ms=60_000)  # the stuck commit waits for the lock
    raw = driver.connect(str(db_path), timeout_s=0)
    raw.isolation_level = None
    raw.execute("BEGIN IMMEDIATE")  # another process holds the write lock

    async def scenario() -> tuple[list[Any], GroupCommitter]:
        committer = make_committer(engine, write_ctx, max_queue=3)
        committer.start()
        stuck = committer.submit(unit("in the blocked commit"))
        while committer.depth:  # the writer took it and is waiting for the lock
            await asyncio.sleep(0.01)
        queued = [committer.submit(unit(f"queued {i}")) for i in range(3)]
        with pytest.raises(Overloaded) as info:
            committer.submit(unit("one too many"))
        assert info.value.code == 1004
        assert "Nothing was written" in info.value.message
        raw.execute("ROLLBACK")  # the lock goes away; everything waiting commits
        results = await asyncio.gather(stuck, *queued)
        await committer.drain()
        return results, committer

    try:
        results, _ = asyncio.run(scenario())
    finally:
        raw.close()
    assert len(results) == 4
    assert contents(engine) == {"in the blocked commit", "queued 0", "queued 1", "queued 2"}


def test_submit_after_drain_is_refused_as_overloaded(engine: Engine, write_ctx: WriteContext) -> None:
    async def scenario() -> None:
        committer = make_committer(engine, write_ctx)
        committer.start()
        await committer.submit(unit("before shutdown"))
        await committer.drain()
        with pytest.raises(Overloaded, match="shutting down"):
            committer.submit(unit("after shutdown"))

    asyncio.run(scenario())
    assert contents(engine) == {"before shutdown"}


def test_access_counts_ride_along_with_the_next_commit(engine: Engine, write_ctx: WriteContext) -> None:
    async def scenario() -> str:
        committer = make_committer(engine, write_ctx)
        committer.start()
        [result] = await committer.submit(unit("read me"))
        committer.note_access([result["id"], result["id"]])
        await committer.submit(unit("another write"))
        await committer.drain()
        return str(result["id"])

    mid = asyncio.run(scenario())
    with read_only(engine) as conn:
        row = conn.execute(select(memories.c.access_count, memories.c.last_accessed_at)
                           .where(memories.c.id == mid)).one()
    assert row.access_count == 2
    assert row.last_accessed_at is not None


def _access_count(engine: Engine, mid: str) -> int:
    with read_only(engine) as conn:
        return int(conn.execute(select(memories.c.access_count).where(memories.c.id == mid)).scalar_one())


def test_access_counts_alone_wait_for_the_flush_interval_then_commit(engine: Engine,
                                                                      write_ctx: WriteContext) -> None:
    async def scenario() -> tuple[int, int]:
        committer = make_committer(engine, write_ctx, access_flush_s=0.3)
        committer.start()
        [result] = await committer.submit(unit("read me"))
        committer.note_access([result["id"]])
        await asyncio.sleep(0.05)
        early = _access_count(engine, result["id"])  # still gathering: no transaction per read
        await asyncio.sleep(0.6)
        late = _access_count(engine, result["id"])
        await committer.drain()
        return early, late

    assert asyncio.run(scenario()) == (0, 1)


def test_access_counts_still_gathering_are_committed_at_shutdown(engine: Engine,
                                                                 write_ctx: WriteContext) -> None:
    async def scenario() -> str:
        committer = make_committer(engine, write_ctx, access_flush_s=60.0)
        committer.start()
        [result] = await committer.submit(unit("read me"))
        committer.note_access([result["id"]] * 3)
        await asyncio.sleep(0.05)
        await committer.drain()
        return str(result["id"])

    mid = asyncio.run(scenario())
    assert _access_count(engine, mid) == 3
