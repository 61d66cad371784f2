"""Two daemons, one PostgreSQL database: a write on either is found by a search on the other,
and each embed job is done once across the two (SKIP LOCKED claims, leases per daemon)."""

from __future__ import annotations

import itertools
import threading
import time
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


def test_a_write_on_one_daemon_wakes_an_idle_daemon_with_a_model_at_once(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    """LISTEN/NOTIFY: daemon b has the embedder and no safety-net tick within the test (an hour);
    daemon a has no embedder. a's writes are embedded by b because a's enqueue woke it."""
    idle = {**CONFIG, "tick_interval_s": 3600.0}
    b = start_daemon("b", embedder="bundled", db_url=pg_url, config=idle)
    b.call("memory.search", {"query": "load the model", "agent_id": "x", "mode": "vector"})
    wait_until(lambda: b.call("daemon.status")["models"]["embedder"]["loaded"], timeout_s=300,
               message="b's embedder loaded")
    a = start_daemon("a", embedder="none", db_url=pg_url, config=idle)
    time.sleep(2.0)  # both idle: b's runner waits for a wake-up (or its hour-long tick)
    ids = [a.write(f"written on a, embedded on b: note {i}", agent_id="shared")["id"] for i in range(5)]
    wait_until(lambda: _open_embeds(a) == 0, timeout_s=60, message="b to embed a's writes")
    assert _embed_stats(b)["processed_total"] >= len(ids)
    found = {r["id"] for r in b.call("memory.search", {
        "query": "written on a", "agent_id": "shared", "mode": "vector", "k": 10})["results"]}
    assert set(ids) <= found


def test_a_daemon_killed_mid_batch_leaves_its_jobs_to_the_other_once_its_leases_expire(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    """kill -9 while daemon a holds a leased embed batch: nothing renews a's leases, they expire
    (job_lease_s = 4 s), and daemon b finishes those jobs; every memory ends with one vector and
    every embed job done, none dead."""
    short = {**CONFIG, "job_lease_s": 4.0, "embed_batch_size": 16}
    a = start_daemon("a", embedder="bundled", db_url=pg_url, config=short)
    items = [{"content": f"memory {i} about the release checklist and its owners", "agent_id": "shared"}
             for i in range(300)]
    a.call("memory.write_many", {"items": items})
    a_owner = (a.data_dir / "node_id").read_text().strip()

    def a_holds_a_batch() -> bool:
        return bool(a.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed' AND state = 'leased' "
                             "AND lease_owner = ?", (a_owner,)))

    wait_until(a_holds_a_batch, timeout_s=300, interval_s=0.01, message="a to hold an embed batch")
    a.kill()
    orphaned = {r[0] for r in a.query("SELECT id FROM jobs WHERE pass = 'embed' AND state = 'leased' "
                                      "AND lease_owner = ?", (a_owner,))}
    assert orphaned, "a finished its batch before the kill; nothing was left to reclaim"

    b = start_daemon("b", embedder="bundled", db_url=pg_url, config=short)
    wait_until(lambda: _open_embeds(b) == 0, timeout_s=600, message="b to finish every embed job")
    assert b.scalar("SELECT count(*) FROM memory_vectors") == len(items)
    states = dict(b.query("SELECT state, count(*) FROM jobs WHERE pass = 'embed' GROUP BY state"))
    assert states == {"done": len(items)}
    # a's orphaned jobs were claimed again (a second attempt) once their leases had expired.
    attempts = dict(b.query("SELECT id, attempts FROM jobs WHERE pass = 'embed'"))
    assert all(attempts[job_id] == 2 for job_id in orphaned)


def test_three_daemons_sixteen_clients_ten_thousand_writes_each_present_once_and_embedded_once(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    """The issue's cluster figure: 3 daemons on one database, 16 concurrent clients spread over
    them, 10,000 acknowledged writes; each is present once, and each memory is embedded once in
    effect (one vector each, every embed job done, the daemons' processed counts adding up)."""
    daemons = [start_daemon(f"n{i}", embedder="bundled", db_url=pg_url, config=CONFIG) for i in range(3)]
    clients, per_client = 16, 625
    acked: list[list[str]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []

    def client(c: int) -> None:
        daemon = daemons[c % len(daemons)]
        try:
            with daemon.client() as conn:
                for start in range(0, per_client, 25):
                    items = [{"content": f"client {c} write {i}: the cluster keeps every note once",
                              "agent_id": f"agent-{c % 4}"} for i in range(start, start + 25)]
                    out = conn.call("memory.write_many", {"items": items})["results"]
                    acked[c].extend(r["id"] for r in out)
        except BaseException as exc:  # reported below
            errors.append(exc)

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    write_s = time.monotonic() - started
    assert not errors, errors[:3]
    ids = [i for ids in acked for i in ids]
    assert len(ids) == len(set(ids)) == clients * per_client
    stored = dict(daemons[0].query("SELECT id, count(*) FROM memories GROUP BY id"))
    assert set(stored) == set(ids) and set(stored.values()) == {1}

    wait_until(lambda: _open_embeds(daemons[0]) == 0, timeout_s=1800, interval_s=1.0,
               message="every embed job done")
    drain_s = time.monotonic() - started - write_s
    assert daemons[0].scalar("SELECT count(*) FROM memory_vectors") == len(ids)
    states = dict(daemons[0].query("SELECT state, count(*) FROM jobs WHERE pass = 'embed' GROUP BY state"))
    assert states == {"done": len(ids)}
    processed = [_embed_stats(d)["processed_total"] for d in daemons]
    assert sum(processed) == len(ids), processed
    # 10,000 writes' audit events from three daemons' writers form one chain.
    chain = daemons[1].call("audit.verify", admin=True)
    assert chain["ok"] and chain["first_break_seq"] is None, chain
    assert chain["events"] >= len(ids)
    print(f"10,000 writes in {write_s:.1f} s; embed drain {drain_s:.1f} s; "  # noqa: T201 - shown with -s
          f"embedded per daemon {processed}")


def test_three_daemons_run_each_decay_and_retention_period_once(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    """Time-driven passes across a cluster: three daemons check the schedule every 0.2 s, the
    periods are 2 s long, and each period's tick is enqueued and run once in all (never once per
    daemon): consecutive ticks are at least one period apart, and every tick but the last ran.
    (Removing the claim's interval condition gave 104 ticks in the window, 0.2 s apart.)"""
    period, window = 2.0, 16.0
    config = {**CONFIG, "tick_interval_s": 0.2, "decay_interval_s": period, "retention_interval_s": period}
    daemons = [start_daemon(f"t{i}", embedder="none", db_url=pg_url, config=config) for i in range(3)]
    time.sleep(window)
    for d in daemons:
        d.stop()
    for name in ("decay", "retention"):
        created = [float(t) for (t,) in daemons[0].query(
            "SELECT created_at FROM jobs WHERE pass = ? AND target = 'tick' ORDER BY created_at", (name,))]
        gaps = [b - a for a, b in itertools.pairwise(created)]
        # Once per period across the three: consecutive ticks at least a period apart (once per
        # daemon would put three in a period). The count follows from the gaps; the window runs
        # from the first daemon's start, which a loaded machine stretches past ``window``.
        assert len(created) >= 3, (name, created)
        assert min(gaps) >= period - 0.05, (name, gaps)
        done = int(daemons[0].scalar(
            "SELECT count(*) FROM jobs WHERE pass = ? AND target = 'tick' AND state = 'done'", (name,)))
        assert done >= len(created) - 1, (name, done, len(created))
