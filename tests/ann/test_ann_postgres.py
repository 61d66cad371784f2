"""The HNSW graphs beside a PostgreSQL store (store/annindex/index_set.py over
store/postgres/ann_log.py): built from pgvector's rows, in step with writers through the vector
change log, shared by daemons that each keep their own graphs, erased on forget, and rebuilt
when the log was trimmed past them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine, text

from memoryd.store import vectors
from memoryd.store.annindex import index_set as ann_set
from memoryd.store.annindex.index_set import AnnSet
from memoryd.store.postgres import vectors as pg_vectors
from memoryd.store.postgres.ann_log import LOG_TABLE, READERS_TABLE
from tests.ann._store import DIM, clustered, make_store

pytestmark = pytest.mark.postgres

BIG = "agent:big"
OTHER = "agent:other"
SMALL = "user:u1"
MIN_ROWS = 1000
PART_ROWS = 1500


@pytest.fixture
def store(pg_url: str) -> Iterator[tuple[Engine, dict[str, list[int]], np.ndarray]]:
    engine, seqs, vecs = make_store(pg_url, {BIG: 2500, OTHER: 1200, SMALL: 200},
                                    kinds=("fact", "fact", "fact", "decision"))
    yield engine, seqs, vecs
    ann_set.detach(engine)
    engine.dispose()


def opened(engine: Engine, directory: Path) -> AnnSet:
    ann = AnnSet(engine, directory, min_rows=MIN_ROWS, threads=2, save_every=10**9, part_rows=PART_ROWS)
    ann.open()
    return ann


def seq_list(seqs: list[int]) -> str:
    return ",".join(str(int(s)) for s in seqs)


def search(engine: Engine, ann: AnnSet | None, query: np.ndarray, k: int, keys: list[str],
           kind: str | None = None) -> list[int]:
    """The daemon's vector leg on PostgreSQL: through ``ann``'s graphs, or (None) exactly."""
    ann_set.detach(engine)
    if ann is not None:
        ann_set.attach(engine, ann)
    try:
        with engine.begin() as conn:
            if ann is None:
                hits = pg_vectors._run(conn, query, k, keys, ("active",), kind, exact=True)
            else:
                hits = pg_vectors.knn(conn, query, k=k, scope_keys=keys, statuses=("active",), kind=kind)
    finally:
        ann_set.detach(engine)
    return [s for s, _ in hits]


def owner_labels(ann: AnnSet, key: str) -> set[int]:
    with ann.engine.connect() as conn:
        owner = ann.source.owner_ids(conn, [key])[key]
    return ann.indexes[owner].labels()


def store_active(engine: Engine, key: str) -> set[int]:
    scope, owner = key.split(":", 1)
    with engine.connect() as conn:
        return {int(r[0]) for r in conn.execute(text(
            "SELECT m.seq FROM memories m JOIN memory_vectors v ON v.memory_seq = m.seq "
            "WHERE m.scope = :s AND m.owner = :o AND m.status = 'active'"), {"s": scope, "o": owner})}


def add_rows(engine: Engine, key: str, vecs: np.ndarray) -> list[int]:
    """New embedded rows for ``key``, written as the embed pass writes them (row, then vector)."""
    scope, owner = key.split(":", 1)
    with engine.begin() as conn:
        seqs = [int(conn.execute(text(
            "INSERT INTO memories (id, content, content_hash, kind, scope, owner, status, importance, "
            "importance_raw, valid_from, recorded_at, metadata, derived) VALUES (md5(random()::text), "
            "'added', 'h', 'fact', :s, :o, 'active', 0.5, 0.5, '2026-01-01T00:00:00Z', "
            "'2026-01-01T00:00:00Z', '{}', false) RETURNING seq"), {"s": scope, "o": owner}).scalar_one())
                for _ in vecs]
        vectors.upsert(conn, [{"memory_seq": s, "model": "test-model", "dim": DIM, "vector": v.tobytes(),
                               "content_hash": "t", "embedded_at": "2026-01-01T00:00:00Z"}
                              for s, v in zip(seqs, vecs, strict=True)])
    return seqs


def test_large_owners_get_graphs_split_in_parts_and_find_what_the_exact_scan_finds(
        store, tmp_path: Path) -> None:
    engine, seqs, _ = store
    ann = opened(engine, tmp_path / "index")
    assert len(ann.indexes) == 2  # BIG and OTHER; SMALL's 200 rows stay exact
    assert owner_labels(ann, BIG) == set(seqs[BIG]) and owner_labels(ann, OTHER) == set(seqs[OTHER])
    with engine.connect() as conn:
        big = ann.indexes[ann.source.owner_ids(conn, [BIG])[BIG]]
    assert [int(p.index.element_count) for p in big.parts] == [1500, 1000]
    keys = [BIG, OTHER, SMALL]
    overlap = [len(set(search(engine, ann, q, 10, keys)) & set(search(engine, None, q, 10, keys))) / 10
               for q in clustered(40, seed=99)]
    assert np.mean(overlap) >= 0.95, np.mean(overlap)
    # A reader of one owner gets that owner's rows only, from the graphs and the exact scan alike.
    query = clustered(1, seed=5)[0]
    assert set(search(engine, ann, query, 20, [OTHER])) <= set(seqs[OTHER])
    assert set(search(engine, ann, query, 20, [SMALL])) == set(search(engine, None, query, 20, [SMALL]))
    # A kind is applied inside the walk.
    decisions = search(engine, ann, query, 30, [BIG], kind="decision")
    with engine.connect() as conn:
        kinds = {r[0] for r in conn.execute(
            text(f"SELECT kind FROM memories WHERE seq IN ({seq_list(decisions)})"))}
    assert len(decisions) == 30 and kinds == {"decision"}


def test_other_writers_changes_reach_the_graphs_through_the_log(store, tmp_path: Path) -> None:
    """New vectors, a re-embedded one, a status change, an owner change and a deleted memory,
    each committed by another connection, are applied by catch_up as the store now has them."""
    engine, seqs, _ = store
    ann = opened(engine, tmp_path / "index")
    added = add_rows(engine, BIG, clustered(30, seed=11))
    archived, moved, deleted = seqs[BIG][:10], seqs[BIG][10:15], seqs[BIG][15:20]
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE memories SET status = 'archived' WHERE seq IN ({seq_list(archived)})"))
        conn.execute(text(f"UPDATE memories SET owner = 'other' WHERE seq IN ({seq_list(moved)})"))
        conn.execute(text(f"DELETE FROM memories WHERE seq IN ({seq_list(deleted)})"))
    fresh = clustered(1, seed=12)[0]
    with engine.begin() as conn:
        vectors.upsert(conn, [{"memory_seq": seqs[BIG][30], "model": "test-model", "dim": DIM,
                               "vector": fresh.tobytes(), "content_hash": "t2", "embedded_at": "x"}])
    assert ann.catch_up() > 0
    assert owner_labels(ann, BIG) == store_active(engine, BIG)
    assert set(added) <= owner_labels(ann, BIG)
    assert not (set(archived) | set(moved) | set(deleted)) & owner_labels(ann, BIG)
    assert set(moved) <= owner_labels(ann, OTHER) == store_active(engine, OTHER)
    assert search(engine, ann, fresh, 1, [BIG]) == [seqs[BIG][30]]  # the replaced vector is searched
    assert ann.catch_up() == 0  # nothing left, nothing applied twice


def test_two_daemons_keep_their_own_graphs_from_one_log(store, tmp_path: Path) -> None:
    """Each daemon records its position; one that saves and trims never drops entries the
    other has not applied, and a restart loads its files and catches up from its position."""
    engine, seqs, _ = store
    one, two = opened(engine, tmp_path / "one"), opened(engine, tmp_path / "two")
    with engine.connect() as conn:
        assert conn.execute(text(f"SELECT count(*) FROM {READERS_TABLE}")).scalar_one() == 2
    added = add_rows(engine, BIG, clustered(20, seed=21))
    one.catch_up()
    one.save()  # trims what every reader applied: not what ``two`` has not
    with engine.connect() as conn:
        left = {int(r[0]) for r in conn.execute(text(f"SELECT memory_seq FROM {LOG_TABLE}"))}
    assert set(added) <= left
    two.catch_up()
    assert set(added) <= owner_labels(two, BIG) and owner_labels(two, BIG) == owner_labels(one, BIG)
    two.save()
    one.save()
    # Down: changes committed meanwhile are applied from the saved position after a restart.
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM memories WHERE seq IN ({seq_list(seqs[BIG][:7])})"))
    more = add_rows(engine, OTHER, clustered(5, seed=22))
    again = opened(engine, tmp_path / "two")
    assert again.loaded_graphs == 2 and again.reader == two.reader
    assert owner_labels(again, BIG) == store_active(engine, BIG)
    assert set(more) <= owner_labels(again, OTHER)


def test_a_forgotten_vector_leaves_the_saved_files(store, tmp_path: Path) -> None:
    engine, seqs, _ = store
    directory = tmp_path / "index"
    ann = opened(engine, directory)
    victim = seqs[BIG][42]
    with engine.connect() as conn:
        owner = ann.source.owner_ids(conn, [BIG])[BIG]
    stored = ann.indexes[owner].vector(victim).tobytes()
    assert stored in b"".join(p.read_bytes() for p in directory.iterdir())  # positive control
    with engine.begin() as conn:
        assert vectors.erase(conn, [victim]) == 1
    ann.catch_up()
    ann.save()
    assert victim not in owner_labels(ann, BIG)
    assert stored not in b"".join(p.read_bytes() for p in directory.iterdir())


def test_a_log_trimmed_past_a_daemon_rebuilds_its_graphs(store, tmp_path: Path) -> None:
    engine, _, _ = store
    ann = opened(engine, tmp_path / "index")
    added = add_rows(engine, BIG, clustered(3, seed=31))
    with engine.begin() as conn:  # another daemon trimmed past this one (it had not saved for a day)
        conn.execute(text("UPDATE vector_index_state SET trimmed_mark = trimmed_mark + 1000000"))
    ann.catch_up()
    assert ann.indexes == {} and ann._reopen  # searches use pgvector's index meanwhile
    query = clustered(1, seed=32)[0]
    ann_set.attach(engine, ann)
    with engine.begin() as conn:
        assert len(pg_vectors.knn(conn, query, k=5, scope_keys=[BIG], statuses=("active",), kind=None)) == 5
    ann_set.detach(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE vector_index_state SET trimmed_mark = 0"))
    ann.open(fresh=True)
    assert set(added) <= owner_labels(ann, BIG) == store_active(engine, BIG)


def test_a_quiet_daemon_keeps_its_place_in_the_log(store, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """However quiet the store, the index thread records its saved position every KEEPALIVE_S:
    other daemons trim the log to what every reader seen in the last day applied, and a daemon
    they stopped seeing would find its files' entries gone at its next start."""
    engine, _, _ = store
    monkeypatch.setattr(ann_set, "KEEPALIVE_S", 0.5)
    ann = AnnSet(engine, tmp_path / "index", min_rows=MIN_ROWS, save_every=10**9, part_rows=PART_ROWS)
    ann.start()
    try:
        assert ann.ready.wait(120)
        with engine.begin() as conn:
            conn.execute(text(f"UPDATE {READERS_TABLE} SET seen_at = now() - interval '2 days'"))
        time.sleep(3.0)
        with engine.connect() as conn:
            mark, fresh = conn.execute(text(
                f"SELECT mark, seen_at > now() - interval '1 minute' FROM {READERS_TABLE} "
                "WHERE reader = :r"), {"r": ann.reader}).one()
        assert fresh and mark == ann.saved.mark
    finally:
        ann.stop()


