"""The lexical index beside a large store (store/lexindex/), on a real store of each backend and real
tantivy shards: scope inside, a search sees its own writes, applying the log twice changes
nothing, an erased text's words leave the shard files, and a crash at any point is mended."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert, text

from memoryd.clock import to_rfc3339, utcnow
from memoryd.store import migrate
from memoryd.store.backends import backend_for
from memoryd.store.engine import create_store_engine
from memoryd.store.ids import new_memory_id
from memoryd.store.lexindex import index_set as lex_set
from memoryd.store.lexindex.index_set import LexSet
from memoryd.store.lexindex.logs import log_for
from memoryd.store.lexindex.shard import Shard, analyzer
from memoryd.store.schema import memories
from memoryd.store.scope import Reader
from memoryd.store.search_request import SearchRequest

OWNERS = (("agent", "a1"), ("agent", "a2"), ("user", "u1"))
COMMON = ("deploy", "database", "cache", "timeout", "release", "worker", "schema", "token")
SHARD_ROWS = 400
N = 1500
MARKER = "zqxjmarkerword"


def unique(i: int) -> str:
    return f"tok{i:05d}x"


def row(i: int, scope: str, owner: str, content: str, **extra: Any) -> dict[str, Any]:
    stamp = to_rfc3339(utcnow())
    return {"id": new_memory_id(), "content": content,
            "content_hash": hashlib.sha256(content.encode()).hexdigest(), "kind": extra.pop("kind", "fact"),
            "scope": scope, "owner": owner, "status": "active", "importance": 0.5, "importance_raw": 0.5,
            "valid_from": stamp, "recorded_at": stamp, "metadata": {}, "derived": False,
            "agent_id": owner if scope == "agent" else None, "user_id": owner if scope == "user" else None,
            **extra}


def fill(engine: Engine, n: int, start: int = 0) -> None:
    rng = random.Random(start)
    rows = []
    for i in range(start, start + n):
        scope, owner = OWNERS[i % len(OWNERS)]
        words = " ".join(rng.sample(COMMON, 3))
        rows.append(row(i, scope, owner, f"note {unique(i)} about the {words}",
                        kind="procedure" if i % 7 == 0 else "fact"))
    with engine.begin() as conn:
        conn.execute(insert(memories), rows)


@pytest.fixture
def engine(tmp_path: Path, new_db_url: Any) -> Iterator[Engine]:
    eng = create_store_engine(new_db_url() or f"sqlite:///{tmp_path / 'memoryd.db'}")
    migrate.upgrade(eng)
    fill(eng, N)
    yield eng
    lex_set.detach(eng)
    eng.dispose()


def opened(engine: Engine, directory: Path, min_rows: int = 1) -> LexSet:
    lex = LexSet(engine, directory, min_rows=min_rows, shard_rows=SHARD_ROWS)
    assert lex.open()
    lex_set.attach(engine, lex)
    return lex


def reader_of(scope: str, owner: str) -> Reader:
    return Reader(agent_id=owner) if scope == "agent" else Reader(user_id=owner)


def search(engine: Engine, query: str, reader: Reader, limit: int = 10, **req: Any) -> list[int]:
    with engine.connect() as conn:
        return [r["seq"] for r in backend_for(engine).lexical(
            conn, SearchRequest(query=query, reader=reader, **req), to_rfc3339(utcnow()), limit)]


def store_leg(engine: Engine, query: str, reader: Reader, limit: int = 10, **req: Any) -> list[int]:
    lex = lex_set.attached(engine)
    lex_set.detach(engine)
    try:
        return search(engine, query, reader, limit, **req)
    finally:
        if lex is not None:
            lex_set.attach(engine, lex)


def seq_of(engine: Engine, content_like: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT seq FROM memories WHERE content LIKE :c"),
                                {"c": f"%{content_like}%"}).scalar_one())


def shard_seqs(lex: LexSet) -> list[int]:
    """Every live document's seq in every shard (duplicates kept)."""
    import tantivy

    out: list[int] = []
    for shard in lex.shards.values():
        searcher = shard.index.searcher()
        hits = searcher.search(tantivy.Query.all_query(), limit=10 * N, count=False).hits
        if hits:
            out += [int(s) for s in searcher.fast_field_values("seq", [a for _, a in hits])]
    return out


