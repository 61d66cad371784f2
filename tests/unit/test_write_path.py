"""The write path: duplicates, tombstones, idempotency, group-commit units, the audit chain."""

from __future__ import annotations

import unicodedata
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from memoryd.errors import Conflict, StoreUnavailable, Tombstoned
from memoryd.store import audit, driver
from memoryd.store.engine import read_only
from memoryd.store.memories import WriteContext, add_tombstone, content_hash, write_memory
from memoryd.store.schema import audit_events, idempotency_keys, jobs, memories
from memoryd.store.writes import WriteUnit, commit_units

from .helpers import NOW, build_memory, count


def commit(engine: Engine, ctx: WriteContext, *units: list[Any], now: Any = NOW,
           actor: str = "test:unit") -> list[Any]:
    """commit_units over units given as lists of NewMemory."""
    return commit_units(engine, [WriteUnit(items=items, actor=actor) for items in units], ctx, now)


def tombstone(engine: Engine, content: str, *, scope: str = "agent", owner: str = "a1") -> None:
    with engine.begin() as conn:
        add_tombstone(conn, scope, owner, content_hash(content), NOW, reason="rejected by user")


# -- duplicates ------------------------------------------------------------------------


def test_duplicate_in_same_scope_and_owner_returns_duplicate_of_and_writes_nothing(
        engine: Engine, write_ctx: WriteContext) -> None:
    [[first]] = commit(engine, write_ctx, [build_memory("The staging DB listens on 5432")])
    # Identity is NFC + outer whitespace trimmed.
    [[again]] = commit(engine, write_ctx, [build_memory("  The staging DB listens on 5432\n")])
    assert again["duplicate_of"] == first["id"]
    assert again["id"] == first["id"]
    assert again["queued"] == []
    assert count(engine, memories) == 1
    assert count(engine, jobs) == 1
    # The repeat corroborates the existing row, and that change is audited too.
    with read_only(engine) as conn:
        actions = conn.execute(select(audit_events.c.action).order_by(audit_events.c.seq)).scalars().all()
        corroboration = conn.execute(select(memories.c.corroboration)).scalar_one()
    assert actions == ["memory.write", "memory.corroborate"]
    assert corroboration == 2


def test_nfc_equivalent_content_is_a_duplicate(engine: Engine, write_ctx: WriteContext) -> None:
    composed = unicodedata.normalize("NFC", "café opens at nine")
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    [[first]] = commit(engine, write_ctx, [build_memory(composed)])
    [[again]] = commit(engine, write_ctx, [build_memory(decomposed)])
    assert again["duplicate_of"] == first["id"]
    assert count(engine, memories) == 1


def test_same_content_for_another_owner_or_scope_writes_a_row(engine: Engine,
                                                              write_ctx: WriteContext) -> None:
    text = "The staging DB listens on 5432"
    [[a1]] = commit(engine, write_ctx, [build_memory(text, owner="a1")])
    [[a2]] = commit(engine, write_ctx, [build_memory(text, owner="a2")])
    [[u1]] = commit(engine, write_ctx, [build_memory(text, scope="user", owner="a1")])
    assert "duplicate_of" not in a2 and "duplicate_of" not in u1
    assert len({a1["id"], a2["id"], u1["id"]}) == 3
    assert count(engine, memories) == 3


def test_a_retired_row_is_not_a_duplicate(engine: Engine, write_ctx: WriteContext) -> None:
    [[first]] = commit(engine, write_ctx, [build_memory("deploys happen on Fridays")])
    with engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == first["id"]).values(status="superseded"))
    [[again]] = commit(engine, write_ctx, [build_memory("deploys happen on Fridays")])
    assert "duplicate_of" not in again
    assert count(engine, memories) == 2


# -- tombstones ------------------------------------------------------------------------


def test_tombstoned_content_is_refused_while_another_owner_succeeds(engine: Engine,
                                                                    write_ctx: WriteContext) -> None:
    text = "my password is hunter2"
    tombstone(engine, text, owner="a1")
    refused, written = commit(engine, write_ctx, [build_memory(text, owner="a1")],
                              [build_memory(text, owner="a2")])
    assert isinstance(refused, Tombstoned)
    assert refused.code == 1006
    assert refused.data["field"] == "content"
    assert written[0]["id"].startswith("mem_")
    assert count(engine, memories, memories.c.owner == "a1") == 0
    assert count(engine, memories, memories.c.owner == "a2") == 1


