"""daemon.status's cluster on one PostgreSQL shared by two daemons: each sees both."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.integration.harness import DaemonHandle, run_cli, wait_until

pytestmark = pytest.mark.postgres


def test_each_daemon_lists_both_and_a_stopped_one_reads_stopped(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    a = start_daemon("a", db_url=pg_url)
    b = start_daemon("b", db_url=pg_url)
    for me, other in ((a, b), (b, a)):
        cluster = me.call("daemon.status")["cluster"]
        assert cluster["shared"] is True
        by_pid = {d["pid"]: d for d in cluster["daemons"]}
        assert set(by_pid) == {a.proc.pid, b.proc.pid}  # type: ignore[union-attr]
        assert by_pid[me.proc.pid]["self"] and not by_pid[other.proc.pid]["self"]  # type: ignore[union-attr]
        assert {d["state"] for d in cluster["daemons"]} == {"running"}
        assert cluster["daemons"][0]["self"]  # this daemon first
    b_node = next(d["node"] for d in a.call("daemon.status")["cluster"]["daemons"] if not d["self"])
    assert b.stop() == 0
    states = {d["node"]: d["state"] for d in a.call("daemon.status")["cluster"]["daemons"]}
    assert states[b_node] == "stopped"
    row = a.scalar("SELECT value FROM meta WHERE key = ?", (f"daemon:{b_node}",))
    assert json.loads(row)["state"] == "stopped"
    # On a shared store the row is renewed while the daemon runs (every 15 s).
    first = a.call("daemon.status")["cluster"]["daemons"][0]["last_seen_at"]
    wait_until(lambda: a.call("daemon.status")["cluster"]["daemons"][0]["last_seen_at"] != first,
               timeout_s=40, interval_s=1.0, message="daemon a's row renewed by its heartbeat")


@pytest.mark.slow
def test_each_daemon_shows_every_daemons_lag_and_write_figures(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    """`memoryd status` on one daemon shows the other's node, its lag (seconds since its row was
    renewed) and the writes it committed since its previous heartbeat."""
    a = start_daemon("a", db_url=pg_url)
    b = start_daemon("b", db_url=pg_url)
    with b.client() as conn:
        for i in range(40):
            conn.call("memory.write", {"content": f"note {i} written through daemon b", "agent_id": "x"})

    def b_seen_by_a() -> dict[str, object]:
        return next(d for d in a.call("daemon.status")["cluster"]["daemons"] if not d["self"])

    wait_until(lambda: (b_seen_by_a().get("writes") or {}).get("commits", 0) > 0,  # type: ignore[union-attr]
               timeout_s=45, interval_s=1.0, message="daemon b's heartbeat carrying its writes")
    seen = b_seen_by_a()
    writes = seen["writes"]
    assert isinstance(writes, dict)
    assert writes["per_s"] > 0 and writes["commit_p99_ms"] > 0 and writes["queue"] == 0
    assert isinstance(seen["lag_s"], float) and 0 <= seen["lag_s"] < 60
    shown = run_cli(["status", "--socket", str(a.socket)], {**a.env, "COLUMNS": "200"})  # headers unwrapped
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "lag s" in shown.stdout and "commit p99 ms" in shown.stdout
    assert str(seen["node"]) in shown.stdout
