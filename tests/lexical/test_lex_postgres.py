"""The lexical index's change log on PostgreSQL (store/postgres/lex_log.py), where writers commit out
of id order and several daemons keep their own shards from one log: an entry committed after a
later one is still applied, one daemon's trim keeps what another has not read, a daemon left
behind the trim rebuilds, and a daemon with the index off leaves a log that others read."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, text

from memoryd.store import migrate
from memoryd.store.engine import create_store_engine
from memoryd.store.lexindex.changelog import LogTrimmed
from memoryd.store.lexindex.index_set import LexSet, drop_unread_log
from memoryd.store.lexindex.logs import log_for
from memoryd.store.postgres.lex_log import READERS_TABLE
from memoryd.store.schema import memories
from tests.lexical.test_lex_set import OWNERS, SHARD_ROWS, N, active_seqs, fill, row, shard_seqs, unique

pytestmark = pytest.mark.postgres


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    eng = create_store_engine(pg_url)
    migrate.upgrade(eng)
    fill(eng, N)
    yield eng
    eng.dispose()


def opened(engine: Engine, directory: Path) -> LexSet:
    lex = LexSet(engine, directory, min_rows=1, shard_rows=SHARD_ROWS)
    assert lex.open()
    return lex


def finds(lex: LexSet, word: str, key: str = "agent:a1") -> bool:
    with lex.engine.connect() as conn:
        hits = lex.top(conn, [word], keys=[key], statuses=["active"], kind=None, fetch=10)
    return bool(hits)


def test_an_entry_committed_after_a_later_one_is_applied(engine: Engine, tmp_path: Path) -> None:
    """Transaction A takes the lower log id and commits last: the index read the log in between
    (B's entry applied), and must still apply A's; a reader that kept the last id applied
    would skip it for good."""
    lex = opened(engine, tmp_path / "index")
    slow = engine.connect()
    tx = slow.begin()
    slow.execute(insert(memories), [row(0, "agent", "a1", "the alphaword note")])  # lower id
    with engine.begin() as conn:
        conn.execute(insert(memories), [row(0, "agent", "a1", "the betaword note")])
    lex.catch_up()
    assert finds(lex, "betaword") and not finds(lex, "alphaword")
    tx.commit()
    slow.close()
    lex.catch_up()
    assert finds(lex, "alphaword")
    # Applied once each: an entry is read again only while its transaction runs.
    assert lex.catch_up() == 0
    with engine.connect() as conn:
        assert log_for(engine).behind(conn, lex.applied, 100) == 0
    seqs = shard_seqs(lex)
    assert len(seqs) == len(set(seqs)) and sorted(seqs) == active_seqs(engine)
    lex.close()


def test_a_search_sees_a_write_that_committed_behind_an_open_transaction(engine: Engine,
                                                                           tmp_path: Path) -> None:
    lex = opened(engine, tmp_path / "index")
    idle = engine.connect()
    tx = idle.begin()
    idle.execute(insert(memories), [row(0, "agent", "a1", "the heldword note")])  # runs throughout
    try:
        for i in range(3):
            with engine.begin() as conn:
                conn.execute(insert(memories), [row(0, "agent", "a1", f"the freshword{i} note")])
            assert finds(lex, f"freshword{i}")  # applied inline by the search
        assert not finds(lex, "heldword")
        # What the index keeps is the transactions running, not the entries applied past them.
        assert lex.catch_up() == 0 and len(lex.applied.running) == 1
    finally:
        tx.commit()
        idle.close()
    assert finds(lex, "heldword")
    lex.close()


def test_one_daemons_trim_keeps_what_another_has_not_read(engine: Engine, tmp_path: Path) -> None:
    first, second = opened(engine, tmp_path / "a"), opened(engine, tmp_path / "b")
    fill(engine, 300, start=N)
    first.catch_up()
    first.save()  # trims to what both have applied: the second only what its open did
    second.catch_up()
    last = N + 299
    key = "{}:{}".format(*OWNERS[last % 3])
    assert finds(second, unique(last), key)
    assert sorted(shard_seqs(second)) == active_seqs(engine)
    first.close()
    second.close()


def test_a_daemon_left_behind_the_trim_rebuilds(engine: Engine, tmp_path: Path) -> None:
    first, second = opened(engine, tmp_path / "a"), opened(engine, tmp_path / "b")
    second.close()
    # The second daemon has not saved for two days: it no longer holds the log back.
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {READERS_TABLE} SET seen_at = now() - interval '2 days' "
                          "WHERE reader = :r"), {"r": second.reader})
    fill(engine, 300, start=N)
    first.catch_up()
    first.save()
    with pytest.raises(LogTrimmed):
        second.catch_up()
    # Its thread rebuilds every shard, then serves searches again.
    again = LexSet(engine, tmp_path / "b", min_rows=1, shard_rows=SHARD_ROWS)
    again.start()
    try:
        deadline = time.monotonic() + 60
        while not (again.ready.is_set() and again.docs() == len(active_seqs(engine))):
            assert time.monotonic() < deadline, again.status()
            time.sleep(0.1)
        assert again.build_seconds is not None  # built, not loaded from the stale manifest
        assert sorted(shard_seqs(again)) == active_seqs(engine)
    finally:
        again.stop()
    # A reader gone for good (its data directory deleted) is forgotten after a week.
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {READERS_TABLE} SET seen_at = now() - interval '8 days' "
                          "WHERE reader = :r"), {"r": second.reader})
    first.save()
    with engine.connect() as conn:
        readers = {r[0] for r in conn.execute(text(f"SELECT reader FROM {READERS_TABLE}"))}
    assert readers == {first.reader, again.reader} and second.reader not in readers
    first.close()


def test_a_daemon_with_the_index_off_keeps_a_log_others_read(engine: Engine, tmp_path: Path) -> None:
    opened(engine, tmp_path / "a").close()  # saved: read lately
    drop_unread_log(engine)
    with engine.connect() as conn:
        assert log_for(engine).exists(conn)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {READERS_TABLE} SET seen_at = now() - interval '2 days'"))
    drop_unread_log(engine)
    with engine.connect() as conn:
        assert not log_for(engine).exists(conn)
        triggers = text("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'lexical_index_log%'")
        assert conn.execute(triggers).scalar_one() == 0
    fill(engine, 5, start=N)  # writes go on without the log
