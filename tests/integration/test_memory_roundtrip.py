"""Happy paths over the real socket: write, get, search, duplicates, write_many, framing, access counts."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from memoryd.service.client import ClientError
from memoryd.store.engine import create_store_engine
from memoryd.store.memories import add_tombstone, content_hash
from tests.integration.harness import DaemonHandle, RawConnection, wait_until

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")

GET_FIELDS = {
    "id", "content", "kind", "scope", "agent_id", "user_id", "project", "session_id", "status",
    "importance", "importance_raw", "valid_from", "valid_to", "recorded_at", "retired_at",
    "metadata", "derived", "pending",
}


def _search(daemon: DaemonHandle, query: str, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = daemon.call("memory.search", {"query": query, "mode": "lexical", "k": 100,
                                                           **params})
    return result


def test_written_memory_reads_back_with_protocol_fields_and_pending_embed(daemon: DaemonHandle) -> None:
    ack = daemon.call("memory.write", {
        "content": "Staging runs Postgres 15 on db1:5432", "kind": "fact", "scope": "user",
        "user_id": "u1", "agent_id": "agent-a", "importance": 0.8, "metadata": {"source": "chat"},
        "valid_from": "2026-01-02T03:04:05+01:00",
    })
    assert ack["id"].startswith("mem_")
    assert "embed" in ack["queued"]
    assert ack["notices"] == []
    assert "duplicate_of" not in ack
    assert RFC3339_UTC.match(ack["recorded_at"])

    got = daemon.call("memory.get", {"id": ack["id"], "include": ["history"]})
    assert set(got) >= GET_FIELDS, f"missing fields: {GET_FIELDS - set(got)}"
    assert got["content"] == "Staging runs Postgres 15 on db1:5432"
    assert (got["kind"], got["scope"], got["user_id"], got["agent_id"]) == ("fact", "user", "u1", "agent-a")
    assert got["project"] is None and got["session_id"] is None
    assert got["status"] == "active"
    assert got["importance"] == pytest.approx(0.8)
    assert got["importance_raw"] == pytest.approx(0.8)
    assert got["valid_from"] == "2026-01-02T02:04:05.000000Z"  # any RFC 3339 in, UTC with Z out
    assert got["valid_to"] is None and got["retired_at"] is None
    assert got["recorded_at"] == ack["recorded_at"]
    assert got["metadata"] == {"source": "chat"}
    assert got["derived"] is False
    # The models are off: the embed job (and any other queued at write) waits.
    assert "embed" in got["pending"]
    assert set(got["pending"]) <= set(ack["queued"])
    assert [e["action"] for e in got["history"]] == ["memory.write"]


def test_lexical_search_shows_own_rows_and_hides_other_owners(daemon: DaemonHandle) -> None:
    seeded = {
        "mine": daemon.write("the staging database runs postgres", agent_id="agent-a"),
        "other_agent": daemon.write("the staging database runs mysql", agent_id="agent-b"),
        "other_user": daemon.write("the staging database password rotates", scope="user",
                                   user_id="u-other"),
        "other_project": daemon.write("the staging database lives on db9", scope="project",
                                      project="p-other"),
        "org": daemon.write("the staging database is backed up nightly", scope="org"),
    }
    found = _search(daemon, "staging database", agent_id="agent-a", user_id="u-mine")
    assert found["mode_used"] == "lexical"
    ids = {r["id"] for r in found["results"]}
    assert seeded["mine"]["id"] in ids  # positive control in the same result
    assert seeded["org"]["id"] in ids  # org rows are visible to everyone
    for absent in ("other_agent", "other_user", "other_project"):
        assert seeded[absent]["id"] not in ids, f"{absent} leaked into agent-a's search"
    assert all(isinstance(r["score"], float) for r in found["results"])

    # The other owner sees its row and not ours.
    theirs = {r["id"] for r in _search(daemon, "staging database", agent_id="agent-b")["results"]}
    assert seeded["other_agent"]["id"] in theirs
    assert seeded["mine"]["id"] not in theirs

    # No key, no access: only org rows for a reader with no owner fields.
    anonymous = {r["id"] for r in _search(daemon, "staging database")["results"]}
    assert anonymous == {seeded["org"]["id"]}


def test_duplicate_write_returns_the_existing_id_and_queues_nothing(daemon: DaemonHandle) -> None:
    first = daemon.write("Deploys go out from the main branch")
    again = daemon.write("  Deploys go out from the main branch \n")  # same after trimming
    assert again["id"] == first["id"]
    assert again["duplicate_of"] == first["id"]
    assert again["queued"] == []
    composed = daemon.write("caf\u00e9 closes at six", agent_id="agent-a")
    decomposed = daemon.write("cafe\u0301 closes at six", agent_id="agent-a")  # equal after NFC
    assert decomposed["duplicate_of"] == composed["id"]
    assert daemon.scalar("SELECT count(*) FROM memories") == 2
    assert daemon.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed'") == 2

    # Positive control: duplicates are per owner, so another agent's copy is a new row.
    other = daemon.write("Deploys go out from the main branch", agent_id="agent-b")
    assert other["id"] != first["id"]
    assert "duplicate_of" not in other
    assert "embed" in other["queued"]


def test_write_many_writes_every_item_and_answers_in_order(daemon: DaemonHandle) -> None:
    items = [{"content": f"batch item {i}", "agent_id": "agent-a"} for i in range(5)]
    results = daemon.call("memory.write_many", {"items": items})["results"]
    assert len(results) == 5
    for i, result in enumerate(results):
        assert daemon.call("memory.get", {"id": result["id"]})["content"] == f"batch item {i}"
        assert "embed" in result["queued"]


def test_write_many_with_one_invalid_item_writes_nothing(daemon: DaemonHandle) -> None:
    items = [{"content": "batch survivor one", "agent_id": "agent-a"},
             {"content": "batch bad importance", "agent_id": "agent-a", "importance": 3},
             {"content": "batch survivor two", "agent_id": "agent-a"}]
    with pytest.raises(ClientError) as info:
        daemon.call("memory.write_many", {"items": items})
    assert info.value.code == -32602
    assert info.value.data["field"] == "items[1].importance"
    assert daemon.scalar("SELECT count(*) FROM memories") == 0
    # Positive control: the same batch without the bad item is written whole.
    daemon.call("memory.write_many", {"items": [items[0], items[2]]})
    assert daemon.scalar("SELECT count(*) FROM memories") == 2


def test_write_many_with_one_tombstoned_item_writes_nothing(daemon: DaemonHandle) -> None:
    engine = create_store_engine(daemon.store_url)
    try:
        with engine.begin() as conn:
            add_tombstone(conn, "agent", "agent-a", content_hash("batch forgotten item"), datetime.now(UTC))
    finally:
        engine.dispose()
    items = [{"content": "batch fine item", "agent_id": "agent-a"},
             {"content": "batch forgotten item", "agent_id": "agent-a"}]
    with pytest.raises(ClientError) as info:
        daemon.call("memory.write_many", {"items": items})
    assert info.value.code == 1006
    assert daemon.scalar("SELECT count(*) FROM memories") == 0
    assert daemon.scalar("SELECT count(*) FROM jobs WHERE target LIKE 'mem_%'") == 0
    assert daemon.scalar("SELECT count(*) FROM audit_events WHERE memory_id IS NOT NULL") == 0
    # Positive control: the item that is not tombstoned writes on its own.
    daemon.call("memory.write_many", {"items": items[:1]})
    assert daemon.count_content("batch fine item") == 1


def test_pipelined_requests_on_one_connection_are_each_answered_with_their_id(daemon: DaemonHandle) -> None:
    known = daemon.write("pipelined lookup target")
    frames: list[dict[str, Any]] = []
    for i in range(10):
        frames.append({"jsonrpc": "2.0", "id": f"w{i}", "method": "memory.write",
                       "params": {"content": f"pipelined write {i}", "agent_id": "agent-a"}})
        frames.append({"jsonrpc": "2.0", "id": 1000 + i, "method": "daemon.ping"})
        frames.append({"jsonrpc": "2.0", "id": f"g{i}", "method": "memory.get",
                       "params": {"id": known["id"]}})
    with RawConnection(daemon.socket) as conn:
        conn.send(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        replies = [conn.read() for _ in frames]
    by_id = {r["id"]: r for r in replies}
    assert set(by_id) == {f["id"] for f in frames}  # every request answered once, ids kept with type
    for i in range(10):
        written = by_id[f"w{i}"]["result"]["id"]
        assert daemon.call("memory.get", {"id": written})["content"] == f"pipelined write {i}"
        assert by_id[1000 + i]["result"]["protocol"] == 1
        assert by_id[f"g{i}"]["result"]["content"] == "pipelined lookup target"


def test_notifications_get_no_response_but_are_carried_out(daemon: DaemonHandle) -> None:
    with RawConnection(daemon.socket) as conn:
        conn.send_json({"jsonrpc": "2.0", "method": "memory.write",
                        "params": {"content": "written by a notification", "agent_id": "agent-a"}})
        conn.send_json({"jsonrpc": "2.0", "method": "no.such.method"})  # errors are not answered either
        conn.send_json({"jsonrpc": "2.0", "method": "memory.write", "params": {"agent_id": "agent-a"}})
        wait_until(lambda: daemon.count_content("written by a notification") == 1,
                   message="the notification's write to be committed")
        conn.request("daemon.ping", req_id="after-notifications")
        reply = conn.read()
        assert reply["id"] == "after-notifications"  # the first line on the wire is this answer
        assert conn.nothing_more_within(0.5)
    daemon.assert_alive()


def test_get_and_search_increment_access_count(daemon: DaemonHandle) -> None:
    read = daemon.write("the flaky test is test_upload_retry")
    unread = daemon.write("lunch is at noon")

    def access_count(memory_id: str) -> int:
        return int(daemon.scalar("SELECT access_count FROM memories WHERE id = ?", (memory_id,)))

    daemon.call("memory.get", {"id": read["id"]})
    wait_until(lambda: access_count(read["id"]) == 1, message="the get to be counted")
    hits = _search(daemon, "flaky upload", agent_id="agent-a")["results"]
    assert [h["id"] for h in hits] == [read["id"]]
    wait_until(lambda: access_count(read["id"]) == 2, message="the search hit to be counted")
    assert daemon.scalar("SELECT last_accessed_at FROM memories WHERE id = ?", (read["id"],))
    # Control: a memory nobody read keeps a zero count.
    assert access_count(unread["id"]) == 0
    assert daemon.call("memory.get", {"id": unread["id"]})["status"] == "active"


def test_many_pipelined_writes_past_the_in_flight_cap_are_all_answered(
        start_daemon: Any) -> None:
    # Writes are answered from their commit (no task each); every answer, refusal included,
    # must give its in-flight slot back, or a connection stalls at the cap.
    daemon = start_daemon(config={"max_inflight_per_connection": 2})
    frames: list[dict[str, Any]] = []
    for i in range(30):
        params: dict[str, Any] = {"content": f"capped pipeline {i}", "agent_id": "agent-a"}
        if i % 5 == 4:
            params = {"agent_id": "agent-a"}  # no content: refused (-32602) before queueing
        frames.append({"jsonrpc": "2.0", "id": i, "method": "memory.write", "params": params})
    with RawConnection(daemon.socket) as conn:
        conn.send(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        replies = {r["id"]: r for r in (conn.read() for _ in frames)}
    assert set(replies) == set(range(30))
    refused = {i for i, r in replies.items() if "error" in r}
    assert refused == {i for i in range(30) if i % 5 == 4}
    assert {replies[i]["error"]["code"] for i in refused} == {-32602}
    assert daemon.scalar("SELECT count(*) FROM memories WHERE content LIKE 'capped pipeline %'") == 24
    daemon.assert_alive()
