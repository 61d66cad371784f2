"""A store written before protocol 1.2 (project rows under a folder name) after the upgrade.

Its rows keep answering for the folder name (an explicit ``--project api``);
a ``--project auto`` bridge in a checkout named ``api`` does not see them
until the operator adopts them with ``memoryd project adopt api --cwd PATH``
(``project.adopt`` on the operator socket), which moves the memories, the
tombstones and the idempotency keys to the checkout's key, in batches, with
audit events. Real daemon (both backends), real bridges, the real CLI.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memoryd.client import Client, ClientError
from memoryd.store import entities
from tests.editors.mcp_harness import bridge, call, ok
from tests.editors.test_project_identity import CLIENT_KEY, CLIENT_ORIGIN, repo
from tests.integration.harness import DaemonHandle, hermetic_env, wait_until
from tests.lifecycle.helpers import engine_on

OLD = "api"
ME = ("--agent-id", "agent-me", "--user-id", "user-me")
NOTES = ["the api deploys with blue-green switches", "the api's feature flags live in LaunchDarkly"]
FORGOTTEN = "the api's admin password is hunter2"


def adopt_cli(daemon: DaemonHandle, *args: str) -> subprocess.CompletedProcess[str]:
    env = hermetic_env(daemon.home, {"MEMORYD_SOCKET": str(daemon.socket),
                                     "MEMORYD_ADMIN_SOCKET": str(daemon.admin_socket)})
    return subprocess.run([sys.executable, "-m", "memoryd", "project", "adopt", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _recall(daemon: DaemonHandle, cwd: Path, *project: str, query: str = "api deploys feature flags"
            ) -> list[str]:
    async def body() -> list[str]:
        async with bridge(daemon.socket, daemon.home, *ME, *project, cwd=cwd) as session:
            found = ok(await call(session, "recall", {"query": query, "mode": "lexical", "k": 20}))
            return sorted(h["content"] for h in found["results"])

    return asyncio.run(body())


def _seed_pre_1_2_store(daemon: DaemonHandle) -> dict[str, Any]:
    """Rows as a 1.1 bridge or capture left them: project = the folder name."""
    with Client(daemon.socket) as client:
        ids = [client.write(text, scope="project", project=OLD, agent_id="agent-me",
                            idempotency_key=f"old-{i}").id for i, text in enumerate(NOTES)]
        agent_row = client.write("agent-me prefers small diffs", scope="agent", agent_id="agent-me",
                                 project=OLD).id
        gone = client.write(FORGOTTEN, scope="project", project=OLD).id
        other = client.write("the web app deploys with a rolling update", scope="project", project="web").id
    daemon.call("memory.forget", {"id": gone, "tombstone": True, "reason": "a secret"})
    wait_until(lambda: daemon.call("memory.get", {"id": gone})["status"] == "forgotten", timeout_s=60,
               message="the forgotten row to be erased")
    return {"ids": ids, "agent_row": agent_row, "other": other}


def test_old_project_rows_stay_under_their_name_until_adopted_then_follow_the_key(
        daemon: DaemonHandle, short_tmp: Path) -> None:
    checkout = repo(short_tmp / "w" / OLD, CLIENT_ORIGIN)
    seeded = _seed_pre_1_2_store(daemon)

    # After the upgrade, before adoption: the name still answers, the key does not (no silent mapping).
    assert _recall(daemon, checkout, "--project", OLD) == sorted(NOTES)
    assert _recall(daemon, checkout, "--project", "auto") == []

    done = adopt_cli(daemon, OLD, "--cwd", str(checkout), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # Three memories carry project 'api' (two project rows, one agent row); the erased one has
    # no owner fields left. Its tombstone and the two idempotency keys move with them.
    assert (report["from"], report["to"]) == (OLD, CLIENT_KEY)
    assert (report["memories"], report["tombstones"], report["idempotency_keys"]) == (3, 1, 2)

    assert _recall(daemon, checkout, "--project", "auto") == sorted(NOTES)
    assert _recall(daemon, checkout, "--project", OLD) == []
    for memory_id in seeded["ids"]:
        row = daemon.call("memory.get", {"id": memory_id})
        assert (row["project"], row["scope"], row["status"]) == (CLIENT_KEY, "project", "active")
    agent_row = daemon.call("memory.get", {"id": seeded["agent_row"]})
    assert (agent_row["project"], agent_row["agent_id"]) == (CLIENT_KEY, "agent-me")
    # Another project's rows are untouched (positive control of the filter).
    assert daemon.call("memory.get", {"id": seeded["other"]})["project"] == "web"

    # The tombstone moved: the forgotten text stays refused under the new key...
    with Client(daemon.socket) as client, pytest.raises(ClientError) as refused:
        client.write(FORGOTTEN, scope="project", project=CLIENT_KEY)
    assert refused.value.code == 1006
    # ...and the chain records the adoption and still verifies.
    assert daemon.scalar("SELECT count(*) FROM audit_events WHERE action = 'project.adopt'") >= 1
    verified = daemon.call("audit.verify", {}, admin=True)
    assert verified["ok"] is True

    again = adopt_cli(daemon, OLD, "--cwd", str(checkout), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["memories"] == 0


def test_adoption_runs_in_batches_and_is_an_operator_verb(daemon: DaemonHandle) -> None:
    with Client(daemon.socket) as client:
        for i in range(7):
            client.write(f"old project note number {i}", scope="project", project=OLD)
    with pytest.raises(ClientError) as refused:
        daemon.call("project.adopt", {"from": OLD, "to": CLIENT_KEY})  # the agent socket
    assert refused.value.code == -32601
    for params, field in (({"from": OLD, "to": OLD}, "to"), ({"to": CLIENT_KEY}, "from"),
                          ({"from": OLD, "to": CLIENT_KEY, "limit": 0}, "limit")):
        with pytest.raises(ClientError) as bad:
            daemon.call("project.adopt", params, admin=True)
        assert (bad.value.code, bad.value.data.get("field")) == (-32602, field)
    out = daemon.call("project.adopt", {"from": OLD, "to": CLIENT_KEY, "limit": 3}, admin=True)
    # 3 + 3 + 1 memories, then the batch that finds none and moves the rest.
    assert (out["memories"], out["batches"]) == (7, 4)
    assert daemon.scalar("SELECT count(*) FROM memories WHERE project = ?", (CLIENT_KEY,)) == 7
    assert daemon.scalar("SELECT count(*) FROM memories WHERE owner = ?", (CLIENT_KEY,)) == 7
    assert daemon.scalar("SELECT count(*) FROM memories WHERE project = ?", (OLD,)) == 0
    assert daemon.scalar("SELECT count(*) FROM audit_events WHERE action = 'project.adopt'") == 3


def test_adopted_entities_move_or_merge_into_the_keys_own(daemon: DaemonHandle) -> None:
    with Client(daemon.socket) as client:
        old_note = client.write("the api caches sessions in Redis and streams to Kafka",
                                scope="project", project=OLD).id
        new_note = client.write("Redis runs on port 6380 here", scope="project", project=CLIENT_KEY).id
    at = "2026-01-05T10:00:00Z"
    with engine_on(daemon) as engine, engine.begin() as conn:
        old_redis = entities.create(conn, "project", OLD, "Redis", "redis", "tool", None, at)
        kafka = entities.create(conn, "project", OLD, "Kafka", "kafka", "tool", None, at)
        new_redis = entities.create(conn, "project", CLIENT_KEY, "Redis", "redis", "tool", None, at)
        for entity, memory_id, surface in ((old_redis, old_note, "Redis"), (kafka, old_note, "Kafka"),
                                           (new_redis, new_note, "Redis")):
            entities.mention(conn, entity, memory_id, surface)
        entities.add_alias(conn, old_redis, "redis cache")

    out = daemon.call("project.adopt", {"from": OLD, "to": CLIENT_KEY}, admin=True)
    assert (out["memories"], out["entities"]) == (1, 2)
    rows = daemon.query("SELECT id, owner, norm FROM entities ORDER BY id")
    # Kafka moved as it was; the old Redis merged into the key's own Redis and went.
    assert rows == [(kafka, CLIENT_KEY, "kafka"), (new_redis, CLIENT_KEY, "redis")]
    mentions = sorted(daemon.query("SELECT entity_id, memory_id FROM entity_mentions"))
    assert mentions == sorted([(kafka, old_note), (new_redis, old_note), (new_redis, new_note)])
    assert daemon.query("SELECT entity_id, alias FROM entity_aliases") == [(new_redis, "redis cache")]
