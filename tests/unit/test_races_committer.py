"""The group committer answers every caller, whatever the order its threads run in.

Two interleavings used to strand callers (their write answered never, the
client waiting out its timeout):

* ``_resolve`` asked each unit whether it queued work before answering it;
  one unit whose ``queued_work`` raised ended the loop, and every later unit
  of the same batch was never answered.
* a caller checked ``broken`` before taking the queue's lock; the writer
  thread could die and clear the queue in between, and the caller then
  appended to a queue that no thread would ever take from again.

Each test forces its interleaving with events (no sleeps that hope for it).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy import Engine

from memoryd.errors import MemorydError, StoreUnavailable
from memoryd.service import committer as committer_mod
from memoryd.service.committer import GroupCommitter
from memoryd.store.memories import WriteContext
from memoryd.store.writes import UnitOutcome, WriteUnit

from .helpers import build_memory
from .test_committer import contents, make_committer, unit

#: Hang guard for one answer; a stranded caller would wait for ever.
ANSWER_S = 5.0


class QueuedWorkFails(WriteUnit):
    """A unit whose commit succeeds but whose ``queued_work`` raises (a bug in one unit's bookkeeping)."""

    def queued_work(self, outcome: Any) -> bool:
        raise RuntimeError("queued_work broke")


def test_a_unit_whose_queued_work_raises_does_not_strand_the_rest_of_its_batch(
        engine: Engine, write_ctx: WriteContext, monkeypatch: pytest.MonkeyPatch) -> None:
    first_commit_entered = threading.Event()
    release_first_commit = threading.Event()
    real_commit = committer_mod.commit_units
    calls = {"n": 0}

    def commit_units(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:  # hold the first batch so the next three gather into one batch
            first_commit_entered.set()
            release_first_commit.wait(ANSWER_S)
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(committer_mod, "commit_units", commit_units)
    wakeups: list[int] = []

    async def scenario() -> list[Any]:
        committer = make_committer(engine, write_ctx, on_commit=lambda: wakeups.append(1))
        committer.start()
        warm_up = committer.submit(unit("warm-up write"))
        await asyncio.get_running_loop().run_in_executor(None, first_commit_entered.wait, ANSWER_S)
        bad = QueuedWorkFails(items=[build_memory("bookkeeping breaks here")], actor="test:committer")
        futures = [committer.submit(bad), committer.submit(unit("second of the batch")),
                   committer.submit(unit("third of the batch"))]
        release_first_commit.set()
        await warm_up
        outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), ANSWER_S)
        await committer.drain(timeout_s=2.0)
        assert committer.batches == 2  # the three units shared one batch, after the warm-up's
        return outcomes

    outcomes = asyncio.run(scenario())
    # Every unit of the batch was committed and answered with its rows, the broken one included.
    assert all(not isinstance(o, BaseException) and o[0]["id"].startswith("mem_") for o in outcomes)
    assert contents(engine) == {"warm-up write", "bookkeeping breaks here", "second of the batch",
                                "third of the batch"}
    assert wakeups  # the runner was still woken for the batch's queued work


class _WriterBug(BaseException):
    """Something no except-Exception catches: stands for a bug that kills the writer thread."""


class GatedCondition(threading.Condition):
    """The queue's condition, whose ``with`` holds one thread at the door until told to go on."""

    def __init__(self, gated: int) -> None:
        super().__init__()
        self.gated = gated
        self.at_door = threading.Event()
        self.go_on = threading.Event()

    def __enter__(self) -> bool:
        if threading.get_ident() == self.gated and not self.go_on.is_set():
            self.at_door.set()
            self.go_on.wait(ANSWER_S)
        return super().__enter__()


def test_a_write_that_races_the_writer_crash_is_refused_or_answered_never_stranded(
        engine: Engine, write_ctx: WriteContext, monkeypatch: pytest.MonkeyPatch) -> None:
    crash_now = threading.Event()

    def loop_batches(self: GroupCommitter, writer: object) -> None:
        crash_now.wait(ANSWER_S)
        raise _WriterBug("boom")

    monkeypatch.setattr(GroupCommitter, "_loop_batches", loop_batches)

    async def scenario() -> tuple[str, Any]:
        committer = make_committer(engine, write_ctx)
        committer.start()
        gate = GatedCondition(threading.get_ident())  # holds the loop thread: the caller
        committer._cond = gate
        writer = committer._writers[0].thread  # SQLite: the one writer thread
        assert writer is not None

        def crash_while_the_caller_is_at_the_door() -> None:
            gate.at_door.wait(ANSWER_S)
            crash_now.set()
            writer.join(ANSWER_S)  # the crash handler has run: the queue it saw is cleared
            gate.go_on.set()

        helper = threading.Thread(target=crash_while_the_caller_is_at_the_door)
        helper.start()
        answers: list[UnitOutcome] = []
        try:
            committer.submit_callback(unit("racing the crash"), answers.append)
        except StoreUnavailable as exc:
            refused: tuple[str, Any] = ("refused", exc)
        else:
            refused = ("queued", None)
        helper.join(ANSWER_S)
        assert gate.at_door.is_set() and not writer.is_alive()
        if refused[0] == "queued":
            # Queued after all: then it must still be answered, with the writer's failure.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + ANSWER_S
            while not answers and loop.time() < deadline:
                await asyncio.sleep(0.01)
            refused = ("answered", answers[0]) if answers else ("stranded", None)
        await committer.drain(timeout_s=0.5)
        return refused

    how, outcome = asyncio.run(scenario())
    assert how in ("refused", "answered"), "the write was queued after the crash and never answered"
    assert isinstance(outcome, MemorydError) and outcome.code == 1003
    assert "writer thread stopped" in str(outcome)
    assert contents(engine) == set()
