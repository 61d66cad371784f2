"""Three daemons writing to one PostgreSQL database at once: 10,000 acknowledged writes, each
stored once with its event, and one audit log that verifies on every daemon, appended in
several lanes bound by cross-anchors."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from tests.integration.harness import DaemonHandle

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

CLIENTS, PER_CLIENT = 16, 625  # 10,000 writes


def test_three_daemons_ten_thousand_writes_leave_one_log_that_verifies(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    daemons = [start_daemon(f"n{i}", db_url=pg_url, config={"governor_enabled": False}) for i in range(3)]
    acked: list[list[str]] = [[] for _ in range(CLIENTS)]
    errors: list[BaseException] = []

    def client(c: int) -> None:
        daemon = daemons[c % len(daemons)]
        try:
            with daemon.client() as conn:
                i = 0
                while i < PER_CLIENT:
                    if c % 2:  # half the clients write one at a time, half in batches of 25
                        out = conn.call("memory.write", {"content": f"client {c} write {i} on the cluster",
                                                         "agent_id": f"agent-{c % 4}"})
                        acked[c].append(out["id"])
                        i += 1
                    else:
                        items = [{"content": f"client {c} write {j} on the cluster",
                                  "agent_id": f"agent-{c % 4}"} for j in range(i, i + 25)]
                        out = conn.call("memory.write_many", {"items": items})["results"]
                        acked[c].extend(r["id"] for r in out)
                        i += 25
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors[:3]
    ids = [i for per in acked for i in per]
    assert len(ids) == len(set(ids)) == CLIENTS * PER_CLIENT
    stored = dict(daemons[0].query("SELECT id, count(*) FROM memories GROUP BY id"))
    assert set(stored) == set(ids) and set(stored.values()) == {1}
    assert daemons[0].scalar("SELECT count(*) FROM audit_events WHERE action = 'memory.write'") == len(ids)
    for daemon in daemons:
        chain = daemon.call("audit.verify", admin=True)
        assert chain["ok"] and chain["first_break_seq"] is None and not chain["problems"], chain
        assert chain["events"] >= len(ids)
    # Concurrent transactions appended side by side, and the lanes are bound by anchors.
    assert chain["lanes"] >= 2 and chain["anchors"] >= 1, chain
    lanes = daemons[0].scalar("SELECT count(*) FROM audit_lanes")
    assert lanes == chain["lanes"]
