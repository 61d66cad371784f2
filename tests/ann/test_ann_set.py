"""The HNSW graphs beside a SQLite store (store/annindex/index_set.py): scope inside, in step with
the store through its log, erased on forget, and rebuilt or caught up after a crash."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine, text

from memoryd.store import vectors
from memoryd.store.annindex import index_set as ann_set
from memoryd.store.annindex.index_set import AnnSet
from memoryd.store.sqlite import vectors as sqlite_vectors
from tests.ann._store import DIM, clustered, make_store

BIG = "agent:big"
OTHER = "agent:other"
SMALL = "user:u1"
MIN_ROWS = 2000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Engine, dict[str, list[int]], np.ndarray, Path]]:
    engine, seqs, vecs = make_store(tmp_path / "memoryd.db", {BIG: 6000, OTHER: 3000, SMALL: 300})
    yield engine, seqs, vecs, tmp_path / "index"
    ann_set.detach(engine)
    engine.dispose()


def opened(engine: Engine, directory: Path) -> AnnSet:
    ann = AnnSet(engine, directory, min_rows=MIN_ROWS, threads=2, save_every=10**9)
    ann.open()
    return ann


def seq_list(seqs: list[int]) -> str:
    return ",".join(str(int(s)) for s in seqs)


def exact(engine: Engine, query: np.ndarray, k: int, keys: list[str],
          statuses: tuple[str, ...] = ("active",), kind: str | None = None) -> list[int]:
    ann_set.detach(engine)
    with engine.connect() as conn:
        hits = sqlite_vectors.knn(conn, query, k=k, scope_keys=keys, statuses=statuses, kind=kind)
    return [s for s, _ in hits]


def approx(engine: Engine, ann: AnnSet, query: np.ndarray, k: int, keys: list[str],
           statuses: tuple[str, ...] = ("active",), kind: str | None = None) -> list[int]:
    ann_set.attach(engine, ann)
    try:
        with engine.connect() as conn:
            return [s for s, _ in sqlite_vectors.knn(conn, query, k=k, scope_keys=keys, statuses=statuses,
                                                     kind=kind)]
    finally:
        ann_set.detach(engine)


def test_large_owners_get_graphs_and_small_ones_stay_exact(store) -> None:
    engine, seqs, _, directory = store
    ann = opened(engine, directory)
    with engine.connect() as conn:
        ids = dict(conn.execute(text("SELECT scope_key, id FROM vector_owners")).all())
    assert set(ann.indexes) == {ids[BIG], ids[OTHER]}
    assert ann.indexes[ids[BIG]].labels() == set(seqs[BIG])
    assert (directory / "manifest.json").exists()


def test_graph_recall_at_10_against_the_exact_scan(store) -> None:
    """As the vector leg asks (k=10: its first fetch is 40 rows), on vectors harder than real
    embeddings (tight random clusters); bench/search.py reports it on real ones."""
    engine, _, _, directory = store
    ann = opened(engine, directory)
    queries = clustered(50, seed=99)
    keys = [BIG, OTHER, SMALL]
    overlap = [len(set(approx(engine, ann, q, 40, keys)[:10]) & set(exact(engine, q, 10, keys))) / 10
               for q in queries]
    assert np.mean(overlap) >= 0.95, np.mean(overlap)


def test_a_reader_gets_k_rows_of_its_own_owner_even_when_another_owner_is_nearer(store) -> None:
    engine, seqs, vecs, directory = store
    ann = opened(engine, directory)
    query = vecs[seqs[OTHER][0] - 1]  # one of OTHER's own vectors: OTHER's rows are nearest
    got = approx(engine, ann, query, 20, [BIG])
    assert len(got) == 20 and set(got) <= set(seqs[BIG])
    assert approx(engine, ann, query, 1, [OTHER]) == [seqs[OTHER][0]]  # positive control


def test_a_graph_holds_active_rows_and_a_kind_is_applied_inside_the_walk(tmp_path: Path) -> None:
    engine, seqs, vecs = make_store(tmp_path / "k.db", {BIG: 4000},
                                    kinds=("fact", "fact", "fact", "decision"))
    ann = opened(engine, tmp_path / "index")
    archived = seqs[BIG][::2]
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE memories SET status = 'archived' WHERE seq IN ({seq_list(archived)})"))
    ann.catch_up()
    query = vecs[archived[0] - 1]
    got = approx(engine, ann, query, 30, [BIG])
    assert len(got) == 30 and not set(got) & set(archived)
    decisions = approx(engine, ann, query, 30, [BIG], kind="decision")
    assert len(decisions) == 30
    assert set(decisions) == set(exact(engine, query, 30, [BIG], kind="decision")) or \
        len(set(decisions) & set(exact(engine, query, 30, [BIG], kind="decision"))) >= 27
    with engine.connect() as conn:
        kinds = {r[0] for r in conn.execute(
            text(f"SELECT DISTINCT kind FROM memories WHERE seq IN ({seq_list(decisions)})"))}
    assert kinds == {"decision"}
    engine.dispose()


def index_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file())


def test_a_forgotten_vector_leaves_the_graph_and_every_index_file(store) -> None:
    engine, seqs, _, directory = store
    ann = opened(engine, directory)
    victim = seqs[BIG][123]
    graph = next(g for g in ann.indexes.values() if g.contains(victim))
    stored = graph.vector(victim).tobytes()
    assert stored in index_bytes(directory)  # positive control: the saved file holds it
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET content = NULL, status = 'forgotten' WHERE seq = :s"),
                     {"s": victim})
    ann.catch_up()
    assert not graph.contains(victim)
    assert stored not in index_bytes(directory)
    assert graph.vector(seqs[BIG][124]).any()  # its neighbour is intact
    ann.save()
    assert stored not in index_bytes(directory)


def test_restart_after_a_crash_catches_up_from_the_log(store) -> None:
    """Changes made after the last save (and a save never made: kill -9) are in the graph on
    the next open, each once, and the forgotten ones are not."""
    engine, seqs, _, directory = store
    ann = opened(engine, directory)
    big = next(o for o, g in ann.indexes.items() if g.contains(seqs[BIG][0]))
    forgotten = seqs[BIG][:50]
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM memories WHERE seq IN ({seq_list(forgotten)})"))
        moved = seqs[OTHER][:10]
        conn.execute(text("UPDATE memories SET owner = 'big', agent_id = 'big' "
                          f"WHERE seq IN ({seq_list(moved)})"))
    del ann  # no save, no catch-up: as if killed
    again = opened(engine, directory)
    assert again.loaded_graphs == 2  # caught up from the log, not rebuilt
    with engine.connect() as conn:
        truth = {int(r[0]) for r in conn.execute(text(
            "SELECT seq FROM memories m JOIN memory_vectors_meta v ON v.memory_seq = m.seq "
            "WHERE m.scope = 'agent' AND m.owner = 'big' AND m.status = 'active'"))}
    assert again.indexes[big].labels() == truth
    assert not truth & set(forgotten) and set(moved) <= truth
    assert again.counts.get(big) == len(truth)  # every row of 'big' is active here


def test_a_torn_manifest_or_graph_file_is_rebuilt_from_the_store(store) -> None:
    engine, seqs, _, directory = store
    opened(engine, directory)
    for path in directory.glob("*.hnsw"):
        path.write_bytes(path.read_bytes()[:1000])
    again = opened(engine, directory)
    assert any(g.labels() == set(seqs[BIG]) for g in again.indexes.values())


def test_the_log_is_trimmed_to_what_the_files_hold(store) -> None:
    engine, _, _, directory = store
    ann = opened(engine, directory)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM vector_index_log")).scalar_one() == 0
    assert ann.saved == ann.applied


def test_a_new_dimension_discards_the_saved_graphs(store) -> None:
    engine, _, _, directory = store
    opened(engine, directory)
    with engine.begin() as conn:
        vectors.rebuild_index(conn, 8, "other-model")
    again = opened(engine, directory)
    assert again.indexes == {} and again.dim == 8
    assert DIM == 384


def test_searches_beside_a_growing_graph_never_see_a_resize_under_them() -> None:
    """hnswlib reallocates on resize: searches running beside inserts that grow the graph past
    its capacity many times must neither crash nor miss what was there before."""
    import threading
    import time

    from memoryd.store.annindex.graph import OwnerIndex

    vecs = clustered(3000, seed=5)
    graph = OwnerIndex(1, DIM)
    graph.add(list(range(1, 1001)), vecs[:1000])
    errors: list[BaseException] = []
    done = threading.Event()

    def search() -> None:
        try:
            while not done.is_set():
                hits = graph.search(vecs[0], 10, 64, None)
                assert hits and hits[0][0] == 1
                time.sleep(0.001)
        except BaseException as exc:  # reported below, in the test thread
            errors.append(exc)

    readers = [threading.Thread(target=search) for _ in range(2)]
    for r in readers:
        r.start()
    for start in range(1000, 3000, 100):  # 20 inserts, 5 resizes (growth 1.25 from 1,024)
        graph.add(list(range(start + 1, start + 101)), vecs[start:start + 100])
    done.set()
    for r in readers:
        r.join()
    assert not errors, errors[0]
    assert graph.index.element_count == 3000


def test_opening_the_graphs_never_holds_the_write_lock(store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan and the builds read in deferred transactions: the daemon's engine begins
    IMMEDIATE by default, and a minutes-long scan of a large store holding the write lock made
    the daemon's own start fail with 'database is locked' (bench/search.py at 1M)."""
    import threading
    import time

    from memoryd.store.engine import create_store_engine

    engine, _, _, directory = store
    scan = AnnSet._scan

    def slow_scan(self: AnnSet, conn: object) -> None:
        scan(self, conn)  # type: ignore[arg-type]
        time.sleep(1.5)

    monkeypatch.setattr(AnnSet, "_scan", slow_scan)
    ann = AnnSet(engine, directory, min_rows=MIN_ROWS)
    opener = threading.Thread(target=ann.open)
    opener.start()
    time.sleep(0.5)
    writer = create_store_engine(f"sqlite:///{engine.url.database}", busy_timeout_ms=200)
    with writer.begin() as conn:
        conn.execute(text("UPDATE memories SET importance = 0.6 WHERE seq = 1"))
    writer.dispose()
    opener.join()
    assert ann.ready.is_set()