def active_seqs(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return sorted(int(r[0]) for r in conn.execute(
            text("SELECT seq FROM memories WHERE status = 'active' AND content IS NOT NULL")))


def secret(engine: Engine) -> int:
    """A row of a1 whose text holds MARKER; its seq."""
    with engine.begin() as conn:
        conn.execute(insert(memories), [row(0, "agent", "a1", f"the secret {MARKER} is here")])
    return seq_of(engine, MARKER)


def erase(engine: Engine, seq: int) -> None:
    """What the retention pass does to a forgotten row: its text gone, the row kept."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET content = NULL, status = 'forgotten' WHERE seq = :s"),
                     {"s": seq})


def said(engine: Engine, query: str, seqs: list[int]) -> list[int]:
    """How many of the query's words each row's text says."""
    with engine.connect() as conn:
        texts = dict(conn.execute(text(
            f"SELECT seq, content FROM memories WHERE seq IN ({','.join(map(str, seqs))})")).all())
    return [sum(w in texts[s] for w in query.split()) for s in seqs]


def marker_freq(directory: Path) -> int:
    """The marker's document frequency over every shard the manifest names (deleted documents
    count until their segment is rewritten)."""
    token = analyzer().analyze(MARKER)[0]
    manifest = json.loads((directory / "manifest.json").read_text())
    total = 0
    for name in manifest["shards"].values():
        total += int(Shard(0, directory / name).index.searcher().doc_freq("content", token))
    return total


# -- tests -------------------------------------------------------------------------------------
def test_a_search_finds_each_row_by_its_word_for_its_owner_only(engine: Engine, tmp_path: Path) -> None:
    opened(engine, tmp_path / "index")
    for i in random.Random(3).sample(range(N), 40):
        scope, owner = OWNERS[i % len(OWNERS)]
        seq = seq_of(engine, unique(i))
        assert search(engine, unique(i), reader_of(scope, owner)) == [seq]
        other = next(o for o in OWNERS if o != (scope, owner))
        assert search(engine, unique(i), reader_of(*other)) == []


def test_scope_is_applied_inside_the_shards_not_after_a_global_top_k(engine: Engine, tmp_path: Path) -> None:
    # 300 rows of a2 say the word three times (they rank first); a1 has one row saying it once.
    with engine.begin() as conn:
        conn.execute(insert(memories), [row(0, "agent", "a2", "quasar quasar quasar") for _ in range(300)])
        conn.execute(insert(memories), [row(0, "agent", "a1", "one quasar among many other words here")])
    lex = opened(engine, tmp_path / "index")
    mine = seq_of(engine, "one quasar")
    with engine.connect() as conn:
        hits = lex.top(conn, ["quasar"], keys=["agent:a1"], statuses=["active"], kind=None, fetch=10)
    assert hits is not None and [s for s, _ in hits] == [mine]
    assert search(engine, "quasar", Reader(agent_id="a1")) == [mine]


def test_kind_is_applied_inside_the_shards(engine: Engine, tmp_path: Path) -> None:
    opened(engine, tmp_path / "index")
    reader = Reader(agent_id="a1")
    got = search(engine, "deploy database", reader, limit=500, kind="procedure")
    with engine.connect() as conn:
        kinds = {r[0] for r in conn.execute(
            text(f"SELECT kind FROM memories WHERE seq IN ({','.join(map(str, got))})"))}
    assert got and kinds == {"procedure"}
    assert set(got) == set(store_leg(engine, "deploy database", reader, limit=500, kind="procedure"))


def test_common_words_rank_like_fts5(engine: Engine, tmp_path: Path) -> None:
    """Both rank by BM25 over the same rows: rows that say more of the query's words come first.
    (Stemmers and score formulas differ, so ties may order differently.)"""
    opened(engine, tmp_path / "index")
    reader = Reader(agent_id="a1", user_id="u1")
    for query in ("deploy timeout", "cache schema token", "release worker database"):
        ours = search(engine, query, reader, limit=20)
        theirs = store_leg(engine, query, reader, limit=20)
        assert len(ours) == len(theirs) == 20
        assert said(engine, query, ours) == sorted(said(engine, query, ours), reverse=True)
        assert sorted(said(engine, query, ours)) == sorted(said(engine, query, theirs))


def test_a_search_sees_its_own_writes_and_changes_at_once(engine: Engine, tmp_path: Path) -> None:
    lex = opened(engine, tmp_path / "index")
    reader = Reader(agent_id="a1")
    with engine.begin() as conn:
        conn.execute(insert(memories), [row(0, "agent", "a1", "a brandnewword in the ledger")])
    fresh = seq_of(engine, "brandnewword")
    assert search(engine, "brandnewword", reader) == [fresh]
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET status = 'superseded' WHERE seq = :s"), {"s": fresh})
    with engine.connect() as conn:
        assert lex.top(conn, ["brandnewword"], keys=["agent:a1"], statuses=["active"], kind=None,
                       fetch=10) == []
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET status = 'active', owner = 'a2', agent_id = 'a2' "
                          "WHERE seq = :s"), {"s": fresh})
    assert search(engine, "brandnewword", reader) == []
    assert search(engine, "brandnewword", Reader(agent_id="a2")) == [fresh]


def test_far_behind_the_index_hands_the_search_to_fts5(engine: Engine, tmp_path: Path) -> None:
    lex = opened(engine, tmp_path / "index")
    fill(engine, lex_set.INLINE_CATCH_UP + 50, start=N)
    last = N + lex_set.INLINE_CATCH_UP + 49
    scope, owner = OWNERS[last % len(OWNERS)]
    with engine.connect() as conn:
        assert lex.top(conn, [unique(last)], keys=[f"{scope}:{owner}"], statuses=["active"], kind=None,
                       fetch=10) is None
    assert search(engine, unique(last), reader_of(scope, owner)) == [seq_of(engine, unique(last))]


def test_history_candidates_and_phrases_are_fts5s(engine: Engine, tmp_path: Path) -> None:
    lex = opened(engine, tmp_path / "index")
    with engine.connect() as conn:
        assert lex.top(conn, ["deploy"], keys=["agent:a1"], statuses=["active", "candidate"], kind=None,
                       fetch=10) is None
    reader = Reader(agent_id="a1")
    phrase = '"about the deploy"'
    assert search(engine, phrase, reader, limit=30) == store_leg(engine, phrase, reader, limit=30)


def test_applying_the_log_twice_changes_nothing(engine: Engine, tmp_path: Path) -> None:
    lex = opened(engine, tmp_path / "index")
    saved = lex.applied
    fill(engine, 100, start=N)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM memories WHERE seq IN (3, 4, 5)"))
        conn.execute(text("UPDATE memories SET status = 'archived' WHERE seq IN (6, 7)"))
    lex.catch_up()
    assert lex.applied != saved
    lex.applied = saved  # as after a crash before the manifest: every entry again
    lex.catch_up()
    seqs = shard_seqs(lex)
    assert len(seqs) == len(set(seqs))
    assert sorted(seqs) == active_seqs(engine)


def test_a_crash_before_the_manifest_is_mended_at_start(engine: Engine, tmp_path: Path) -> None:
    directory = tmp_path / "index"
    lex = opened(engine, directory)
    fill(engine, 500, start=N)  # a new shard or two, committed, not in the manifest
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM memories WHERE seq IN (10, 11)"))
    lex.catch_up()
    lex.close()  # committed; the manifest still says what open() saved
    # An interrupted rebuild's directory, which no manifest names.
    Shard(0, directory / "shard-0.99").close()
    again = opened(engine, directory)
    seqs = shard_seqs(again)
    assert len(seqs) == len(set(seqs)) and sorted(seqs) == active_seqs(engine)
    assert not (directory / "shard-0.99").exists()
    last = N + 499
    assert search(engine, unique(last), reader_of(*OWNERS[last % 3])) == [seq_of(engine, unique(last))]


def test_a_manifest_of_another_history_is_rebuilt(engine: Engine, tmp_path: Path) -> None:
    directory = tmp_path / "index"
    opened(engine, directory).close()
    manifest = json.loads((directory / "manifest.json").read_text())
    # The database restored from a backup, or the log dropped and made again: ids start over.
    with engine.begin() as conn:
        log_for(engine).drop(conn)
    with engine.begin() as conn:
        log_for(engine).ensure(conn)
    fill(engine, 10, start=N)
    manifest["position"] = {"mark": 10**12, "xmin": 10**12, "running": []}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    again = opened(engine, directory)
    assert again.build_seconds is not None  # built, not loaded
    assert sorted(shard_seqs(again)) == active_seqs(engine)


def test_an_erased_text_leaves_the_shard_files(engine: Engine, tmp_path: Path) -> None:
    directory = tmp_path / "index"
    victim = secret(engine)
    lex = opened(engine, directory)
    assert marker_freq(directory) == 1  # control
    old_dir = lex.shards[victim // SHARD_ROWS].path
    # Forget: the row leaves the searchable set at once, and later its text is erased.
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET status = 'deleting' WHERE seq = :s"), {"s": victim})
    lex.catch_up()
    assert search(engine, MARKER, Reader(agent_id="a1")) == []
    assert not lex.pending  # a status change hides the row; only an erasure rebuilds
    erase(engine, victim)
    lex.catch_up()
    assert set(lex.pending) == {victim // SHARD_ROWS}
    lex.rebuild_pending()
    assert not lex.pending and not old_dir.exists()
    assert marker_freq(directory) == 0
    every = b"".join(p.read_bytes() for p in directory.rglob("*") if p.is_file())
    assert MARKER.encode() not in every and analyzer().analyze(MARKER)[0].encode() not in every
    assert sorted(shard_seqs(lex)) == active_seqs(engine)


def test_an_erasure_a_crash_interrupted_is_rebuilt_at_start(engine: Engine, tmp_path: Path) -> None:
    directory = tmp_path / "index"
    victim = secret(engine)
    lex = opened(engine, directory)
    erase(engine, victim)
    lex.catch_up()
    lex.save()  # the log entry is trimmed: only the manifest remembers the shard to rebuild
    lex.close()  # the process ends here, before the rebuild
    assert json.loads((directory / "manifest.json").read_text())["pending"] == [victim // SHARD_ROWS]
    opened(engine, directory)
    assert marker_freq(directory) == 0


def test_a_small_store_gets_no_index_and_its_writes_no_log(engine: Engine, tmp_path: Path) -> None:
    lex = LexSet(engine, tmp_path / "index", min_rows=N + 1, shard_rows=SHARD_ROWS)
    assert not lex.open() and lex.state == "waiting"
    with engine.connect() as conn:
        assert not log_for(engine).exists(conn)
    fill(engine, 1, start=N)
    assert lex.open() and lex.status()["docs"] == N + 1


def test_an_erasure_during_its_shards_rebuild_rebuilds_it_again(engine: Engine, tmp_path: Path) -> None:
    """The builder may read a row before its text is erased and the search that applies the
    erasure marks a shard already marked: the rebuild must not clear the new mark."""
    directory = tmp_path / "index"
    victim = secret(engine)
    lex = opened(engine, directory)
    number = victim // SHARD_ROWS
    with engine.begin() as conn:  # another erasure in the same shard marks it first
        conn.execute(text("DELETE FROM memories WHERE seq = :s"), {"s": number * SHARD_ROWS + 5})
    lex.catch_up()
    build = lex._build_shard
    erased = []

    def build_then_erase(n: int) -> Shard:
        shard = build(n)  # it read the victim's words
        if not erased:
            erase(engine, victim)
            assert search(engine, MARKER, Reader(agent_id="a1")) == []  # a search applies it
            erased.append(n)
        return shard

    lex._build_shard = build_then_erase  # type: ignore[method-assign]
    lex.rebuild_pending()
    assert erased == [number] and not lex.pending
    assert marker_freq(directory) == 0


def test_a_word_the_shards_cannot_hold_is_answered_by_fts5(engine: Engine, tmp_path: Path) -> None:
    held, long = "数据库连接超时" * 3, "数据库连接超时问题" * 12  # 63 and 324 bytes, one word each
    with engine.begin() as conn:
        conn.execute(insert(memories), [row(0, "agent", "a1", f"note {held}"),
                                        row(0, "agent", "a1", f"note {long}")])
    lex = opened(engine, tmp_path / "index")
    reader = Reader(agent_id="a1")
    with engine.connect() as conn:
        assert lex.top(conn, [held], keys=["agent:a1"], statuses=["active"], kind=None, fetch=10)
        assert lex.top(conn, [long], keys=["agent:a1"], statuses=["active"], kind=None, fetch=10) is None
    assert search(engine, long, reader) == store_leg(engine, long, reader) == [seq_of(engine, long)]
    mixed = f"deploy {long}"
    assert search(engine, mixed, reader, limit=30) == store_leg(engine, mixed, reader, limit=30)


def test_a_manifest_older_than_the_logs_trim_is_rebuilt(engine: Engine, tmp_path: Path) -> None:
    directory = tmp_path / "index"
    lex = opened(engine, directory)
    old = (directory / "manifest.json").read_text()  # an index directory from a backup, say
    fill(engine, 50, start=N)
    lex.catch_up()
    lex.save()  # the log is trimmed past the old manifest's id
    lex.close()
    (directory / "manifest.json").write_text(old)
    again = opened(engine, directory)
    assert again.build_seconds is not None
    assert sorted(shard_seqs(again)) == active_seqs(engine)


class FakePanic(BaseException):
    """What pyo3 raises for a Rust panic (PanicException derives from BaseException)."""


def test_a_panic_in_the_index_thread_fails_the_index_and_fts5_answers(engine: Engine,
                                                                      tmp_path: Path) -> None:
    lex = LexSet(engine, tmp_path / "index", min_rows=1, shard_rows=SHARD_ROWS)
    lex_set.attach(engine, lex)

    def panic(*args: Any, **kwargs: Any) -> None:
        raise FakePanic("called `Option::unwrap()` on a `None` value")

    lex.rebuild_pending = panic  # type: ignore[method-assign]
    lex.start()
    lex._thread.join(timeout=60)  # type: ignore[union-attr]
    assert lex.state == "failed" and lex.error is not None and "FakePanic" in lex.error
    assert not lex.ready.is_set()
    scope, owner = OWNERS[7 % 3]
    assert search(engine, unique(7), reader_of(scope, owner)) == [seq_of(engine, unique(7))]


def test_a_panic_in_a_search_is_answered_by_fts5(engine: Engine, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    lex = opened(engine, tmp_path / "index")

    def panic(*args: Any, **kwargs: Any) -> None:
        raise FakePanic("index out of bounds")

    monkeypatch.setattr(lex, "top", panic)
    reader = Reader(agent_id="a1")
    query = "deploy timeout"
    assert search(engine, query, reader, limit=20) == store_leg(engine, query, reader, limit=20)


def test_the_thread_applies_the_log_a_page_at_a_time(engine: Engine, tmp_path: Path) -> None:
    lex = opened(engine, tmp_path / "index")
    fill(engine, 2 * lex_set.LOG_PAGE + 10, start=N)
    assert lex.catch_up(budget_s=0.0) == lex_set.LOG_PAGE  # then it saves, rebuilds, looks again
    assert lex.behind() == lex_set.LOG_PAGE + 10
    lex.catch_up()
    assert lex.behind() == 0 and sorted(shard_seqs(lex)) == active_seqs(engine)


@pytest.mark.sqlite_only("SQLite's busy timeout and its one writer's lock")
def test_a_busy_writer_defers_the_logs_trim_and_fails_nothing(engine: Engine, tmp_path: Path) -> None:
    """A large import keeps the store's writer busy: the index thread's trim waits past the busy
    timeout; it must give up quietly (the thread died with 'database is locked' at 786,000
    imported rows), and trim at a later save."""
    from memoryd.store import driver

    url = str(engine.url)
    impatient = create_store_engine(url, busy_timeout_ms=50)
    try:
        lex = LexSet(impatient, tmp_path / "index", min_rows=1, shard_rows=SHARD_ROWS)
        assert lex.open()
        fill(engine, 20, start=N)
        lex.catch_up()
        writer = driver.connect(url.removeprefix("sqlite:///"))
        writer.execute("BEGIN IMMEDIATE")  # the import's writer, holding the lock
        try:
            lex.save()  # must not raise
            saved = json.loads((tmp_path / "index" / "manifest.json").read_text())["position"]
            assert saved == lex.applied.to_json()
        finally:
            writer.rollback()
            writer.close()
        with engine.connect() as conn:
            left = conn.execute(text(f"SELECT count(*) FROM {log_for(engine).table}")).scalar_one()
        assert left == 20  # not trimmed yet
        lex.save()
        with engine.connect() as conn:
            assert conn.execute(text(f"SELECT count(*) FROM {log_for(engine).table}")).scalar_one() == 0
        lex.close()
    finally:
        impatient.dispose()
