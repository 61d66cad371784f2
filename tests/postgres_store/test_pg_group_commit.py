"""The group committer's PostgreSQL path (store/writes.py in pipeline mode, multi-row inserts,
a connection the writer keeps): its outcomes, its rollback to the per-write path when the fast
path hits a bug, and the NOTIFY it leaves to the notifier on a deferring connection."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, text

from memoryd.errors import Tombstoned
from memoryd.store import audit, groupwrite
from memoryd.store.backends import backend_for
from memoryd.store.engine import read_only
from memoryd.store.memories import WriteContext
from memoryd.store.writes import WriteUnit, commit_units
from tests.unit.helpers import NOW, build_memory

pytestmark = pytest.mark.postgres

CTX = WriteContext(actor="test:pg", passes=["embed", "extract"], max_attempts=5, idempotency_ttl_s=86400.0)


def _count(engine: Engine, sql: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def _units(texts: list[list[str]], owner: str = "a1") -> list[WriteUnit]:
    return [WriteUnit([build_memory(t, owner=owner) for t in unit], actor=owner) for unit in texts]


def test_a_group_through_a_kept_connection_writes_rows_events_and_jobs(pg_engine: Engine) -> None:
    with pg_engine.connect() as kept:  # the writer's own connection, over several transactions
        first = commit_units(kept, _units([["one", "two"], ["three"], ["one"]]), CTX, NOW)
        second = commit_units(kept, _units([["four"], ["two"]]), CTX, NOW)
    ids = [r["id"] for r in first[0]] + [first[1][0]["id"]]
    assert first[2][0]["id"] == ids[0] and second[1][0]["id"] == ids[1]  # duplicates corroborate
    assert _count(pg_engine, "SELECT count(*) FROM memories") == 4
    assert _count(pg_engine, "SELECT max(corroboration) FROM memories") == 2
    assert _count(pg_engine, "SELECT count(*) FROM jobs") == 4 * 2
    assert _count(pg_engine, "SELECT count(*) FROM audit_events") == 4 + 2
    with read_only(pg_engine) as conn:
        assert audit.check(conn).ok


def test_a_tombstoned_item_refuses_its_unit_and_the_rest_commit(pg_engine: Engine) -> None:
    commit_units(pg_engine, _units([["doomed"]]), CTX, NOW)
    with pg_engine.begin() as conn:
        [mid] = [r[0] for r in conn.execute(text("SELECT id FROM memories"))]
        conn.execute(text("INSERT INTO tombstones (scope, owner, content_hash, created_at) "
                          "SELECT scope, :o, content_hash, recorded_at FROM memories WHERE id = :m "
                          "ON CONFLICT DO NOTHING"),
                     {"o": _keyed(conn, "a1"), "m": mid})
    out = commit_units(pg_engine, _units([["fresh", "doomed"], ["another"]]), CTX, NOW)
    assert isinstance(out[0], Tombstoned)
    assert out[1][0]["id"]
    assert _count(pg_engine, "SELECT count(*) FROM memories WHERE content = 'fresh'") == 0


def _keyed(conn: Any, owner: str) -> str:
    from memoryd.store import keyed

    return keyed.keyed(conn, owner)


def test_a_bug_in_the_fast_path_rolls_it_back_and_each_unit_takes_the_per_write_path(
        pg_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    real = groupwrite._write

    def broken(*args: Any) -> None:
        real(*args)  # the group's statement is sent ...
        raise RuntimeError("a bug after the rows were inserted")  # ... then the fast path fails

    monkeypatch.setattr(groupwrite, "_write", broken)
    out = commit_units(pg_engine, _units([["alpha", "beta"], ["gamma"]]), CTX, NOW)
    assert [len(o) for o in out] == [2, 1]
    # The fast path's transaction was rolled back: each row once, from the slow path.
    assert _count(pg_engine, "SELECT count(*) FROM memories") == 3
    assert _count(pg_engine, "SELECT max(corroboration) FROM memories") == 1  # none seen twice
    assert _count(pg_engine, "SELECT count(*) FROM audit_events WHERE action = 'memory.write'") == 3
    assert _count(pg_engine, "SELECT count(*) FROM audit_events") == 3
    with read_only(pg_engine) as conn:
        assert audit.check(conn).ok


def test_a_deferring_connection_leaves_the_notify_to_its_committer(pg_engine: Engine) -> None:
    backend = backend_for(pg_engine)
    with pg_engine.connect() as kept, pg_engine.connect() as listener:
        listener.exec_driver_sql("LISTEN memoryd_jobs")
        listener.commit()
        backend.defer_notify(kept)
        commit_units(kept, _units([["wake nobody yet"]]), CTX, NOW)
        assert backend.take_notify(kept) is True  # jobs were enqueued: the committer notifies
        assert backend.take_notify(kept) is False
        driver: Any = listener.connection.driver_connection
        assert list(driver.notifies(timeout=0.5, stop_after=1)) == []  # the transaction sent none
        backend.defer_notify(kept, defer=False)
        commit_units(kept, _units([["wake them now"]]), CTX, NOW)
        assert [n.channel for n in driver.notifies(timeout=2.0, stop_after=1)] == ["memoryd_jobs"]


def test_a_large_group_goes_in_multi_row_inserts_with_every_value_kept(pg_engine: Engine) -> None:
    from memoryd.store import prepared

    items = [build_memory(f"bulk note {i}", owner=f"o{i % 3}", metadata={"n": i, "tags": ["x"]})
             for i in range(prepared.BULK_MIN_ROWS + 44)]
    items[0].derived, items[0].status = True, "candidate"
    [out] = commit_units(pg_engine, [WriteUnit(items, actor="bulk")], CTX, NOW)
    assert len(out) == len(items)
    with pg_engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(text("SELECT id, content, metadata, derived, status, owner "
                                                   "FROM memories"))}
    first = rows[out[0]["id"]]
    assert (first.content, first.metadata, first.derived, first.status, first.owner) == (
        "bulk note 0", {"n": 0, "tags": ["x"]}, True, "candidate", "o0")
    assert rows[out[-1]["id"]].metadata["n"] == len(items) - 1
    assert _count(pg_engine, "SELECT count(*) FROM jobs") == 2 * len(items)
    with read_only(pg_engine) as conn:
        verdict = audit.check(conn)
    assert verdict.ok and verdict.events == len(items) + verdict.anchors


HOLD = "held inside its insert by a trigger"


def test_a_batch_whose_anchor_is_due_is_sent_whole_with_its_commit_before_any_answer_is_awaited(
        pg_engine: Engine) -> None:
    """A group whose audit events pass an anchor reads the other lanes' heads before it inserts
    anything, so its rows, events, jobs and COMMIT reach the server together. Here the server
    sleeps inside the batch's INSERT while the client's socket is shut: the server finds the
    COMMIT already sent and commits the batch whole. (Before, the anchor's read was awaited
    after the INSERT, the COMMIT was never sent, and the batch was lost.)"""
    import os
    import socket
    import threading

    from sqlalchemy import select

    from memoryd.store.schema import audit_lanes

    commit_units(pg_engine, _units([[f"filler {i}" for i in range(audit.ANCHOR_EVERY - 1)]]), CTX, NOW)
    with pg_engine.begin() as holder:  # lane 0 held: the next write opens lane 1
        holder.execute(select(audit_lanes.c.lane).where(audit_lanes.c.lane == 0).with_for_update())
        commit_units(pg_engine, _units([["on lane one"]], owner="b"), CTX, NOW)
    with pg_engine.begin() as conn:
        conn.execute(text("CREATE FUNCTION hold_batch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                          f"IF NEW.content = '{HOLD}' THEN PERFORM pg_sleep(3); END IF; RETURN NULL; END $$"))
        conn.execute(text("CREATE TRIGGER hold_batch AFTER INSERT ON memories FOR EACH ROW "
                          "EXECUTE FUNCTION hold_batch()"))
    kept = pg_engine.connect()
    fd = kept.connection.dbapi_connection.pgconn.socket  # type: ignore[union-attr]
    outcome: list[Any] = []
    writer = threading.Thread(target=lambda: outcome.append(
        commit_units(kept, _units([[HOLD]]), CTX, NOW)), daemon=True)
    writer.start()
    sleeping = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
    for _ in range(200):
        if _count(pg_engine, sleeping):
            break
        threading.Event().wait(0.05)
    else:
        raise AssertionError("the batch never reached its INSERT")
    cut = socket.socket(fileno=os.dup(fd))
    cut.shutdown(socket.SHUT_RDWR)  # the client is gone, as after kill -9
    cut.close()
    writer.join(30)
    for _ in range(200):
        if not _count(pg_engine, sleeping):
            break
        threading.Event().wait(0.05)
    kept.invalidate()
    kept.close()
    assert _count(pg_engine, f"SELECT count(*) FROM memories WHERE content = '{HOLD}'") == 1
    assert _count(pg_engine, "SELECT count(*) FROM audit_events WHERE action = 'audit.anchor'") == 1
    assert _count(pg_engine, "SELECT count(*) FROM jobs j JOIN memories m ON m.id = j.target "
                             f"WHERE m.content = '{HOLD}'") == 2
    with read_only(pg_engine) as conn:
        assert audit.check(conn).ok


def test_a_read_only_transaction_reads_one_snapshot(pg_engine: Engine) -> None:
    """audit.verify reads the events, then the lanes' head rows: a commit between the two must
    not show a head row newer than the events read (READ COMMITTED would)."""
    count = "SELECT count(*) FROM audit_events"
    with read_only(pg_engine) as conn:
        before = conn.execute(text(count)).scalar_one()
        commit_units(pg_engine, _units([["committed meanwhile"]]), CTX, NOW)
        assert conn.execute(text(count)).scalar_one() == before
        assert audit.check(conn).ok
    assert _count(pg_engine, count) == before + 1


ODD = 'quotes " and \\ backslash, a newline\n, a tab\t, \u2028, é, 😀, {"json": [1]} and $1 %s'


def test_a_group_is_read_in_one_query_and_written_in_one_statement(
        pg_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the driver is sent for a plain group: the identity locks, one query for the
    tombstones, the stored rows and the audit lane, one statement for every write, COMMIT;
    however many rows, events and jobs (an executemany per table sent one statement per row)."""
    import psycopg

    commit_units(pg_engine, _units([["stored before"]]), CTX, NOW)
    sent: list[str] = []
    real_execute, real_many = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return real_execute(self, query, *args, **kwargs)

    def executemany(self: Any, query: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
        sent.extend("MANY " + str(query) for _ in params)
        return real_many(self, query, params, *args, **kwargs)

    with pg_engine.connect() as kept:  # as the daemon's writer: a kept connection, NOTIFY deferred
        backend_for(kept).defer_notify(kept)
        commit_units(kept, _units([["warm"]]), CTX, NOW)  # the store's secret read and kept
        monkeypatch.setattr(psycopg.Cursor, "execute", execute)
        monkeypatch.setattr(psycopg.Cursor, "executemany", executemany)
        out = commit_units(kept, _units([["new one", "new two"], ["stored before"], ["new one"]]), CTX, NOW)
        monkeypatch.undo()
    assert all(not isinstance(o, Exception) for o in out), out
    kinds = [s.split()[0] for s in sent]
    assert kinds == ["SELECT", "WITH", "WITH", "COMMIT"], sent
    assert "pg_advisory_xact_lock" in sent[0]
    assert "audit_lanes" in sent[1] and "INSERT INTO memories" in sent[2]


def test_a_group_keeps_every_value_order_and_count(pg_engine: Engine) -> None:
    """The rows, events and jobs a group writes through its JSON documents: text of every
    kind byte for byte, NULLs, metadata, corroborations of rows new in the group and of rows
    stored before, events in chain order, jobs in row then pass order."""
    [stored] = commit_units(pg_engine, _units([["stored before"]]), CTX, NOW)
    items = [build_memory(ODD, owner="a1", metadata={"odd": ODD, "n": [1, 2.5, None, True]}),
             build_memory("plain", owner="a1", valid_to="2027-01-01T00:00:00.000000Z")]
    items[1].derived, items[1].status = True, "candidate"
    units = [WriteUnit(items, actor="w1"), WriteUnit([build_memory("stored before", owner="a1")], actor="w2"),
             WriteUnit([build_memory(ODD, owner="a1")], actor="w3"),
             WriteUnit([build_memory(ODD, owner="a1")], actor="w4")]
    out = commit_units(pg_engine, units, CTX, NOW)
    odd_id, plain_id = out[0][0]["id"], out[0][1]["id"]
    assert out[1][0]["duplicate_of"] == stored[0]["id"]
    assert out[2][0]["duplicate_of"] == odd_id and out[3][0]["duplicate_of"] == odd_id
    with pg_engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(text(
            "SELECT id, content, metadata, derived, status, valid_to, corroboration, occurred_at "
            "FROM memories"))}
        events = conn.execute(text("SELECT action, memory_id, actor FROM audit_events ORDER BY seq")).all()
        queued = conn.execute(text('SELECT "pass", target, state, max_attempts FROM jobs ORDER BY id')).all()
    odd = rows[odd_id]
    assert (odd.content, odd.metadata, odd.derived, odd.status, odd.valid_to, odd.occurred_at) == (
        ODD, {"odd": ODD, "n": [1, 2.5, None, True]}, False, "active", None, None)
    assert odd.corroboration == 3  # written once, then twice again in the same group
    assert rows[stored[0]["id"]].corroboration == 2  # stored before, corroborated once
    plain = rows[plain_id]
    assert (plain.derived, plain.status, plain.valid_to, plain.corroboration) == (
        True, "candidate", "2027-01-01T00:00:00.000000Z", 1)
    assert [tuple(e) for e in events[1:]] == [
        ("memory.write", odd_id, "w1"), ("memory.derive", plain_id, "w1"),
        ("memory.corroborate", stored[0]["id"], "w2"), ("memory.corroborate", odd_id, "w3"),
        ("memory.corroborate", odd_id, "w4")]
    assert [tuple(j) for j in queued[2:]] == [
        ("embed", odd_id, "ready", 5), ("extract", odd_id, "ready", 5),
        ("embed", plain_id, "ready", 5), ("extract", plain_id, "ready", 5)]
    with read_only(pg_engine) as conn:
        verdict = audit.check(conn)
    assert verdict.ok and verdict.events == 6


