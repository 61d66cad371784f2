"""The embed pass end to end with the real bundled model (all-MiniLM-L6-v2, 384 dimensions)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlite_vec

from tests.integration.harness import DaemonHandle, vector_bytes_sql, wait_until

pytestmark = pytest.mark.slow

#: The governor's subject is the host, not these tests: on a shared, loaded CI box it would
#: throttle the pass to small batches with pauses and only make the wait longer.
NO_GOVERNOR = {"governor_enabled": False}


def test_written_memories_are_embedded_once_each_as_384_float32_vectors(
        start_daemon: Callable[..., DaemonHandle], backend: str) -> None:
    daemon = start_daemon(embedder="bundled", config=NO_GOVERNOR)
    texts = [f"Service number {i} listens on port {8000 + i} in staging" for i in range(20)]
    ids = [daemon.write(text)["id"] for text in texts]

    def drained() -> bool:
        queue = daemon.call("daemon.status")["queues"]["embed"]
        return queue["ready"] == 0 and queue["leased"] == 0

    wait_until(drained, timeout_s=300, interval_s=0.25, message="the embed queue to drain")
    status = daemon.call("daemon.status")
    assert status["queues"]["embed"]["failed"] == 0 and status["queues"]["embed"]["dead"] == 0
    assert status["passes"]["embed"]["processed_total"] >= 20
    assert status["passes"]["embed"]["last_error"] is None

    vectors = daemon.query(
        f"SELECT m.id, v.dim, {vector_bytes_sql(daemon, 'v.vector')}, v.content_hash = m.content_hash "
        "FROM memory_vectors v JOIN memories m ON m.seq = v.memory_seq")
    assert sorted(r[0] for r in vectors) == sorted(ids)
    assert all(r[1:] == (384, 384 * 4, 1) for r in vectors)
    assert daemon.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed' AND state = 'done'") == 20
    for memory_id in ids:
        assert "embed" not in daemon.call("memory.get", {"id": memory_id})["pending"]
    # The vectors are the texts' own: a vector search for each text finds its memory first, at
    # cosine ~1 (a zero or a constant vector, or another row's, fails this).
    for memory_id, text in zip(ids, texts, strict=True):
        top = daemon.call("memory.search", {"query": text, "mode": "vector", "k": 2,
                                            "agent_id": "agent-a"})["results"]
        assert top[0]["id"] == memory_id, (text, top)
        assert top[0]["score"] > 0.999 > top[1]["score"], (text, top)

    if backend == "postgres":
        # The nearest-neighbour index is an HNSW index over memory_vectors itself.
        assert daemon.scalar("SELECT count(*) FROM pg_indexes WHERE tablename = 'memory_vectors' "
                             "AND indexdef LIKE '%USING hnsw%'") == 1
        return
    # The nearest-neighbour index (sqlite-vec's vec0 table) holds the same rows as the durable vectors.
    with daemon.db() as conn:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        indexed = conn.execute("SELECT count(*) FROM memory_vec").fetchone()[0]
    assert indexed == 20
