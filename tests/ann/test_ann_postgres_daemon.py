"""The daemon's HNSW graphs beside a PostgreSQL store, over its socket: kill -9 while building and
while updating, then restart (nothing lost, nothing doubled, searches scoped); a forget that leaves
no byte of the vector in any graph file; two daemons on one database, each with graphs of its own."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

from tests.ann._store import clustered, make_store
from tests.ann.test_ann_daemon import CONFIG, OWNERS, kill9, saved_graphs, saved_labels, wait_graphs
from tests.ann.test_ann_postgres import add_rows, seq_list
from tests.search._daemon import DaemonFolder, SearchDaemon

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
def root() -> Iterator[DaemonFolder]:
    folder = DaemonFolder("annpg-")
    yield folder
    folder.close()


def saved_labels_by_key(data_dir: Path) -> dict[str, set[int]]:
    """test_ann_daemon.saved_labels, by owner key: the daemon's own owner ids mapped back to keys
    by the manifest."""
    manifest = json.loads((data_dir / "index" / "vectors" / "manifest.json").read_text())
    keys = {int(i): k for k, i in manifest["owner_ids"].items()}
    return {keys[owner]: labels for owner, labels in saved_labels(data_dir).items()}


def store_truth(daemon: SearchDaemon) -> dict[str, set[int]]:
    with daemon.engine().connect() as conn:
        rows = conn.execute(text(
            "SELECT m.scope || ':' || m.owner, m.seq FROM memories m JOIN memory_vectors v "
            "ON v.memory_seq = m.seq WHERE m.status = 'active'")).all()
    out: dict[str, set[int]] = {}
    for key, seq in rows:
        out.setdefault(str(key), set()).add(int(seq))
    return out


def test_kill_9_while_building_and_while_updating_then_restart(root: DaemonFolder, pg_url: str) -> None:
    engine, seqs, _ = make_store(pg_url, OWNERS)
    daemon = root.daemon("annpg", "bundled", CONFIG, db_url=pg_url)
    daemon.start()
    kill9(daemon)  # at once: the graphs are being built (or not even started)
    daemon.start()
    wait_graphs(daemon, 2)
    daemon.wait_embedded()  # the query needs the embedder loaded
    result = daemon.search("deploy the staging database", mode="vector", k=10, agent_id="a1")
    with engine.connect() as conn:
        a1 = {r[0] for r in conn.execute(text("SELECT id FROM memories WHERE owner = 'a1'"))}
    assert len(result["results"]) == 10 and {r["id"] for r in result["results"]} <= a1, result

    # Updating: new vectors for a1 and a2, and a1 rows deleted, then kill -9 before any save.
    add_rows(engine, "agent:a1", clustered(400, seed=7))
    add_rows(engine, "agent:a2", clustered(100, seed=8))
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM memories WHERE seq IN ({seq_list(seqs['agent:a1'][:30])})"))
    time.sleep(0.3)
    kill9(daemon)
    daemon.start()
    wait_graphs(daemon, 2)
    truth = store_truth(daemon)
    assert daemon.stop() == 0
    saved = saved_labels_by_key(daemon.data_dir)
    assert set(saved) == {"agent:a1", "agent:a2"}
    for key, labels in saved.items():
        assert labels == truth[key], (key, len(labels), len(truth[key]))
    assert not set(seqs["agent:a1"][:30]) & set().union(*saved.values())
    engine.dispose()


def test_forget_leaves_no_vector_bytes_in_any_graph_file_of_either_daemon(root: DaemonFolder,
                                                                           pg_url: str) -> None:
    engine, seqs, _ = make_store(pg_url, OWNERS)
    config = {**CONFIG, "retention_interval_s": 1.0}
    one = root.daemon("pg1", "none", config, db_url=pg_url)
    two = root.daemon("pg2", "none", config, db_url=pg_url)
    one.start()
    two.start()
    wait_graphs(one, 2)
    wait_graphs(two, 2)
    assert one.stop() == 0 and two.stop() == 0  # saved: the files hold every vector
    victim = seqs["agent:a1"][42]
    with engine.connect() as conn:
        victim_id = conn.execute(text("SELECT id FROM memories WHERE seq = :s"), {"s": victim}).scalar_one()
    dirs = [d.data_dir / "index" / "vectors" for d in (one, two)]
    graph = next(g for _, g in saved_graphs(dirs[0]) if g.contains(victim))
    stored = np.asarray(graph.index.get_items([victim])[0], dtype=np.float32).tobytes()
    for directory in dirs:  # positive control: each daemon's own files hold it
        assert stored in b"".join(p.read_bytes() for p in directory.iterdir())

    one.start()
    two.start()
    one.call("memory.forget", {"id": victim_id, "reason": "test"})
    deadline = time.monotonic() + 60
    while True:
        with engine.connect() as conn:
            left = conn.execute(text("SELECT 1 FROM memory_vectors WHERE memory_seq = :s"),
                                {"s": victim}).first()
        if left is None:
            break
        assert time.monotonic() < deadline, one.log_tail()
        time.sleep(0.3)
    for daemon in (one, two):
        wait_graphs(daemon, 2)
        assert daemon.stop() == 0
    for directory in dirs:
        assert stored not in b"".join(p.read_bytes() for p in directory.iterdir())
    engine.dispose()