def test_a_burst_of_writes_wakes_one_writer_of_three(pg_engine: Engine) -> None:
    """Writes queued while every writer waits wake one writer, which commits them in one batch;
    the other two sleep on (woken one per write, they woke to find the queue taken)."""
    import asyncio
    import time

    from memoryd.service.committer import GroupCommitter

    async def idle(committer: GroupCommitter) -> None:
        deadline = time.monotonic() + 10
        while committer._idle < 3:
            assert time.monotonic() < deadline, "the writers never all waited"
            await asyncio.sleep(0.01)

    async def scenario() -> tuple[int, int]:
        committer = GroupCommitter(pg_engine, CTX, max_queue=64, max_batch=512, clock=lambda: NOW,
                                   on_commit=lambda: None, writers=3)
        committer.start()
        await idle(committer)
        waits = 0
        real_wait = committer._cond.wait

        def counting(timeout: float | None = None) -> bool:
            nonlocal waits
            waits += 1
            return real_wait(timeout)

        committer._cond.wait = counting  # type: ignore[method-assign]
        with committer._cond:  # the whole burst is queued before any writer can take it
            futures = [committer.submit(u) for u in _units([[f"burst {i}"] for i in range(6)])]
        outcomes = await asyncio.gather(*futures)
        assert all(len(o) == 1 for o in outcomes)
        await idle(committer)
        seen = waits
        await committer.drain()
        return committer.batches, seen

    batches, waits = asyncio.run(scenario())
    assert batches == 1
    assert waits == 1  # the one writer woken, back to waiting; one per write woke all three


