"""memory.supersede over the real socket: exactly once under races, its validation, and as_of."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from memoryd.service.client import Client, ClientError
from tests.integration.harness import DaemonHandle
from tests.lifecycle.helpers import QUIET, error_of, get, search_ids

RACERS = 8


def _race(daemon: DaemonHandle, old_id: str, contents: list[str]) -> list[Any]:
    """Each racer opens its own connection, then all supersede ``old_id`` at once."""
    barrier = threading.Barrier(len(contents))
    outcomes: list[Any] = [None] * len(contents)

    def racer(i: int) -> None:
        with Client(daemon.socket) as client:
            barrier.wait(timeout=30)
            try:
                outcomes[i] = client.call("memory.supersede", {
                    "old_id": old_id, "content": contents[i], "agent_id": "agent-a", "reason": f"racer {i}"})
            except ClientError as exc:
                outcomes[i] = exc

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(len(contents))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    return outcomes


def test_supersede_succeeds_exactly_once_under_eight_concurrent_racers(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    old = daemon.write("The deploy target for the billing service is host alpha-01")
    contents = [f"The deploy target for the billing service is host racer-{i:02d}" for i in range(RACERS)]

    outcomes = _race(daemon, old["id"], contents)

    wins = [(i, o) for i, o in enumerate(outcomes) if isinstance(o, dict)]
    losses = [o for o in outcomes if isinstance(o, ClientError)]
    assert len(wins) == 1, outcomes
    assert [e.code for e in losses] == [1007] * (RACERS - 1), [(e.code, e.message) for e in losses]
    winner_index, won = wins[0]
    assert won["old_id"] == old["id"]
    new_id = won["new_id"]

    # Exactly one new row, linked `supersedes`; the losers left no orphan rows behind.
    assert daemon.count_content(contents[winner_index]) == 1
    for i, content in enumerate(contents):
        if i != winner_index:
            assert daemon.count_content(content) == 0, f"racer {i} left an orphan row"
    new = get(daemon, new_id, include=["links"])
    assert new["status"] == "active"
    assert {"kind": "supersedes", "from": new_id, "to": old["id"]}.items() <= new["links"][0].items()
    assert len(new["links"]) == 1
    assert daemon.scalar("SELECT count(*) FROM memory_links WHERE kind = 'supersedes'") == 1

    closed = get(daemon, old["id"])
    assert closed["status"] == "superseded"
    assert closed["valid_to"] == new["valid_from"]
    assert closed["retired_at"] is not None
    assert closed["content"] == "The deploy target for the billing service is host alpha-01"
    # One supersede event in the audit log, naming the winner.
    events = daemon.query("SELECT detail FROM audit_events WHERE action = 'memory.supersede'")
    assert len(events) == 1 and new_id in events[0][0]


def test_supersede_of_another_owners_row_is_forbidden_and_changes_nothing(daemon: DaemonHandle) -> None:
    old = daemon.write("Agent A prefers tabs over spaces", agent_id="agent-a")

    err = error_of(daemon, "memory.supersede",
                   {"old_id": old["id"], "content": "Agent A prefers spaces", "agent_id": "agent-b"})

    assert err.code == 1005
    assert get(daemon, old["id"])["status"] == "active"
    assert daemon.count_content("Agent A prefers spaces") == 0
    # Positive control: the owner itself may supersede it.
    done = daemon.call("memory.supersede",
                       {"old_id": old["id"], "content": "Agent A prefers spaces", "agent_id": "agent-a"})
    assert get(daemon, done["new_id"])["agent_id"] == "agent-a"
    assert get(daemon, old["id"])["status"] == "superseded"


def test_supersede_that_changes_scope_is_forbidden(daemon: DaemonHandle) -> None:
    old = daemon.write("The team standup is at 09:30", agent_id="agent-a")

    err = error_of(daemon, "memory.supersede", {
        "old_id": old["id"], "content": "The team standup is at 10:00", "agent_id": "agent-a",
        "scope": "user", "user_id": "u1"})

    assert err.code == 1005
    assert err.data.get("field") == "scope"
    assert get(daemon, old["id"])["status"] == "active"
    assert daemon.count_content("The team standup is at 10:00") == 0
    # Positive control: the same supersede that keeps the scope goes through.
    done = daemon.call("memory.supersede", {
        "old_id": old["id"], "content": "The team standup is at 10:00", "agent_id": "agent-a",
        "scope": "agent"})
    assert get(daemon, done["new_id"])["scope"] == "agent"


def test_supersede_of_an_unknown_or_malformed_old_id_is_not_found(daemon: DaemonHandle) -> None:
    live = daemon.write("A live row to point new_id at", agent_id="agent-a")
    unknown = "mem_" + "0" * 26  # well-formed, never issued
    for old_id in (unknown, "not-an-id", "mem_short"):
        for rest in ({"content": "replacement text"}, {"new_id": live["id"]}):
            err = error_of(daemon, "memory.supersede", {"old_id": old_id, "agent_id": "agent-a", **rest})
            assert err.code == 1002, (old_id, rest, err.code, err.message)
    assert daemon.count_content("replacement text") == 0
    assert get(daemon, live["id"])["status"] == "active"


def test_supersede_with_both_new_id_and_content_is_invalid_params(daemon: DaemonHandle) -> None:
    old = daemon.write("Cache TTL is 60 seconds", agent_id="agent-a")
    other = daemon.write("Cache TTL is 120 seconds", agent_id="agent-a")

    err = error_of(daemon, "memory.supersede", {
        "old_id": old["id"], "new_id": other["id"], "content": "Cache TTL is 300 seconds",
        "agent_id": "agent-a"})
    assert err.code == -32602
    neither = error_of(daemon, "memory.supersede", {"old_id": old["id"], "agent_id": "agent-a"})
    assert neither.code == -32602

    assert get(daemon, old["id"])["status"] == "active"
    assert daemon.count_content("Cache TTL is 300 seconds") == 0


def test_supersede_with_new_id_of_an_existing_live_row_links_the_two(daemon: DaemonHandle) -> None:
    old = daemon.write("The API rate limit is 100 requests per minute", agent_id="agent-a")
    new = daemon.write("The API rate limit is 500 requests per minute", agent_id="agent-a")
    bystander = daemon.write("The API base path is /v2", agent_id="agent-a")

    done = daemon.call("memory.supersede", {"old_id": old["id"], "new_id": new["id"], "agent_id": "agent-a",
                                            "reason": "limit raised"})

    assert done == {"old_id": old["id"], "new_id": new["id"]}
    closed = get(daemon, old["id"], include=["links", "history"])
    kept = get(daemon, new["id"])
    assert closed["status"] == "superseded"
    assert closed["valid_to"] == kept["valid_from"]
    assert closed["retired_at"] is not None
    assert [(lk["kind"], lk["from"], lk["to"]) for lk in closed["links"]] == [
        ("supersedes", new["id"], old["id"])]
    assert closed["history"][-1]["action"] == "memory.supersede"
    assert kept["status"] == "active"
    assert get(daemon, bystander["id"])["status"] == "active"  # positive control: untouched
    assert daemon.scalar("SELECT count(*) FROM memories") == 3  # no row written for the new side


def test_search_as_of_before_a_supersede_returns_the_old_text_and_after_it_the_new(
        daemon: DaemonHandle) -> None:
    old = daemon.write("The staging database listens on port 5432", agent_id="agent-a")
    done = daemon.call("memory.supersede", {
        "old_id": old["id"], "content": "The staging database listens on port 6543", "agent_id": "agent-a"})
    new_id = done["new_id"]
    old_row, new_row = get(daemon, old["id"]), get(daemon, new_id)
    assert old_row["retired_at"] == new_row["recorded_at"]  # one instant closes one row and opens the other

    before = search_ids(daemon, "staging database port", agent_id="agent-a", as_of=old_row["recorded_at"])
    after = search_ids(daemon, "staging database port", agent_id="agent-a", as_of=new_row["recorded_at"])
    now = search_ids(daemon, "staging database port", agent_id="agent-a")

    assert before == [old["id"]]
    assert after == [new_id]
    assert now == [new_id]
    # The as_of answer carries the text the store held then.
    then = daemon.call("memory.search", {"query": "staging database port", "mode": "lexical",
                                         "agent_id": "agent-a", "as_of": old_row["recorded_at"]})
    assert then["results"][0]["content"] == "The staging database listens on port 5432"
