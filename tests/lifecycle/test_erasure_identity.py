"""After a forget, neither the text nor the owner's identifier is anywhere in the store.

Each test writes through a real daemon's socket, forgets, waits for the retention
pass, then searches the whole store: on SQLite every file of the data directory
(the database and its WAL), on PostgreSQL every table read whole as text. Issue 20
item 4: copies of any length, entity names given by the forgotten memory, and the
subject's identifier in audit events, tombstones and forget requests.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from memoryd.store import entities as ents
from tests.integration.harness import DaemonHandle, wait_until
from tests.lifecycle.helpers import QUIET, engine_on, error_of, get, store_holding, wait_status


def _marker(tag: str) -> str:
    return f"zq{tag}{secrets.token_hex(8)}"


def _gone(daemon: DaemonHandle, needle: str) -> None:
    wait_until(lambda: not store_holding(daemon, needle), timeout_s=30,
               message=f"{needle!r} to leave the store")


def test_forget_by_id_erases_loose_copies_of_any_length(start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    secret, control = _marker("s"), _marker("c")
    text = f"The deploy key for prod is {secret} in the vault"
    doomed = daemon.write(text, agent_id="agent-a")["id"]
    # Equal after loose normalisation, far more than 16 characters longer than the original.
    copies = [daemon.write(text + "!" * 40, agent_id="agent-a")["id"],
              daemon.write("the  deploy   key for PROD is " + secret + " in the vault" + " ." * 30,
                           agent_id="agent-a")["id"]]
    kept = daemon.write(f"The deploy key for staging is {control}", agent_id="agent-a")["id"]

    reply = daemon.call("memory.forget", {"id": doomed})

    assert reply["matched"] == 3
    for memory_id in (doomed, *copies):
        wait_status(daemon, memory_id, "forgotten")
    assert daemon.call("memory.search", {"query": secret, "agent_id": "agent-a", "mode": "lexical"})[
        "results"] == []
    # The word index keeps a word's unique tail after the prefix it shares ("zq...").
    _gone(daemon, secret[-12:])
    assert get(daemon, kept)["status"] == "active"
    assert store_holding(daemon, control[-12:])  # positive control: the kept text is found
    assert daemon.stop() == 0
    assert not store_holding(daemon, secret[-12:])


def test_forget_rebuilds_an_entity_named_by_the_forgotten_memory(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    name = _marker("n")
    doomed = daemon.write(f"{name}-Gateway fronts the payments api", agent_id="agent-a")["id"]
    other = daemon.write("the gateway restarts nightly", agent_id="agent-a")["id"]
    stamp = "2026-05-01T12:00:00.000000Z"
    with engine_on(daemon) as engine, engine.begin() as conn:
        # As the extract pass leaves them: the forgotten memory named the entity; the other
        # memory's surface reached it by embedding similarity and became an alias.
        entity = ents.create(conn, "agent", "agent-a", f"{name}-Gateway", f"{name}-gateway", "service",
                             b"\x01" * 16, stamp)
        ents.mention(conn, entity, doomed, f"{name}-Gateway")
        ents.add_alias(conn, entity, "gateway")
        ents.mention(conn, entity, other, "gateway")
    assert store_holding(daemon, name)  # positive control

    daemon.call("memory.forget", {"id": doomed})
    wait_status(daemon, doomed, "forgotten")

    _gone(daemon, name)
    rows = daemon.query("SELECT name, norm, vector FROM entities")
    assert [tuple(r) for r in rows] == [("gateway", "gateway", None)]
    assert daemon.query("SELECT memory_id FROM entity_mentions") == [(other,)]
    assert daemon.stop() == 0
    assert not store_holding(daemon, name)


def test_forget_by_subject_keeps_the_identifier_nowhere_and_its_tombstones_still_refuse(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    email, secret, control = f"{_marker('m')}@example.org", _marker("s"), _marker("c")
    text = f"my locker code is {secret}"
    rows = [daemon.write(text, scope="user", user_id=email)["id"],
            daemon.call("memory.write", {"content": f"{secret} is also my bike lock", "scope": "user",
                                         "user_id": email, "idempotency_key": "k1"})["id"],
            daemon.write(f"agent note for {secret}", agent_id="agent-z", user_id=email)["id"]]
    kept = daemon.write(f"my locker is number {control}", scope="user", user_id="kept@example.org")["id"]
    assert store_holding(daemon, email)  # positive control: the audit log, the rows, the key

    reply = daemon.call("memory.forget", {"subject": {"user_id": email}, "reason": "erasure request"},
                        admin=True)

    assert reply["matched"] == 3
    for memory_id in rows:
        wait_status(daemon, memory_id, "forgotten")
    _gone(daemon, email)
    _gone(daemon, secret[-12:])
    # The tombstone holds the owner only as a keyed hash, and still refuses that owner.
    refused = error_of(daemon, "memory.write", {"content": text, "scope": "user", "user_id": email})
    assert refused.code == 1006
    # ... and only that owner (positive control).
    assert daemon.write(text, scope="user", user_id="someone@example.org")["id"]
    verified = daemon.call("audit.verify", {}, admin=True)
    assert verified["ok"] is True and verified["events"] > 0
    assert get(daemon, kept)["status"] == "active"
    assert store_holding(daemon, "kept@example.org")  # another subject's rows keep their owner
    assert daemon.stop() == 0
    assert not store_holding(daemon, email)


def test_tombstone_laid_before_a_restart_refuses_the_owner_after_it(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    # The keyed hash's secret lives in the store: a restarted daemon hashes the owner the same way.
    daemon = start_daemon(config=QUIET)
    doomed = daemon.write("the alarm code is 0000", scope="user", user_id="r@example.org")["id"]
    daemon.call("memory.forget", {"id": doomed})
    wait_status(daemon, doomed, "forgotten")
    assert daemon.stop() == 0
    daemon.start()
    refused = error_of(daemon, "memory.write", {"content": "the alarm code is 0000", "scope": "user",
                                                "user_id": "r@example.org"})
    assert refused.code == 1006
