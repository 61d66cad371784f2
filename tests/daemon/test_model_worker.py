"""The model worker: models live in a child process; a crash there fails one attempt, not the daemon."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest

from tests.integration.harness import DaemonHandle, wait_until

pytestmark = pytest.mark.slow

NOTES = [f"note {i}: the build cache for service {i % 7} lives under /var/cache/build{i}" for i in range(240)]


def embed_queue(d: DaemonHandle) -> dict[str, int]:
    return d.call("daemon.status")["queues"]["embed"]


def test_sigkill_of_worker_mid_batch_is_redone_by_a_new_worker_with_every_row_embedded_once(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    d = start_daemon(embedder="bundled", config={"governor_enabled": False, "embed_batch_size": 16,
                                                 "backoff_base_s": 0.2, "backoff_max_s": 0.5})
    d.call("memory.write_many", {"items": [{"content": n, "agent_id": "a1"} for n in NOTES]})

    def worker_busy() -> int | None:
        s = d.call("daemon.status")
        emb = s["models"]["embedder"]
        return emb["worker_pid"] if emb["loaded"] and s["queues"]["embed"]["leased"] else None

    pid = wait_until(worker_busy, timeout_s=120, message="the worker to hold a leased batch")
    os.kill(pid, signal.SIGKILL)
    d.assert_alive()  # the daemon keeps answering
    assert d.call("memory.search", {"query": "build cache", "agent_id": "a1", "mode": "lexical"})["results"]

    wait_until(lambda: (q := embed_queue(d))["ready"] + q["failed"] + q["leased"] == 0,
               timeout_s=240, message="the embed queue to drain after the crash")
    status = d.call("daemon.status")
    assert status["models"]["embedder"]["worker_starts"] >= 2
    assert status["models"]["embedder"]["worker_pid"] != pid
    # The crashed batch was rerun job by job on a fresh worker (the runner's isolation of a
    # failed batch): every row embedded exactly once, none dead, every job done.
    assert d.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed' AND state = 'dead'") == 0
    assert d.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed' AND state != 'done'") == 0
    assert d.scalar("SELECT count(*) FROM memory_vectors") == len(NOTES)
    assert d.scalar("SELECT count(DISTINCT memory_seq) FROM memory_vectors") == len(NOTES)


def test_worker_exits_after_model_idle_s_and_daemon_rss_stays_small(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    d = start_daemon(embedder="bundled", config={"governor_enabled": False, "model_idle_s": 3.0})
    d.call("memory.write_many", {"items": [{"content": n, "agent_id": "a1"} for n in NOTES[:10]]})
    wait_until(lambda: d.call("daemon.status")["models"]["embedder"]["worker_pid"], timeout_s=60,
               message="the worker to start")
    wait_until(lambda: d.call("daemon.status")["models"]["embedder"]["worker_pid"] is None,
               timeout_s=120, message="the idle worker to exit")
    status = d.call("daemon.status")
    assert status["queues"]["embed"]["ready"] == 0
    assert status["models"]["embedder"]["loaded"] is False
    # The daemon itself never imported torch: its RSS is far below the worker's model.
    assert status["governor"]["rss_bytes"] < 300 * 2**20
    assert "worker.exited_idle" in d.stderr_text()
