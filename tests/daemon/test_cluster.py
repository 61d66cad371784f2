"""Which daemons share a store (daemon/cluster.py): rows in ``meta``, states, leases."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy import Engine, insert, select, update

from memoryd.daemon import cluster
from memoryd.queue import jobs as jobq
from memoryd.statusview import cluster_table
from memoryd.store.engine import create_store_engine
from memoryd.store.migrate import upgrade
from memoryd.store.schema import jobs, meta
from tests.integration.harness import DaemonHandle

T0 = 1_800_000_000.0


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = create_store_engine(f"sqlite:///{tmp_path / 'memoryd.db'}")
    upgrade(eng)
    yield eng
    eng.dispose()


def test_members_show_state_by_last_seen_and_the_leases_each_holds(engine: Engine) -> None:
    with engine.begin() as conn:
        cluster.announce(conn, "node-a", started_at=T0 - 100, now=T0 - 5)
        cluster.announce(conn, "node-b", started_at=T0 - 900, now=T0 - 300)  # killed 5 min ago
        cluster.announce(conn, "node-c", started_at=T0 - 50, now=T0 - 10, state="stopped")
        for target in ("m1", "m2", "m3"):
            jobq.enqueue(conn, "embed", target, now=T0 - 60)
        claimed = jobq.claim(conn, "embed", owner="node-a", now=T0 - 60, lease_s=600, limit=2)
        assert len(claimed) == 2
        conn.execute(update(jobs).where(jobs.c.target == "m3").values(
            state="leased", lease_owner="node-old", lease_until=T0 + 600))
    with engine.connect() as conn:
        found = {d["node"]: d for d in cluster.members(conn, T0, me="node-c")}
    assert [found[n]["state"] for n in ("node-a", "node-b", "node-c", "node-old")] == [
        "running", "silent", "stopped", "unknown"]
    assert [found[n]["leases"] for n in ("node-a", "node-b", "node-c", "node-old")] == [2, 0, 0, 1]
    assert found["node-c"]["self"] and not found["node-a"]["self"]
    assert found["node-a"]["pid"] == os.getpid() and found["node-a"]["seen_s_ago"] == 5.0
    assert found["node-a"]["last_seen_at"].endswith("Z") and found["node-b"]["started_at"].endswith("Z")
    with engine.connect() as conn:
        order = [d["node"] for d in cluster.members(conn, T0, me="node-c")]
    assert order == ["node-c", "node-a", "node-b", "node-old"]  # this one, then by last seen


def test_announce_renews_one_row_and_stale_or_damaged_rows_are_dropped(engine: Engine) -> None:
    with engine.begin() as conn:
        cluster.announce(conn, "node-a", started_at=T0, now=T0)
        cluster.announce(conn, "node-a", started_at=T0, now=T0 + 15)
        cluster.announce(conn, "node-gone", started_at=T0 - 9 * 86400, now=T0 - 8 * 86400)
        conn.execute(insert(meta).values(key="daemon:node-bad", value="{not json"))
        conn.execute(insert(meta).values(key="schedule:decay", value="123"))  # not a daemon: kept
    with engine.begin() as conn:
        assert cluster.forget_stale(conn, T0 + 15) == 2
    with engine.connect() as conn:
        keys = sorted(k for (k,) in conn.execute(select(meta.c.key)))
        row = conn.execute(select(meta.c.value).where(meta.c.key == "daemon:node-a")).scalar_one()
    value = json.loads(row)
    assert "daemon:node-a" in keys and "schedule:decay" in keys
    assert "daemon:node-gone" not in keys and "daemon:node-bad" not in keys
    assert value["seen_at"] == T0 + 15


def test_the_view_shows_the_cluster_only_when_the_store_is_shared_or_was() -> None:
    one = {"shared": False, "daemons": [{"node": "node-a", "host": "h", "pid": 1, "state": "running",
                                         "leases": 0, "self": True, "last_seen_at": None,
                                         "started_at": None}]}
    assert cluster_table(one) is None
    shared = {**one, "shared": True, "daemons": [*one["daemons"], {**one["daemons"][0], "node": "node-b",
                                                                   "self": False, "state": "silent",
                                                                   "leases": 3}]}
    table = cluster_table(shared)
    assert table is not None
    console = Console(width=160, record=True)
    console.print(table)
    text = console.export_text()
    assert "node-a (this)" in text and "node-b" in text and "silent" in text and "3" in text
    # Each daemon's lag and its write figures from its heartbeat (issue 22).
    busy = {**shared, "daemons": [{**shared["daemons"][1], "lag_s": 7.0,
                                   "writes": {"per_s": 1234.5, "commit_p99_ms": 8.25, "queue": 0}}]}
    console = Console(width=200, record=True)
    console.print(cluster_table(busy))
    text = console.export_text()
    assert "lag s" in text and "1,234.5" in text and "8.2" in text and " 7 " in text


def test_a_real_daemon_reports_itself_and_marks_itself_stopped(daemon: DaemonHandle, backend: str) -> None:
    status = daemon.call("daemon.status")
    # docs/protocol.md: a PostgreSQL store is one daemons may share; a SQLite file is not.
    assert status["cluster"]["shared"] is (backend == "postgres")
    [me] = status["cluster"]["daemons"]
    assert me["self"] and me["state"] == "running" and me["pid"] == daemon.proc.pid  # type: ignore[union-attr]
    assert daemon.stop() == 0
    row = daemon.scalar("SELECT value FROM meta WHERE key = ?", (f"daemon:{me['node']}",))
    assert json.loads(row)["state"] == "stopped"
    daemon.start()
    [again] = daemon.call("daemon.status")["cluster"]["daemons"]
    assert again["node"] == me["node"] and again["state"] == "running"  # one row per data directory