def test_a_build_stops_between_chunks_when_the_daemon_stops(store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shutdown does not wait for a million-vector build: it stops after the chunk in flight,
    installs nothing, and the next start builds the graph again."""
    from memoryd.store.annindex import index_set as module

    engine, _, _, directory = store
    monkeypatch.setattr(module, "BUILD_CHUNK", 500)
    ann = AnnSet(engine, directory, min_rows=MIN_ROWS)
    with engine.connect() as conn:
        ann.dim, ann.model = 384, "test-model"
        big = int(conn.execute(text("SELECT id FROM vector_owners WHERE scope_key = :k"),
                               {"k": BIG}).scalar_one())
    added: list[int] = []
    original = module.OwnerIndex.add

    def counting_add(self, labels, vectors, threads=1):  # type: ignore[no-untyped-def]
        added.append(len(labels))
        if len(added) == 3:
            ann._stop.set()
        original(self, labels, vectors, threads)

    monkeypatch.setattr(module.OwnerIndex, "add", counting_add)
    assert ann.build(big) is None
    assert added == [500, 500, 500] and big not in ann.indexes


def test_a_row_that_leaves_active_leaves_the_graph_and_a_history_search_still_finds_it(store) -> None:
    """Superseded rows are not in a graph; a search that may see them (as_of) scans exactly."""
    engine, seqs, vecs, directory = store
    ann = opened(engine, directory)
    old = seqs[BIG][7]
    graph = next(g for g in ann.indexes.values() if g.contains(old))
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET status = 'superseded' WHERE seq = :s"), {"s": old})
    ann.catch_up()
    assert not graph.contains(old)
    query = vecs[old - 1]
    assert old not in approx(engine, ann, query, 10, [BIG])
    history = approx(engine, ann, query, 10, [BIG], statuses=("active", "superseded", "archived"))
    assert history[0] == old
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET status = 'active' WHERE seq = :s"), {"s": old})
    ann.catch_up()
    assert graph.contains(old) and approx(engine, ann, query, 1, [BIG]) == [old]


def test_catching_up_inserts_in_groups_not_one_call_per_vector(store,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """130 rows moved into a graph's owner are inserted in 3 calls (64, 64, 2): one call a
    vector caught up at 120-250 vectors/s during an import."""
    from memoryd.store.annindex import index_set as module

    engine, seqs, _, directory = store
    ann = opened(engine, directory)
    calls: list[int] = []
    original = module.OwnerIndex.add

    def counting_add(self, labels, vectors, threads=1):  # type: ignore[no-untyped-def]
        calls.append(len(labels))
        original(self, labels, vectors, threads)

    monkeypatch.setattr(module.OwnerIndex, "add", counting_add)
    moved = seqs[SMALL][:130]
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET scope = 'agent', owner = 'big', agent_id = 'big', "
                          f"user_id = NULL WHERE seq IN ({seq_list(moved)})"))
    ann.catch_up()
    assert calls == [64, 64, 2]
    assert set(moved) <= next(g for g in ann.indexes.values() if g.contains(moved[0])).labels()
