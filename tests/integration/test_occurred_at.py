"""memory.write's occurred_at (protocol 1.1): stored, returned, validated, part of idempotency."""

from __future__ import annotations

import pytest

from memoryd.service.client import ClientError
from tests.integration.harness import DaemonHandle


def test_occurred_at_round_trips_through_write_get_search_and_list(module_daemon: DaemonHandle) -> None:
    ack = module_daemon.call("memory.write", {
        "content": "Moved the staging cluster to Frankfurt", "kind": "event", "agent_id": "occ-a",
        "occurred_at": "2025-03-14T09:30:00+01:00",
    })
    got = module_daemon.call("memory.get", {"id": ack["id"]})
    # Any RFC 3339 in, UTC with microseconds and Z out; distinct from recorded_at.
    assert got["occurred_at"] == "2025-03-14T08:30:00.000000Z"
    assert got["recorded_at"] == ack["recorded_at"] != got["occurred_at"]
    hits = module_daemon.call("memory.search", {"query": "Frankfurt staging cluster", "mode": "lexical",
                                                "agent_id": "occ-a"})["results"]
    assert [(h["id"], h["occurred_at"]) for h in hits] == [(ack["id"], "2025-03-14T08:30:00.000000Z")]
    listed = module_daemon.call("memory.list", {"agent_id": "occ-a"})["memories"]
    assert [(m["id"], m["occurred_at"]) for m in listed] == [(ack["id"], "2025-03-14T08:30:00.000000Z")]
    assert module_daemon.scalar("SELECT occurred_at FROM memories WHERE id = ?", (ack["id"],)) \
        == "2025-03-14T08:30:00.000000Z"


def test_occurred_at_is_null_when_not_given(module_daemon: DaemonHandle) -> None:
    ack = module_daemon.call("memory.write", {"content": "No time given for this one", "agent_id": "occ-b"})
    assert module_daemon.call("memory.get", {"id": ack["id"]})["occurred_at"] is None


@pytest.mark.parametrize("bad", ["yesterday", "2025-03-14", "2025-03-14T09:30:00", 1710408600, ""])
def test_bad_occurred_at_is_refused_naming_the_field_and_writes_nothing(
        module_daemon: DaemonHandle, bad: object) -> None:
    content = f"occurred_at refusal probe {bad!r}"
    with pytest.raises(ClientError) as err:
        module_daemon.call("memory.write", {"content": content, "agent_id": "occ-c", "occurred_at": bad})
    assert err.value.code == -32602
    assert err.value.data["field"] == "occurred_at"
    assert module_daemon.count_content(content) == 0


def test_bad_occurred_at_in_write_many_names_the_item(module_daemon: DaemonHandle) -> None:
    items = [{"content": "fine item for occ-d", "agent_id": "occ-d", "occurred_at": "2025-01-01T00:00:00Z"},
             {"content": "bad item for occ-d", "agent_id": "occ-d", "occurred_at": "not a time"}]
    with pytest.raises(ClientError) as err:
        module_daemon.call("memory.write_many", {"items": items})
    assert (err.value.code, err.value.data["field"]) == (-32602, "items[1].occurred_at")
    assert module_daemon.count_content("fine item for occ-d") == 0  # all or nothing


def test_same_idempotency_key_with_another_occurred_at_is_a_conflict(module_daemon: DaemonHandle) -> None:
    params = {"content": "Release 4.2 went out", "agent_id": "occ-e", "idempotency_key": "occ-e-1",
              "occurred_at": "2025-05-01T10:00:00Z"}
    first = module_daemon.call("memory.write", params)
    assert module_daemon.call("memory.write", params) == first  # positive control: a true retry
    with pytest.raises(ClientError) as err:
        module_daemon.call("memory.write", {**params, "occurred_at": "2025-05-02T10:00:00Z"})
    assert err.value.code == 1007
    assert module_daemon.scalar("SELECT occurred_at FROM memories WHERE id = ?", (first["id"],)) \
        == "2025-05-01T10:00:00.000000Z"


def test_occurred_at_is_recorded_in_the_write_audit_event(module_daemon: DaemonHandle) -> None:
    ack = module_daemon.call("memory.write", {"content": "Audited with a time", "agent_id": "occ-f",
                                              "occurred_at": "2024-12-31T23:59:59Z"})
    history = module_daemon.call("memory.get", {"id": ack["id"], "include": ["history"]})["history"]
    assert history[0]["detail"]["occurred_at"] == "2024-12-31T23:59:59.000000Z"
