"""memory.forget over the socket: deleting → forgotten, as_of, erasure from the file bytes, tombstones."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.harness import DaemonHandle, wait_until
from tests.lifecycle.helpers import QUIET, error_of, get, search_ids, wait_status

#: Why the file-bytes tests are SQLite's: PostgreSQL's erasure (text, lexemes, vector) is
#: checked in the database by tests/postgres_store/test_pg_forget.py.
FILE_BYTES_ONLY = pytest.mark.sqlite_only(
    "reads the SQLite file's bytes; PostgreSQL's is checked by tests/postgres_store/test_pg_forget.py")

FORGOTTEN_SHAPE_KEYS = {"id", "status", "content"}


def _marker(tag: str) -> str:
    """A lowercase token that occurs nowhere else (FTS5 stores tokens lowercased)."""
    return f"zq{tag}{secrets.token_hex(8)}"


def _file_bytes(db_path: Path) -> dict[str, bytes]:
    """The raw bytes of the database and its WAL (when present)."""
    out = {}
    for suffix in ("", "-wal"):
        path = Path(str(db_path) + suffix)
        if path.exists():
            out[path.name] = path.read_bytes()
    return out


def test_forgotten_row_reads_deleting_then_forgotten_and_never_returns_from_search(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    doomed = daemon.write("The walrus vault code is kept in the left drawer", agent_id="agent-a")
    kept = daemon.write("The walrus keeper feeds them at noon", agent_id="agent-a")
    recorded_at = get(daemon, doomed["id"])["recorded_at"]

    reply = daemon.call("memory.forget", {"id": doomed["id"], "reason": "secret"})
    right_after = get(daemon, doomed["id"])

    assert reply["matched"] == 1 and reply["request_id"]
    # The retention pass may already have erased it: either state is legal right after the reply.
    assert right_after["status"] in ("deleting", "forgotten")
    for as_of in (None, recorded_at):
        params = {"agent_id": "agent-a", **({"as_of": as_of} if as_of else {})}
        found = search_ids(daemon, "walrus", **params)
        assert doomed["id"] not in found
        if as_of is None:
            assert kept["id"] in found  # positive control in the same query

    forgotten = wait_status(daemon, doomed["id"], "forgotten")
    assert forgotten == {"id": doomed["id"], "status": "forgotten", "content": None}
    assert set(forgotten) == FORGOTTEN_SHAPE_KEYS
    for as_of in (None, recorded_at):
        params = {"agent_id": "agent-a", **({"as_of": as_of} if as_of else {})}
        assert doomed["id"] not in search_ids(daemon, "walrus vault drawer", **params)
    assert search_ids(daemon, "walrus keeper", agent_id="agent-a") == [kept["id"]]
    assert get(daemon, kept["id"])["status"] == "active"


def test_search_as_of_before_a_forget_still_finds_the_row_before_the_forget_and_not_after(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    """The positive half of the as_of check above: the row *was* findable as of then, until forgotten."""
    daemon = start_daemon(config=QUIET)
    doomed = daemon.write("The otter pantry holds smoked fish", agent_id="agent-a")
    recorded_at = get(daemon, doomed["id"])["recorded_at"]
    assert search_ids(daemon, "otter pantry", agent_id="agent-a", as_of=recorded_at) == [doomed["id"]]

    daemon.call("memory.forget", {"id": doomed["id"]})

    assert search_ids(daemon, "otter pantry", agent_id="agent-a", as_of=recorded_at) == []
    wait_status(daemon, doomed["id"], "forgotten")
    assert search_ids(daemon, "otter pantry", agent_id="agent-a", as_of=recorded_at) == []


@FILE_BYTES_ONLY
def test_forget_erases_the_text_from_the_database_file_bytes_after_shutdown(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    secret, control = _marker("secret"), _marker("control")
    doomed = daemon.write(f"The prod root password is {secret} do not share", agent_id="agent-a")
    daemon.write(f"The build cache lives under {control} on disk", agent_id="agent-a")
    for i in range(3):
        daemon.write(f"Filler memory number {i} about nothing in particular", agent_id="agent-a")

    daemon.call("memory.forget", {"id": doomed["id"], "reason": "leaked secret"})
    wait_status(daemon, doomed["id"], "forgotten")
    assert daemon.stop() == 0

    files = _file_bytes(daemon.db_path)
    assert "memoryd.db" in files
    for name, data in files.items():
        assert secret.encode() not in data, f"the forgotten text is still in {name}"
    # Positive control: text that was not forgotten is in the main file after the shutdown checkpoint.
    assert control.encode() in files["memoryd.db"]


@FILE_BYTES_ONLY
def test_forget_erases_the_text_from_the_database_file_bytes_while_the_daemon_runs(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    secret, control = _marker("secret"), _marker("control")
    doomed = daemon.write(f"The staging API token is {secret} rotate monthly", agent_id="agent-a")
    daemon.write(f"The staging API lives at {control} behind the VPN", agent_id="agent-a")

    daemon.call("memory.forget", {"id": doomed["id"]})
    wait_status(daemon, doomed["id"], "forgotten")

    def erased_everywhere() -> bool:
        # The retention pass checkpoints the WAL (TRUNCATE) after the erasure; a busy
        # checkpoint is retried by the next one, so poll rather than read once.
        return all(secret.encode() not in data for data in _file_bytes(daemon.db_path).values())

    wait_until(erased_everywhere, timeout_s=30, message="the forgotten text to leave the db and wal bytes")
    files = _file_bytes(daemon.db_path)
    assert control.encode() in files["memoryd.db"]  # checkpointed into the main file
    daemon.assert_alive()


def test_forgotten_value_is_refused_in_the_same_scope_and_owner_but_not_for_another_owner(
        daemon: DaemonHandle) -> None:
    doomed = daemon.write("The office wifi password is hunter2", agent_id="agent-a")
    daemon.call("memory.forget", {"id": doomed["id"]})

    # The tombstone is laid in the reply's transaction: refused before and after the erasure.
    refused = error_of(daemon, "memory.write",
                       {"content": "The office wifi password is hunter2", "agent_id": "agent-a"})
    assert refused.code == 1006
    wait_status(daemon, doomed["id"], "forgotten")
    again = error_of(daemon, "memory.write",
                     {"content": "  The office wifi password is hunter2 \n", "agent_id": "agent-a"})
    assert again.code == 1006  # identity is judged after trimming
    assert daemon.count_content("The office wifi password is hunter2") == 0

    # Positive control: another owner in the same scope may write the same value.
    other = daemon.write("The office wifi password is hunter2", agent_id="agent-b")
    assert get(daemon, other["id"])["status"] == "active"


def test_forget_without_tombstone_allows_writing_the_value_again(daemon: DaemonHandle) -> None:
    first = daemon.write("The lunch order is pad thai", agent_id="agent-a")
    daemon.call("memory.forget", {"id": first["id"], "tombstone": False})
    wait_status(daemon, first["id"], "forgotten")

    again = daemon.write("The lunch order is pad thai", agent_id="agent-a")

    assert again["id"] != first["id"]
    assert "duplicate_of" not in again
    assert get(daemon, again["id"])["content"] == "The lunch order is pad thai"
    assert daemon.scalar("SELECT count(*) FROM tombstones") == 0


def test_forget_by_user_subject_matches_that_users_rows_in_every_scope_and_no_one_elses(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    u1_rows = [
        daemon.write("u1 likes dark mode", scope="user", user_id="u1"),
        daemon.write("u1 asked agent-a to use pnpm", agent_id="agent-a", user_id="u1"),
        daemon.write("u1 works on the billing project", scope="project", project="billing", user_id="u1"),
    ]
    u2_rows = [
        daemon.write("u2 likes light mode", scope="user", user_id="u2"),
        daemon.write("u2 asked agent-a to use yarn", agent_id="agent-a", user_id="u2"),
    ]
    unowned = daemon.write("agent-a runs tests with pytest -q", agent_id="agent-a")

    # Forget by subject is an operator verb (PROTOCOL 1.1): the operator socket.
    reply = daemon.call("memory.forget", {"subject": {"user_id": "u1"}, "reason": "account deleted"},
                        admin=True)

    assert reply["matched"] == 3
    for row in u1_rows:
        assert get(daemon, row["id"])["status"] in ("deleting", "forgotten")
    for row in [*u2_rows, unowned]:
        assert get(daemon, row["id"])["status"] == "active"  # positive control
    for row in u1_rows:
        wait_status(daemon, row["id"], "forgotten")
    for row in u2_rows:
        assert get(daemon, row["id"])["status"] == "active"
    # Each matched row's value is tombstoned in its own scope and owner.
    refused = error_of(daemon, "memory.write",
                       {"content": "u1 likes dark mode", "scope": "user", "user_id": "u1"})
    assert refused.code == 1006
    assert daemon.write("u1 likes dark mode", scope="user", user_id="u2")["id"]