# -- idempotency -----------------------------------------------------------------------


def test_idempotency_key_retry_returns_the_first_result(engine: Engine, write_ctx: WriteContext) -> None:
    item = build_memory("rotate the keys monthly", idempotency_key="req-1")
    [[first]] = commit(engine, write_ctx, [item])
    [[retry]] = commit(engine, write_ctx, [build_memory("rotate the keys monthly", idempotency_key="req-1")],
                       now=NOW + timedelta(hours=1))
    assert retry == first
    assert "duplicate_of" not in retry
    assert count(engine, memories) == 1
    assert count(engine, audit_events) == 1


def test_idempotency_key_reused_with_different_params_is_a_conflict(engine: Engine,
                                                                     write_ctx: WriteContext) -> None:
    commit(engine, write_ctx, [build_memory("rotate the keys monthly", idempotency_key="req-1")])
    [refused] = commit(engine, write_ctx, [build_memory("rotate the keys weekly", idempotency_key="req-1")])
    assert isinstance(refused, Conflict)
    assert refused.code == 1007
    assert refused.data["field"] == "idempotency_key"
    assert count(engine, memories) == 1
    # Positive control: keys are per owner, so another owner may use the same key.
    [[other]] = commit(engine, write_ctx,
                       [build_memory("rotate the keys weekly", owner="a2", idempotency_key="req-1")])
    assert other["id"].startswith("mem_")
    assert count(engine, memories) == 2


def test_expired_idempotency_key_may_be_reused_for_a_new_write(engine: Engine,
                                                               write_ctx: WriteContext) -> None:
    [[first]] = commit(engine, write_ctx, [build_memory("rotate the keys monthly", idempotency_key="req-1")])
    later = NOW + timedelta(seconds=write_ctx.idempotency_ttl_s + 60)
    # The expired key is still in the table (not yet pruned).
    assert count(engine, idempotency_keys) == 1
    [outcome] = commit(engine, write_ctx,
                       [build_memory("rotate the keys weekly", idempotency_key="req-1")], now=later)
    assert not isinstance(outcome, Exception), f"expired key blocked a new write: {outcome!r}"
    [second] = outcome
    assert second["id"] != first["id"]
    assert count(engine, memories) == 2
    # ...and the key now remembers the new write.
    [[retry]] = commit(engine, write_ctx,
                       [build_memory("rotate the keys weekly", idempotency_key="req-1")], now=later)
    assert retry == second


# -- units in one group commit -----------------------------------------------------------


def test_refused_unit_rolls_back_alone_while_the_others_commit(engine: Engine,
                                                               write_ctx: WriteContext) -> None:
    tombstone(engine, "forbidden text")
    outcomes = commit(
        engine, write_ctx,
        [build_memory("first note")],
        [build_memory("forbidden text")],
        [build_memory("third note")],
    )
    assert isinstance(outcomes[1], Tombstoned)
    ids = [outcomes[0][0]["id"], outcomes[2][0]["id"]]
    with read_only(engine) as conn:
        stored = {r.id: r.content for r in conn.execute(select(memories.c.id, memories.c.content))}
    assert stored == {ids[0]: "first note", ids[1]: "third note"}
    assert count(engine, jobs) == 2
    assert count(engine, audit_events) == 2


def test_write_many_unit_is_all_or_nothing(engine: Engine, write_ctx: WriteContext) -> None:
    tombstone(engine, "forbidden text")
    many, single = commit(
        engine, write_ctx,
        [build_memory("good item one"), build_memory("good item two"), build_memory("forbidden text")],
        [build_memory("an unrelated write")],
    )
    assert isinstance(many, Tombstoned)
    assert single[0]["id"].startswith("mem_")
    with read_only(engine) as conn:
        contents = [r[0] for r in conn.execute(select(memories.c.content))]
    assert contents == ["an unrelated write"]
    # The rolled-back items left no audit event and no job, and the chain is intact.
    assert count(engine, audit_events) == 1
    assert count(engine, jobs) == 1
    with read_only(engine) as conn:
        assert audit.verify(conn) == (1, None)


