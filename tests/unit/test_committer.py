"""Group commit: concurrent writes share transactions; a full queue answers Overloaded."""

from __future__ import annotations

import asyncio
import threading
import time
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


def test_callbacks_get_each_units_outcome_on_the_loop_thread(engine: Engine, write_ctx: WriteContext) -> None:
    with engine.begin() as conn:
        add_tombstone(conn, "agent", "a1", content_hash("forbidden"), NOW)
    seen: list[tuple[str, Any, bool]] = []

    async def scenario() -> None:
        committer = make_committer(engine, write_ctx)
        committer.start()
        loop_thread = threading.get_ident()
        for text in ("first by callback", "forbidden", "second by callback"):
            committer.submit_callback(unit(text), lambda outcome, t=text: seen.append(
                (t, outcome, threading.get_ident() == loop_thread)))
        await committer.drain()

    asyncio.run(scenario())
    assert [t for t, _, _ in seen] == ["first by callback", "forbidden", "second by callback"]
    assert all(on_loop for _, _, on_loop in seen)
    assert isinstance(seen[1][1], Tombstoned)
    assert seen[0][1][0]["id"].startswith("mem_") and seen[2][1][0]["id"].startswith("mem_")
    assert contents(engine) == {"first by callback", "second by callback"}


def test_a_failing_answer_does_not_lose_the_others(engine: Engine, write_ctx: WriteContext) -> None:
    answered: list[str] = []

    def broken(outcome: Any) -> None:
        raise RuntimeError("the caller's answer failed")

    async def scenario() -> None:
        committer = make_committer(engine, write_ctx)
        committer.start()
        committer.submit_callback(unit("answer breaks"), broken)
        committer.submit_callback(unit("answer works"), lambda outcome: answered.append(outcome[0]["id"]))
        await committer.drain()

    asyncio.run(scenario())
    assert len(answered) == 1
    assert contents(engine) == {"answer breaks", "answer works"}


def test_a_full_queue_refuses_a_callback_unit_at_once(db_path: Path, make_engine: Callable[..., Engine],
                                                      write_ctx: WriteContext) -> None:
    engine = make_engine(busy_timeout_ms=60_000)
    raw = driver.connect(str(db_path), timeout_s=0)
    raw.isolation_level = None
    raw.execute("BEGIN IMMEDIATE")
    answers: list[Any] = []

    async def scenario() -> None:
        committer = make_committer(engine, write_ctx, max_queue=1)
        committer.start()
        committer.submit_callback(unit("stuck"), answers.append)
        while committer.depth:
            await asyncio.sleep(0.01)
        committer.submit_callback(unit("queued"), answers.append)
        with pytest.raises(Overloaded):
            committer.submit_callback(unit("refused"), answers.append)
        raw.execute("ROLLBACK")
        await committer.drain()

    try:
        asyncio.run(scenario())
    finally:
        raw.close()
    assert len(answers) == 2  # the refused unit is never answered: it raised instead
    assert contents(engine) == {"stuck", "queued"}


def test_the_writer_commits_the_next_batch_without_waiting_for_the_loop(engine: Engine,
                                                                       write_ctx: WriteContext) -> None:
    answered: list[str] = []
    seen_before_any_answer: list[set[str]] = []

    async def scenario() -> None:
        committer = make_committer(engine, write_ctx)
        committer.start()
        committer.submit_callback(unit("batch one"), lambda o: answered.append("one"))
        time.sleep(0.5)  # block the loop: batch one commits, its answer waits for the loop
        committer.submit_callback(unit("batch two"), lambda o: answered.append("two"))
        time.sleep(0.5)  # still blocked: batch two must commit all the same
        seen_before_any_answer.append(contents(engine))
        assert answered == []
        await committer.drain()

    asyncio.run(scenario())
    assert seen_before_any_answer == [{"batch one", "batch two"}]
    assert answered == ["one", "two"]


class _WriterBug(BaseException):
    """Something no except-Exception catches: stands for a bug that kills the writer thread."""


def test_a_dead_writer_thread_fails_waiting_and_new_writes_at_once(engine: Engine, write_ctx: WriteContext,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from memoryd.errors import StoreUnavailable
    from memoryd.service import committer as committer_mod

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise _WriterBug("boom")

    monkeypatch.setattr(committer_mod, "commit_units", crash)

    async def scenario() -> tuple[BaseException | Any, GroupCommitter]:
        committer = make_committer(engine, write_ctx)
        committer.start()
        waiting = committer.submit(unit("never written"))
        outcome = (await asyncio.gather(waiting, return_exceptions=True))[0]
        with pytest.raises(StoreUnavailable, match="writer thread stopped"):
            committer.submit(unit("after the crash"))
        await committer.drain(timeout_s=2.0)
        return outcome, committer

    outcome, committer = asyncio.run(scenario())
    assert isinstance(outcome, StoreUnavailable) and outcome.code == 1003
    assert committer.broken is not None and "boom" in committer.broken
    assert contents(engine) == set()


def test_status_reports_a_stopped_writer_as_a_problem(engine: Engine, write_ctx: WriteContext, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's own status() over a committer whose writer thread really died.

    No sentence is handed in: the problem line must come from the daemon's status code, and
    it must say what docs/protocol.md promises (writes fail with 1003; restart memoryd).
    """
    from memoryd.config import Config
    from memoryd.daemon.app import Daemon
    from memoryd.daemon.governor import Governor, HostProbe, Thresholds
    from memoryd.daemon.runner import PassRunner
    from memoryd.passes.base import PassContext
    from memoryd.service import committer as committer_mod

    cfg = Config(data_dir=str(tmp_path / "data"), embedder="none", llm="none")
    daemon = Daemon(cfg)
    daemon.engine = engine
    daemon.governor = Governor(HostProbe(), Thresholds.from_config(cfg))
    daemon.runner = PassRunner(daemon.passes, PassContext(engine=engine, config=cfg, embedder=daemon.embedder,
                                                          now=time.time, llm=daemon.llm),
                               owner="test", governor=daemon.governor)

    async def run_until(crash: bool) -> GroupCommitter:
        committer = make_committer(engine, write_ctx)
        committer.start()
        await asyncio.gather(committer.submit(unit("alive" if not crash else "never written")),
                             return_exceptions=True)
        await committer.drain(timeout_s=2.0)
        return committer

    daemon.committer = asyncio.run(run_until(crash=False))
    healthy = daemon.status()  # positive control: the same daemon with a live writer
    assert healthy["health"] == "healthy" and healthy["problems"] == []
    assert healthy["write_queue"]["writer"] == "running"

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise _WriterBug("boom")

    monkeypatch.setattr(committer_mod, "commit_units", crash)
    daemon.committer = asyncio.run(run_until(crash=True))
    snap = daemon.status()
    assert snap["health"] == "degraded" and snap["write_queue"]["writer"] == "stopped"
    [problem] = snap["problems"]
    assert "writer thread stopped" in problem and "_WriterBug: boom" in problem
    assert "1003" in problem and "restart memoryd" in problem