@pytest.mark.parametrize("owner", ['a "quoted" \\ owner, {braced}', "NULL", "", " spaced ", "é,😀"])
def test_an_owner_of_any_text_finds_its_duplicates_and_tombstones(pg_engine: Engine, owner: str) -> None:
    """The group's lookup binds identities as array literals in text: an owner with quotes,
    backslashes, commas, braces, the word NULL or nothing at all is matched as itself."""
    [first] = commit_units(pg_engine, _units([["a note"], ["doomed"]], owner=owner)[:1], CTX, NOW)
    [again] = commit_units(pg_engine, _units([["a note"]], owner=owner), CTX, NOW)
    assert again[0]["duplicate_of"] == first[0]["id"]
    [other] = commit_units(pg_engine, _units([["a note"]], owner=owner + "x"), CTX, NOW)
    assert "duplicate_of" not in other[0]  # positive control: another owner's text is new
    with pg_engine.begin() as conn:
        conn.execute(text("INSERT INTO tombstones (scope, owner, content_hash, created_at) "
                          "VALUES ('agent', :o, :h, '2026-01-01T00:00:00.000000Z')"),
                     {"o": _keyed(conn, owner), "h": build_memory("doomed", owner=owner).hash})
    out = commit_units(pg_engine, _units([["doomed"]], owner=owner), CTX, NOW)
    assert isinstance(out[0], Tombstoned)


