"""The audit log's lanes (store/audit.py), on both backends: concurrent write transactions
append side by side without waiting on each other (PostgreSQL), and ``check`` finds an event
edited, deleted, inserted or moved, a lane cut short at its end, and a lane deleted whole."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, text

from memoryd.store import audit
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.migrate import upgrade
from tests.integration.harness import DaemonHandle, run_cli
from tests.lifecycle.helpers import QUIET

STAMP = "2026-05-01T12:00:00.000000Z"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = (f"sqlite:///{tmp_path / 'memoryd.db'}" if request.param == "sqlite"
           else request.getfixturevalue("pg_url"))
    # A lock wait past 2 s fails the statement: an append that queued behind another
    # transaction's would fail the test instead of passing slowly.
    engine = create_store_engine(url, busy_timeout_ms=2000, lock_timeout_ms=2000)
    upgrade(engine)
    yield engine
    engine.dispose()


def _events(conn: Connection, n: int, actor: str) -> None:
    audit.append_many(conn, [audit.Event(STAMP, actor, "memory.write", f"mem_{actor}_{i}",
                                         {"content_hash": f"{i:064x}", "n": i}) for i in range(n)])


def _history(engine: Engine) -> None:
    """Twenty events; on PostgreSQL written by two transactions open at once, so in two lanes."""
    if engine.dialect.name == "sqlite":
        for round_ in range(4):
            with engine.begin() as conn:
                _events(conn, 5, f"w{round_}")
        return
    for round_ in range(2):
        with engine.begin() as first, engine.begin() as second:
            _events(first, 5, f"a{round_}")
            _events(second, 5, f"b{round_}")  # lane 0 is held by `first`: this one takes lane 1


def _check(engine: Engine) -> audit.Verdict:
    with read_only(engine) as conn:
        return audit.check(conn)


def _rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT seq, lane, action FROM audit_events ORDER BY seq")))


def _exec(engine: Engine, sql: str, **params: Any) -> None:
    with engine.begin() as conn:
        conn.execute(text(sql), params)


def test_a_fresh_store_opens_lane_0_with_its_first_event(store: Engine) -> None:
    assert _check(store).ok and _check(store).heads == {}
    with store.begin() as conn:
        _events(conn, 3, "first")
    verdict = _check(store)
    assert verdict.ok, verdict.problems
    assert verdict.events == 3 and list(verdict.heads) == [0]
    assert {lane for _, lane, _ in _rows(store)} == {0}


@pytest.mark.postgres
def test_concurrent_transactions_append_to_separate_lanes_without_waiting(pg_url: str) -> None:
    # Before lanes, the second transaction waited on the first's audit lock until it ended:
    # with both open in one thread that is a lock timeout.
    engine = create_store_engine(pg_url, lock_timeout_ms=1000)
    upgrade(engine)
    try:
        with engine.begin() as conn:
            _events(conn, 1, "before")  # lane 0 exists, committed: the others must pass it by
        with engine.begin() as first, engine.begin() as second, engine.begin() as third:
            for i, conn in enumerate((first, second, third)):
                _events(conn, 2, f"t{i}")
        verdict = _check(engine)
        assert verdict.ok, verdict.problems
        assert sorted(verdict.heads) == [0, 1, 2]
        assert [count for count, _ in verdict.heads.values()] == [3, 2, 2]
        # A later transaction, alone, takes the first lane again: no lane is opened for nothing.
        with engine.begin() as conn:
            _events(conn, 1, "later")
        assert _check(engine).heads[0][0] == 4
    finally:
        engine.dispose()


def test_the_history_verifies_intact(store: Engine) -> None:
    _history(store)
    verdict = _check(store)
    assert verdict.ok, verdict.problems
    assert verdict.events == 20 + verdict.anchors
    assert len(verdict.heads) == (1 if store.dialect.name == "sqlite" else 2)


def test_an_edited_event_is_found(store: Engine) -> None:
    _history(store)
    target = _rows(store)[7][0]
    _exec(store, "UPDATE audit_events SET detail = :d WHERE seq = :s",
          d=json.dumps({"content_hash": "0" * 64, "n": 99}), s=target)
    verdict = _check(store)
    assert not verdict.ok
    assert verdict.first_break_seq == target
    assert verdict.events == sum(1 for seq, _, _ in _rows(store) if seq < target)


def test_a_deleted_event_is_found(store: Engine) -> None:
    _history(store)
    rows = _rows(store)
    gone_seq, lane = rows[6][0], rows[6][1]
    following = next(seq for seq, ln, _ in rows if ln == lane and seq > gone_seq)
    _exec(store, "DELETE FROM audit_events WHERE seq = :s", s=gone_seq)
    verdict = _check(store)
    assert not verdict.ok
    assert verdict.first_break_seq == following  # the event after the gap no longer follows


def test_two_reordered_events_are_found(store: Engine) -> None:
    _history(store)
    rows = _rows(store)
    first = rows[3]
    second = next(r for r in rows if r[1] == first[1] and r[0] > first[0])  # the lane's next event
    # Swap their positions (seq is the key: through a free number).
    _exec(store, "UPDATE audit_events SET seq = -1 WHERE seq = :a", a=first[0])
    _exec(store, "UPDATE audit_events SET seq = :a WHERE seq = :b", a=first[0], b=second[0])
    _exec(store, "UPDATE audit_events SET seq = :b WHERE seq = -1", b=second[0])
    verdict = _check(store)
    assert not verdict.ok
    assert verdict.first_break_seq == first[0]


def test_an_inserted_event_is_found(store: Engine) -> None:
    _history(store)
    rows = _rows(store)
    after = rows[4]
    with store.begin() as conn:
        prev = conn.execute(text("SELECT hash FROM audit_events WHERE seq = :s"),
                            {"s": after[0]}).scalar_one()
        # A well-formed event chained to the one before it, slipped in at the end: it does not
        # follow the lane's newest event.
        detail = {"forged": True}
        conn.execute(text("INSERT INTO audit_events (at, actor, action, memory_id, detail, prev_hash, hash, "
                          "lane) VALUES (:at, 'x', 'memory.forget', NULL, :d, :p, :h, :lane)"),
                     {"at": STAMP, "d": json.dumps(detail), "p": prev, "lane": after[1],
                      "h": audit.digest(prev, STAMP, "x", "memory.forget", None, detail)})
    verdict = _check(store)
    assert not verdict.ok and verdict.first_break_seq is not None


def test_a_lane_cut_short_at_its_end_is_found_by_its_head_row(store: Engine) -> None:
    _history(store)
    last = _rows(store)[-1][0]
    _exec(store, "DELETE FROM audit_events WHERE seq = :s", s=last)
    verdict = _check(store)
    assert not verdict.ok
    assert verdict.first_break_seq is None  # no event is wrong: the head row disagrees
    assert any("head row" in p for p in verdict.problems), verdict.problems
    with read_only(store) as conn:
        assert audit.verify(conn) == (verdict.events, 0)


@pytest.mark.postgres
def test_a_cut_lane_with_its_head_row_rewritten_is_found_by_another_lanes_anchor(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "ANCHOR_EVERY", 4)
    engine = create_store_engine(pg_url)
    upgrade(engine)
    try:
        with engine.begin() as first, engine.begin() as second:
            _events(first, 3, "a")   # lane 0: 3 events
            _events(second, 1, "b")  # lane 1: 1 event
        with engine.begin() as conn:
            _events(conn, 2, "a2")   # lane 0 reaches 5 events; its 4th crossing anchors lane 1
        with engine.begin() as first, engine.begin() as second:
            _events(first, 1, "a3")  # lane 0
            _events(second, 3, "b2")  # lane 1 reaches 4 events: it anchors lane 0's head (6 events)
        intact = _check(engine)
        assert intact.ok, intact.problems
        assert intact.anchors == 2
        # Lane 1's anchor recorded lane 0 at 6 events (the 7th was not committed yet). Cut lane 0
        # back to 5 events and make its head row agree with what is left.
        with engine.begin() as conn:
            kept = conn.execute(text("SELECT seq, hash FROM audit_events WHERE lane = 0 "
                                     "ORDER BY seq LIMIT 5")).all()
            conn.execute(text("DELETE FROM audit_events WHERE lane = 0 AND seq > :s"), {"s": kept[-1].seq})
            conn.execute(text("UPDATE audit_lanes SET n = 5, hash = :h WHERE lane = 0"), {"h": kept[-1].hash})
        verdict = _check(engine)
        assert not verdict.ok
        assert any("anchor" in p for p in verdict.problems), verdict.problems
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_lane_deleted_whole_is_found_by_an_anchor(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "ANCHOR_EVERY", 4)
    engine = create_store_engine(pg_url)
    upgrade(engine)
    try:
        with engine.begin() as first, engine.begin() as second:
            _events(first, 2, "a")
            _events(second, 2, "b")  # lane 1
        with engine.begin() as conn:
            _events(conn, 3, "a2")  # lane 0 crosses 4: its anchor names lane 1's head
        assert _check(engine).ok
        _exec(engine, "DELETE FROM audit_events WHERE lane = 1")
        _exec(engine, "DELETE FROM audit_lanes WHERE lane = 1")
        verdict = _check(engine)
        assert not verdict.ok
        assert any("lane 1 has no event #2" in p for p in verdict.problems), verdict.problems
    finally:
        engine.dispose()


def test_an_expected_head_recorded_outside_catches_a_rewritten_log(store: Engine) -> None:
    """A writer who re-chains the whole log defeats every check inside the database; a head
    kept outside it (a previous verify's ``heads``, the daemon log's anchors) does not."""
    _history(store)
    kept = [(lane, n, h) for lane, (n, h) in _check(store).heads.items()]
    # Rewrite: edit the first event and re-chain every later one of its lane, head row too.
    with store.begin() as conn:
        rows = conn.execute(text("SELECT seq, lane, at, actor, action, memory_id, detail FROM audit_events "
                                 "WHERE lane = 0 ORDER BY seq")).all()
        prev = audit.lane_genesis(0)
        for i, r in enumerate(rows):
            detail = r.detail if isinstance(r.detail, dict) else json.loads(r.detail)
            if i == 0:
                detail = {**detail, "n": -1}
            h = audit.digest(prev, r.at, r.actor, r.action, r.memory_id, detail)
            conn.execute(text("UPDATE audit_events SET detail = :d, prev_hash = :p, hash = :h "
                              "WHERE seq = :s"),
                         {"d": json.dumps(detail), "p": prev, "h": h, "s": r.seq})
            prev = h
        conn.execute(text("UPDATE audit_lanes SET hash = :h WHERE lane = 0"), {"h": prev})
    with read_only(store) as conn:
        inside = audit.check(conn)
        outside = audit.check(conn, expect=kept)
    # Anchors of another lane could catch it on PostgreSQL; on SQLite nothing inside can.
    if store.dialect.name == "sqlite":
        assert inside.ok
    assert not outside.ok
    assert any("expected head" in p for p in outside.problems), outside.problems


def test_the_cli_checks_heads_saved_earlier_and_catches_a_rewritten_log(
        start_daemon: Callable[..., DaemonHandle], tmp_path: Path) -> None:
    daemon = start_daemon(config=QUIET)
    for i in range(4):
        daemon.write(f"note {i} before the heads were saved", agent_id="agent-a")
    cli = ["audit", "verify", "--socket", str(daemon.socket)]
    saved = run_cli([*cli, "--json"], daemon.env)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    heads = tmp_path / "heads.json"
    heads.write_text(saved.stdout)
    assert json.loads(saved.stdout)["heads"]["0"][0] >= 4
    again = run_cli([*cli, "--expect", str(heads)], daemon.env)
    assert again.returncode == 0 and "verified" in again.stdout, again.stdout + again.stderr  # control
    # Re-chain lane 0 from an edited first event, head row included: nothing inside can tell.
    rows = daemon.query("SELECT seq, at, actor, action, memory_id, detail FROM audit_events WHERE lane = 0 "
                        "ORDER BY seq")
    prev = audit.lane_genesis(0)
    with daemon.db() as conn:
        for i, (seq, at, actor, action, memory_id, detail) in enumerate(rows):
            value = detail if isinstance(detail, dict) else json.loads(detail)
            if i == 0:
                value = {**value, "kind": "opinion"}
            digest = audit.digest(prev, at, actor, action, memory_id, value)
            conn.execute("UPDATE audit_events SET detail = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                         (json.dumps(value), prev, digest, seq))
            prev = digest
        conn.execute("UPDATE audit_lanes SET hash = ? WHERE lane = 0", (prev,))
    assert run_cli(cli, daemon.env).returncode == 0  # the rewrite is consistent inside the database
    caught = run_cli([*cli, "--expect", str(heads)], daemon.env)
    assert caught.returncode == 1, caught.stdout + caught.stderr
    assert "expected head" in caught.stdout