def test_write_many_unit_returns_one_result_per_item_in_order(engine: Engine,
                                                              write_ctx: WriteContext) -> None:
    [results] = commit(engine, write_ctx, [build_memory(f"item {i}") for i in range(5)])
    with read_only(engine) as conn:
        by_id = {r.id: r.content for r in conn.execute(select(memories.c.id, memories.c.content))}
    assert [by_id[r["id"]] for r in results] == [f"item {i}" for i in range(5)]
    assert all(r["queued"] == ["embed"] for r in results)


def test_store_failure_answers_store_unavailable_for_every_unit(make_engine: Any, db_path: Any,
                                                                write_ctx: WriteContext) -> None:
    engine = make_engine(busy_timeout_ms=50)
    raw = driver.connect(str(db_path), timeout_s=0)
    raw.isolation_level = None
    raw.execute("BEGIN IMMEDIATE")
    try:
        outcomes = commit(engine, write_ctx, [build_memory("one")], [build_memory("two")])
    finally:
        raw.execute("ROLLBACK")
        raw.close()
    assert all(isinstance(o, StoreUnavailable) and o.code == 1003 for o in outcomes)
    assert "locked" in outcomes[0].message and "nothing was written" in outcomes[0].message
    assert count(engine, memories) == 0
    # Positive control: the same write goes through once the lock is gone.
    [[ok]] = commit(engine, write_ctx, [build_memory("one")])
    assert count(engine, memories, memories.c.id == ok["id"]) == 1


# -- audit ---------------------------------------------------------------------------


def test_audit_event_is_written_in_the_same_transaction_as_the_row(engine: Engine,
                                                                   write_ctx: WriteContext) -> None:
    class Abort(Exception):
        pass

    with pytest.raises(Abort), engine.begin() as conn:
        result = write_memory(conn, build_memory("rolled back"), NOW, write_ctx)
        # Inside the transaction both the row and its event exist...
        assert conn.execute(select(audit_events.c.memory_id)).scalars().all() == [result["id"]]
        raise Abort
    # ...and the rollback took both.
    assert count(engine, memories) == 0
    assert count(engine, audit_events) == 0


def test_audit_event_holds_hashes_not_content_and_chain_verifies(engine: Engine,
                                                                 write_ctx: WriteContext) -> None:
    secret = "the launch code is tangerine-42"
    outcomes = commit(engine, write_ctx, [build_memory(secret)], [build_memory("second")],
                      [build_memory("third", owner="a2")])
    mid = outcomes[0][0]["id"]
    with read_only(engine) as conn:
        rows = conn.execute(select(audit_events).order_by(audit_events.c.seq)).all()
        checked, broken = audit.verify(conn)
    assert (checked, broken) == (3, None)
    event = rows[0]
    assert event.memory_id == mid and event.action == "memory.write"
    assert event.detail["content_hash"] == content_hash(secret)
    assert event.actor == "test:unit"
    for row in rows:
        assert "tangerine" not in repr(tuple(row))
    assert rows[1].prev_hash == rows[0].hash and rows[2].prev_hash == rows[1].hash
    assert rows[0].prev_hash == audit.GENESIS


def test_tampered_audit_event_is_detected_by_verify(engine: Engine, write_ctx: WriteContext) -> None:
    commit(engine, write_ctx, *[[build_memory(f"note {i}")] for i in range(4)])
    with read_only(engine) as conn:
        assert audit.verify(conn) == (4, None)
        seqs = conn.execute(select(audit_events.c.seq).order_by(audit_events.c.seq)).scalars().all()
    with engine.begin() as conn:
        conn.execute(update(audit_events).where(audit_events.c.seq == seqs[2])
                     .values(detail={"content_hash": "0" * 64}))
    with read_only(engine) as conn:
        assert audit.verify(conn) == (2, seqs[2])


def test_deleted_audit_event_breaks_the_chain(engine: Engine, write_ctx: WriteContext) -> None:
    commit(engine, write_ctx, *[[build_memory(f"note {i}")] for i in range(3)])
    with engine.begin() as conn:
        seqs = conn.execute(select(audit_events.c.seq).order_by(audit_events.c.seq)).scalars().all()
        conn.execute(audit_events.delete().where(audit_events.c.seq == seqs[1]))
    with read_only(engine) as conn:
        assert audit.verify(conn) == (1, seqs[2])