def test_an_owner_past_flat_rows_is_scanned_from_pgvectors_rows(store, tmp_path: Path) -> None:
    """BIG (2,500 vectors) past flat_rows is scanned flat: the rows the exact scan finds, other
    writers' rows and erasures through the log, and no file for it."""
    engine, seqs, vecs = store
    directory = tmp_path / "index"
    ann = AnnSet(engine, directory, min_rows=MIN_ROWS, threads=2, save_every=10**9, part_rows=PART_ROWS,
                 flat_rows=2000)
    ann.open()
    with engine.connect() as conn:
        big = ann.source.owner_ids(conn, [BIG])[BIG]
    assert ann.sizes() == {"graphs": 1, "parts": 1, "vectors_in_graphs": 1200, "flat_owners": 1,
                           "vectors_scanned_flat": 2500}
    keys = [BIG, OTHER, SMALL]
    overlap = [len(set(search(engine, ann, q, 10, keys)) & set(search(engine, None, q, 10, keys))) / 10
               for q in clustered(30, seed=98)]
    assert np.mean(overlap) >= 0.97, np.mean(overlap)
    added = add_rows(engine, BIG, clustered(3, seed=41))
    victim = seqs[BIG][42]
    with engine.begin() as conn:
        assert vectors.erase(conn, [victim]) == 1
    ann.catch_up()
    assert owner_labels(ann, BIG) == store_active(engine, BIG) and set(added) <= owner_labels(ann, BIG)
    assert victim not in search(engine, ann, vecs[42], 10, [BIG])
    ann.save()
    assert all(f"owner-{big}-" not in path.name for path in directory.iterdir())
