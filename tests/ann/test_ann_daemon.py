"""The daemon's HNSW graphs over its socket: kill -9 while building and while updating, then
restart (nothing lost, nothing doubled, searches scoped), and a forget that leaves no byte of
the vector or text in any index file."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from memoryd.privatefs import make_dirs
from memoryd.store.annindex.graph import OwnerIndex
from tests.ann._store import DIM, make_store
from tests.search._daemon import DaemonFolder, SearchDaemon

pytestmark = pytest.mark.slow


@pytest.fixture
def root() -> Iterator[DaemonFolder]:
    folder = DaemonFolder("ann-")
    yield folder
    folder.close()


def new_daemon(root: DaemonFolder, label: str, config: dict[str, Any]) -> SearchDaemon:
    return root.daemon(label, "bundled", config)


OWNERS = {"agent:a1": 3000, "agent:a2": 1500, "user:u1": 200}
#: Graphs of at most 1,000 vectors: a1's rows are split into 3 graphs and a2's into 2, so the
#: kills below land while parts are built, filled and started.
CONFIG = {"vector_index_min_rows": 1000, "vector_index_part_rows": 1000, "tick_interval_s": 1.0}


def wait_graphs(daemon: SearchDaemon, graphs: int, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        vi = daemon.status().get("vector_index", {})
        if vi.get("ready") and vi.get("graphs") == graphs and vi.get("behind") == 0:
            return vi
        assert time.monotonic() < deadline, (vi, daemon.log_tail())
        time.sleep(0.2)


def kill9(daemon: SearchDaemon) -> None:
    assert daemon.proc is not None
    daemon._drop_client()
    daemon.proc.kill()
    daemon.proc.wait()


def saved_graphs(directory: Path) -> Iterator[tuple[int, OwnerIndex]]:
    """(owner id, graph) of every file the manifest names (an owner's parts each)."""
    manifest = json.loads((directory / "manifest.json").read_text())
    for owner, entry in manifest["owners"].items():
        for part in entry["parts"]:
            yield int(owner), OwnerIndex.load(int(owner), DIM, directory / part["file"])


def saved_labels(data_dir: Path) -> dict[int, set[int]]:
    """Each owner's live labels in its saved graphs, loaded from the files the manifest names."""
    out: dict[int, set[int]] = {}
    for owner, graph in saved_graphs(data_dir / "index" / "vectors"):
        labels = graph.labels()
        assert not labels & out.get(owner, set())  # no row in two of an owner's graphs
        out.setdefault(owner, set()).update(labels)
    return out


def store_truth(daemon: SearchDaemon) -> dict[int, set[int]]:
    with daemon.engine().connect() as conn:
        rows = conn.execute(text(
            "SELECT o.id, m.seq FROM memories m JOIN memory_vectors_meta v ON v.memory_seq = m.seq "
            "JOIN vector_owners o ON o.scope_key = m.scope || ':' || m.owner "
            "WHERE m.status = 'active'")).all()
    out: dict[int, set[int]] = {}
    for owner, seq in rows:
        out.setdefault(int(owner), set()).add(int(seq))
    return out


def add_vectors(daemon: SearchDaemon, owner: str, n: int, seed: int) -> None:
    """New embedded rows for ``owner``, written as the embed pass writes them (row, then vector)."""
    path = daemon.root / f"extra-{seed}.db"
    engine, _, vecs = make_store(path, {owner: n}, seed=seed)
    engine.dispose()
    from memoryd.store.engine import create_store_engine

    own = create_store_engine(f"sqlite:///{daemon.data_dir / 'memoryd.db'}")
    with own.begin() as conn:
        conn.execute(text("ATTACH DATABASE :p AS extra"), {"p": str(path)})
        cols = ("id, content, content_hash, kind, scope, owner, status, importance, importance_raw, "
                "valid_from, recorded_at, metadata, derived, agent_id, user_id")
        conn.execute(text(f"INSERT INTO memories ({cols}) SELECT {cols} FROM extra.memories"))
        seqs = [int(r[0]) for r in conn.execute(text("SELECT seq FROM memories ORDER BY seq DESC LIMIT :n"),
                                                 {"n": n})][::-1]
        for seq, vec in zip(seqs, vecs, strict=True):
            conn.execute(text("INSERT INTO memory_vectors (memory_seq, model, dim, vector, content_hash, "
                              "embedded_at) VALUES (:s, 'test-model', :d, :v, 't', '2026-01-01T00:00:00Z')"),
                         {"s": seq, "d": DIM, "v": vec.tobytes()})
    own.dispose()


def test_kill_9_while_building_and_while_updating_then_restart(root: DaemonFolder) -> None:
    daemon = new_daemon(root, "ann", CONFIG)
    make_dirs(daemon.data_dir)
    engine, seqs, _ = make_store(daemon.data_dir / "memoryd.db", OWNERS)
    engine.dispose()

    daemon.start()
    kill9(daemon)  # at once: the graphs are being built (or not even started)
    daemon.start()
    wait_graphs(daemon, 2)
    daemon.wait_embedded()  # the query needs the embedder loaded
    result = daemon.search("deploy the staging database", mode="vector", k=10, agent_id="a1")
    ids = [r["id"] for r in result["results"]]
    with daemon.engine().connect() as conn:
        a1 = {r[0] for r in conn.execute(text("SELECT id FROM memories WHERE owner = 'a1'"))}
    assert len(ids) == 10 and set(ids) <= a1, result

    # Updating: new vectors for a1 and a2, and a1 rows deleted, then kill -9 before any save.
    add_vectors(daemon, "agent:a1", 400, seed=7)
    add_vectors(daemon, "agent:a2", 100, seed=8)
    with daemon.engine().begin() as conn:
        doomed = ",".join(str(s) for s in seqs["agent:a1"][:30])
        conn.execute(text(f"DELETE FROM memories WHERE seq IN ({doomed})"))
    time.sleep(0.3)
    kill9(daemon)
    daemon.start()
    wait_graphs(daemon, 2)
    truth = store_truth(daemon)
    assert daemon.stop() == 0
    saved = saved_labels(daemon.data_dir)
    for owner, labels in saved.items():
        assert labels == truth[owner], (owner, len(labels), len(truth[owner]))
    assert not set(seqs["agent:a1"][:30]) & set().union(*saved.values())


def test_forget_leaves_no_vector_or_text_bytes_in_any_index_file(root: DaemonFolder) -> None:
    daemon = new_daemon(root, "annf", {**CONFIG, "retention_interval_s": 1.0})
    make_dirs(daemon.data_dir)
    engine, seqs, _ = make_store(daemon.data_dir / "memoryd.db", OWNERS)
    engine.dispose()
    daemon.start()
    wait_graphs(daemon, 2)
    assert daemon.stop() == 0  # saved: the files hold every vector
    directory = daemon.data_dir / "index" / "vectors"
    victim = seqs["agent:a1"][42]
    with daemon.engine().connect() as conn:
        victim_id, content = conn.execute(text("SELECT id, content FROM memories WHERE seq = :s"),
                                          {"s": victim}).one()
    graph = next(g for _, g in saved_graphs(directory) if g.contains(victim))
    stored = np.asarray(graph.index.get_items([victim])[0], dtype=np.float32).tobytes()
    files = b"".join(p.read_bytes() for p in directory.iterdir())
    assert stored in files  # positive control

    daemon.start()
    daemon.call("memory.forget", {"id": victim_id, "reason": "test"}, )
    deadline = time.monotonic() + 60
    while True:
        with daemon.engine().connect() as conn:
            left = conn.execute(text("SELECT content FROM memories WHERE seq = :s"), {"s": victim}).first()
        if left is None or left[0] is None:
            break
        assert time.monotonic() < deadline, daemon.log_tail()
        time.sleep(0.3)
    wait_graphs(daemon, 2)
    files = b"".join(p.read_bytes() for p in directory.iterdir())
    assert stored not in files
    assert content.encode() not in files
    assert daemon.stop() == 0
    files = b"".join(p.read_bytes() for p in directory.iterdir())
    assert stored not in files


def test_an_owner_scanned_flat_after_kill_9_and_after_a_forget(root: DaemonFolder) -> None:
    """a1 (3,000 vectors) past vector_index_flat_rows is scanned flat: killed while it is built,
    the daemon builds it again from the store; a forgotten row is never found again, and no file
    ever holds a1's vectors."""
    daemon = new_daemon(root, "annflat", {**CONFIG, "vector_index_flat_rows": 2500,
                                          "retention_interval_s": 1.0})
    make_dirs(daemon.data_dir)
    engine, seqs, vecs = make_store(daemon.data_dir / "memoryd.db", OWNERS)
    engine.dispose()
    daemon.start()
    kill9(daemon)
    daemon.start()
    vi = wait_graphs(daemon, 1)  # a2's graphs; a1 scanned flat
    assert (vi["flat_owners"], vi["vectors_scanned_flat"]) == (1, 3000), vi
    daemon.wait_embedded()
    result = daemon.search("deploy the staging database", mode="vector", k=10, agent_id="a1")
    with daemon.engine().connect() as conn:
        a1 = {r[0] for r in conn.execute(text("SELECT id FROM memories WHERE owner = 'a1'"))}
        victim_id = conn.execute(text("SELECT id FROM memories WHERE seq = :s"),
                                 {"s": seqs["agent:a1"][42]}).scalar_one()
    assert len(result["results"]) == 10 and {r["id"] for r in result["results"]} <= a1, result
    daemon.call("memory.forget", {"id": victim_id, "reason": "test"})
    deadline = time.monotonic() + 60
    while daemon.status()["vector_index"]["vectors_scanned_flat"] != 2999:
        assert time.monotonic() < deadline, daemon.log_tail()
        time.sleep(0.3)
    assert daemon.stop() == 0
    directory = daemon.data_dir / "index" / "vectors"
    files = b"".join(p.read_bytes() for p in directory.iterdir())
    a1_vectors = vecs[:3000]  # a1's rows come first
    for vec in (a1_vectors[0], a1_vectors[42], a1_vectors[2999]):
        assert (vec / np.linalg.norm(vec)).astype(np.float32).tobytes() not in files
        assert vec.astype(np.float16).tobytes() not in files
    with daemon.engine().connect() as conn:
        a2 = int(conn.execute(text("SELECT id FROM vector_owners WHERE scope_key = 'agent:a2'")).scalar_one())
    assert saved_labels(daemon.data_dir) == {a2: store_truth(daemon)[a2]}  # the graphs' files: a2's alone
