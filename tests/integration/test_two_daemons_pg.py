"""Two daemons, one PostgreSQL database: a write on either is found by a search on the other,
and each embed job is done once across the two (SKIP LOCKED claims, leases per daemon)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.harness import DaemonHandle, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: Both daemons embed; a short tick makes the daemon that did not take the write find the backlog.
CONFIG = {"tick_interval_s": 1.0, "governor_enabled": False, "model_idle_s": 3600.0}


def _open_embeds(daemon: DaemonHandle) -> int:
    return int(daemon.scalar(
        "SELECT count(*) FROM jobs WHERE pass = 'embed' AND state IN ('ready', 'leased')"))


def _embed_stats(daemon: DaemonHandle) -> dict[str, Any]:
    stats: dict[str, Any] = daemon.call("daemon.status")["passes"]["embed"]
    return stats


def test_two_daemons_share_one_store_and_embed_each_memory_once(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    a = start_daemon("a", embedder="bundled", db_url=pg_url, config=CONFIG)
    b = start_daemon("b", embedder="bundled", db_url=pg_url, config=CONFIG)
    n = 60
    on_a = [a.write(f"note {i} written through daemon a about the deploy pipeline",
                    agent_id="shared")["id"] for i in range(n)]
    on_b = [b.write(f"note {i} written through daemon b about the billing service",
                    agent_id="shared")["id"] for i in range(n)]
    wait_until(lambda: _open_embeds(a) == 0, timeout_s=600, message="every embed job done")

    # Each memory has its vector, and the embed jobs were processed once in all: the two
    # daemons' processed counts add up to the number of memories, with none run twice.
    assert a.scalar("SELECT count(*) FROM memory_vectors") == 2 * n
    assert a.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed' AND state = 'done'") == 2 * n
    done_a, done_b = _embed_stats(a)["processed_total"], _embed_stats(b)["processed_total"]
    assert done_a + done_b == 2 * n, (done_a, done_b)
    print(f"embed jobs done: daemon a {done_a}, daemon b {done_b}")  # noqa: T201 - shown with -s

    # A write on one daemon is found by a search on the other, in every mode.
    for mode in ("lexical", "vector", "hybrid"):
        found_on_b = {r["id"] for r in b.call("memory.search", {
            "query": "deploy pipeline", "agent_id": "shared", "mode": mode, "k": 100})["results"]}
        found_on_a = {r["id"] for r in a.call("memory.search", {
            "query": "billing service", "agent_id": "shared", "mode": mode, "k": 100})["results"]}
        assert set(on_a[:10]) & found_on_b, mode
        assert set(on_b[:10]) & found_on_a, mode
    # Scope still holds across daemons: another agent sees none of it.
    other = b.call("memory.search", {"query": "deploy pipeline", "agent_id": "someone-else"})["results"]
    assert other == []
