"""A store written by the 0005 layout, opened by a real daemon: migrated, vacuumed, searched.

The store holds real all-MiniLM-L6-v2 vectors (encoded here, in process) of
notes in 30 sessions (a partition, and a 1.6 MB chunk, each) and of two
agents. The daemon migrates it at start and gives the free pages back; then
searches over the socket must find each reader's own note first and never
another owner's, and a note written after the migration must be embedded
and found the same way. Slow: it loads the model twice (here and in the
daemon's worker).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.search._daemon import SearchDaemon, stop_cleanly
from tests.search._legacy import build_0006_store

pytestmark = pytest.mark.slow

SERVICES = ["billing", "ledger", "search", "auth", "payments", "webhooks", "reports", "gateway", "media",
            "profile"]
N_SESSIONS = 30


def session_note(i: int) -> str:
    return (f"The deploy key for the {SERVICES[i % 10]} service in environment {i} is kept at vault "
            f"path kv/{SERVICES[i % 10]}/env-{i}")


AGENT_NOTES = {
    "agent-a": ["Staging's Postgres listens on port 5433 on db1.internal",
                "Run make test before pushing; CI runs the same command"],
    "agent-b": ["Staging's Redis listens on port 6380 on cache-02",
                "The nightly ETL job rebuilds the search index at 2am"],
}


def owner_of(i: int) -> tuple[str, str, str, str]:
    if i < N_SESSIONS:
        return "session", f"sess-{i:03d}", "fact", "active"
    agent = "agent-a" if i - N_SESSIONS < 2 else "agent-b"
    return "agent", agent, "fact", "active"


@pytest.fixture(scope="module")
def migrated() -> Iterator[dict[str, Any]]:
    from sentence_transformers import SentenceTransformer

    from memoryd.models.embedder import bundled_model_path, quiet_offline_env

    quiet_offline_env()
    texts = [session_note(i) for i in range(N_SESSIONS)] + AGENT_NOTES["agent-a"] + AGENT_NOTES["agent-b"]
    model = SentenceTransformer(bundled_model_path(), device="cpu")
    vecs = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True).astype("<f4")
    del model
    root = Path(tempfile.mkdtemp(prefix="mdv-", dir="/tmp"))
    daemon = SearchDaemon(root, "old", "bundled")
    daemon.data_dir.mkdir(mode=0o700)
    db = daemon.data_dir / "memoryd.db"
    build_0006_store(db, texts, owner_of, vecs)
    size_before = db.stat().st_size
    daemon.start()
    try:
        daemon.wait_embedded()  # nothing to embed: this loads the model, so searches use vectors
        yield {"daemon": daemon, "db": db, "size_before": size_before, "texts": texts}
        stop_cleanly(daemon)
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def events(daemon: SearchDaemon, name: str) -> list[dict[str, Any]]:
    out = []
    for line in daemon.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == name:
                out.append(event)
    return out


def test_the_daemon_migrates_the_old_store_and_gives_the_free_pages_back(migrated: dict[str, Any]) -> None:
    daemon, db = migrated["daemon"], migrated["db"]
    assert migrated["size_before"] > N_SESSIONS * 1024 * 1536  # a 1,024-vector chunk per session
    [moved] = events(daemon, "store.migrated")
    # 0007 is the layout change; 0008 (PostgreSQL's search objects) does nothing on SQLite;
    # 0009 adds the loose hash (issue 20), 0010 the audit lanes (issue 22).
    assert (moved["from_revision"], moved["to_revision"]) == ("0006", "0011_pg_hnsw_build")
    [vacuumed] = events(daemon, "store.vacuumed")
    assert vacuumed["bytes_after"] < 8 * 1024 * 1024 < migrated["size_before"]
    assert db.stat().st_size < 8 * 1024 * 1024


@pytest.mark.parametrize("i", [0, 7, 13, 29])
@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_each_session_finds_its_own_note_and_no_other(migrated: dict[str, Any], i: int, mode: str) -> None:
    daemon = migrated["daemon"]
    result = daemon.search(f"where is the deploy key for {SERVICES[i % 10]} in environment {i}",
                           mode=mode, k=5, session_id=f"sess-{i:03d}", explain=True)
    assert result["mode_used"] == mode
    assert [r["content"] for r in result["results"]] == [session_note(i)]
    assert result["results"][0]["explain"]["vector_rank"] == 1  # found by the index, not a fill


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_an_agent_finds_its_notes_nearest_first(migrated: dict[str, Any], mode: str) -> None:
    daemon = migrated["daemon"]
    result = daemon.search("which port does the staging database use", mode=mode, k=5, agent_id="agent-a",
                           explain=True)
    assert result["mode_used"] == mode
    assert result["results"][0]["explain"]["vector_rank"] == 1
    contents = [r["content"] for r in result["results"]]
    assert contents[0] == AGENT_NOTES["agent-a"][0]
    assert set(contents) == set(AGENT_NOTES["agent-a"])  # agent-b's Redis note is not visible


def test_a_note_written_after_the_migration_is_embedded_and_found(migrated: dict[str, Any]) -> None:
    daemon = migrated["daemon"]
    note = "The feature flag ff_new_checkout is at 25% in production"
    daemon.write(note, scope="session", session_id="sess-new")
    daemon.wait_embedded()
    result = daemon.search("how far is the new checkout flag rolled out", mode="vector", k=3,
                           session_id="sess-new")
    assert [r["content"] for r in result["results"]] == [note]
    other = daemon.search("how far is the new checkout flag rolled out", mode="vector", k=3,
                          session_id="sess-001")
    assert note not in [r["content"] for r in other["results"]]