def _flush_stats(conn: Any) -> None:
    """Make this backend's table counters visible to others now (they are sent about once a second)."""
    conn.execute(text("SELECT pg_stat_force_next_flush()"))
    conn.commit()


def _seq_scans(engine: Engine) -> int:
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        return int(conn.execute(text(
            "SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'memories'")).scalar_one())


def test_a_corroboration_on_a_long_kept_connection_never_scans_the_whole_table(pg_engine: Engine) -> None:
    """The writer's connection lives as long as the daemon. A group statement prepared while a
    new store held a few rows kept the plan made then: duplicates found their rows by a hash
    join over a sequential scan of every memory (4 ms a write at 11,000 rows in bench/scale.py,
    growing with the store) until autovacuum next analysed the table."""
    with pg_engine.begin() as conn:
        conn.execute(text("ALTER TABLE memories SET (autovacuum_enabled = false)"))  # no ANALYZE
    with pg_engine.connect() as kept, pg_engine.connect() as other:
        for i in range(12):  # prepared and planned while the table is small, duplicates included
            commit_units(kept, _units([[f"early {i % 3}"]]), CTX, NOW)
        for at in range(0, 5000, 500):
            commit_units(other, _units([[f"later {at + i}" for i in range(500)]]), CTX, NOW)
        _flush_stats(kept)
        before = _seq_scans(pg_engine)
        out = commit_units(kept, _units([["early 1"]]), CTX, NOW)
        assert out[0][0]["id"]
        _flush_stats(kept)
        assert _seq_scans(pg_engine) == before
    assert _count(pg_engine, "SELECT corroboration FROM memories WHERE content = 'early 1'") == 5
