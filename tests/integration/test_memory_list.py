"""memory.list and `memoryd list`: the scope-filtered listing, newest first, paged by cursor."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from memoryd.service.client import ClientError
from tests.integration.harness import DaemonHandle, run_cli

#: On both store backends (tests/conftest.py pytest_generate_tests).


def _contents(result: dict[str, object]) -> list[str]:
    rows = result["memories"]
    assert isinstance(rows, list)
    return [r["content"] for r in rows]


@pytest.fixture
def seeded(daemon: DaemonHandle) -> DaemonHandle:
    """Rows of several owners and scopes, written in a known order."""
    for content, params in [
        ("a1 first", {"agent_id": "a1"}),
        ("a2 private note", {"agent_id": "a2"}),
        ("u1 likes tabs", {"scope": "user", "user_id": "u1", "agent_id": "a1"}),
        ("a1 second", {"agent_id": "a1", "kind": "decision"}),
        ("p1 uses Postgres", {"scope": "project", "project": "p1"}),
        ("everyone sees this", {"scope": "org"}),
        ("a1 third", {"agent_id": "a1"}),
    ]:
        daemon.call("memory.write", {"content": content, **params})
    return daemon


def test_list_shows_the_readers_rows_and_org_rows_newest_first(seeded: DaemonHandle) -> None:
    assert _contents(seeded.call("memory.list", {"agent_id": "a1"})) == [
        "a1 third", "everyone sees this", "a1 second", "a1 first"]


def test_list_never_shows_another_owners_rows(seeded: DaemonHandle) -> None:
    seen = _contents(seeded.call("memory.list", {"agent_id": "a1", "limit": 1000}))
    assert "a2 private note" not in seen
    # A user row written by a1 belongs to u1: a1's agent key does not reach it.
    assert "u1 likes tabs" not in seen
    # Positive controls: the owners themselves see them.
    assert "a2 private note" in _contents(seeded.call("memory.list", {"agent_id": "a2"}))
    assert "u1 likes tabs" in _contents(seeded.call("memory.list", {"user_id": "u1"}))


def test_list_with_no_keys_shows_only_org_rows(seeded: DaemonHandle) -> None:
    assert _contents(seeded.call("memory.list", {})) == ["everyone sees this"]


def test_scope_filter_without_its_key_lists_nothing_and_says_why(seeded: DaemonHandle) -> None:
    result = seeded.call("memory.list", {"agent_id": "a1", "scope": "user"})
    assert result["memories"] == []
    assert result["notices"] == ["scope 'user' needs user_id: no user rows are visible without it"]
    assert _contents(seeded.call("memory.list", {"user_id": "u1", "scope": "user"})) == ["u1 likes tabs"]


def test_owner_fields_are_keys_not_narrowing_filters(seeded: DaemonHandle) -> None:
    # Two keys see both owners' rows (as in search); scope narrows to one of them.
    both = _contents(seeded.call("memory.list", {"agent_id": "a1", "project": "p1", "limit": 1000}))
    assert "p1 uses Postgres" in both and "a1 first" in both
    only = _contents(seeded.call("memory.list", {"agent_id": "a1", "project": "p1", "scope": "project"}))
    assert only == ["p1 uses Postgres"]


def test_kind_and_status_filters(seeded: DaemonHandle) -> None:
    assert _contents(seeded.call("memory.list", {"agent_id": "a1", "kind": "decision"})) == ["a1 second"]
    old = seeded.call("memory.list", {"agent_id": "a1", "scope": "agent"})["memories"][-1]
    seeded.call("memory.supersede", {"old_id": old["id"], "content": "a1 first, corrected",
                                     "agent_id": "a1"})
    active = _contents(seeded.call("memory.list", {"agent_id": "a1", "scope": "agent"}))
    assert active == ["a1 first, corrected", "a1 third", "a1 second"]
    assert _contents(seeded.call("memory.list", {"agent_id": "a1", "status": "superseded"})) == ["a1 first"]
    both = seeded.call("memory.list", {"agent_id": "a1", "scope": "agent",
                                       "status": ["active", "superseded"]})
    assert len(both["memories"]) == 4


def test_pages_follow_the_cursor_without_repeats_or_gaps(seeded: DaemonHandle) -> None:
    for i in range(7):
        seeded.call("memory.write", {"content": f"a1 bulk {i}", "agent_id": "a1"})
    whole = _contents(seeded.call("memory.list", {"agent_id": "a1", "limit": 1000}))
    assert len(whole) == 11
    pages, cursor = [], None
    while True:
        params: dict[str, object] = {"agent_id": "a1", "limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = seeded.call("memory.list", params)
        pages.append(_contents(page))
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [len(p) for p in pages] == [3, 3, 3, 2]
    assert [c for p in pages for c in p] == whole


def test_a_cursor_never_widens_what_a_reader_sees(seeded: DaemonHandle) -> None:
    page = seeded.call("memory.list", {"agent_id": "a1", "limit": 1})
    # The same cursor presented with another agent's key lists that agent's rows only.
    other = seeded.call("memory.list", {"agent_id": "a2", "cursor": page["next_cursor"]})
    assert "a1 first" not in _contents(other) and "a1 second" not in _contents(other)


@pytest.mark.parametrize(("params", "field"), [
    ({"cursor": "bm90IGEgY3Vyc29y"}, "cursor"),
    ({"cursor": "!!"}, "cursor"),
    ({"limit": 0}, "limit"),
    ({"limit": 1001}, "limit"),
    ({"status": "gone"}, "status"),
    ({"status": []}, "status"),
    ({"scope": "team"}, "scope"),
    ({"agent": "a1"}, "agent"),
    ({"query": "x"}, "query"),
])
def test_bad_list_params_are_refused_naming_the_field(daemon: DaemonHandle, params: dict[str, object],
                                                      field: str) -> None:
    with pytest.raises(ClientError) as err:
        daemon.call("memory.list", {"agent_id": "a1", **params})
    assert (err.value.code, err.value.data["field"]) == (-32602, field)


def _forged(*position: object) -> str:
    import base64
    raw = json.dumps(list(position), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(("method", "cursor"), [
    ("memory.list", _forged("list", "2026-01-01T00:00:00Z", 2**63)),
    ("memory.list", _forged("list", "2026-01-01T00:00:00Z", -2**63 - 1)),
    ("memory.list", _forged("list", "2026-01-01T00:00:00Z", 10**30)),
    ("memory.list", _forged("list", "x" * 400, 5)),
    ("memory.export", _forged("export", 2**63)),
    ("memory.export", _forged("export", -1)),
])
def test_a_forged_cursor_past_the_id_range_is_refused_not_an_internal_error(
        daemon: DaemonHandle, method: str, cursor: str) -> None:
    """A cursor is opaque, but a client can forge one: a seq no store column holds (SQLite's
    integers end at 2**63 - 1, and so do PostgreSQL's bigints) was an internal error."""
    params = {"agent_id": "a1"} if method == "memory.list" else {}
    with pytest.raises(ClientError) as err:
        daemon.call(method, {**params, "cursor": cursor}, admin=method == "memory.export")
    assert (err.value.code, err.value.data["field"]) == (-32602, "cursor")


def test_an_export_cursor_is_not_a_list_cursor(seeded: DaemonHandle) -> None:
    export = seeded.call("memory.export", {"limit": 1}, admin=True)
    with pytest.raises(ClientError) as err:
        seeded.call("memory.list", {"agent_id": "a1", "cursor": export["next_cursor"]})
    assert (err.value.code, err.value.data["field"]) == (-32602, "cursor")


def test_cli_list_prints_json_and_follows_every_page(
        seeded: DaemonHandle, start_daemon: Callable[..., DaemonHandle]) -> None:
    env = {**seeded.env, "MEMORYD_SOCKET": str(seeded.socket)}
    one = run_cli(["list", "--agent-id", "a1", "--limit", "2", "--json"], env)
    assert one.returncode == 0, one.stderr
    first = json.loads(one.stdout)
    assert _contents(first) == ["a1 third", "everyone sees this"] and first["next_cursor"]
    every = run_cli(["list", "--agent-id", "a1", "--limit", "2", "--all", "--json"], env)
    assert every.returncode == 0, every.stderr
    assert _contents(json.loads(every.stdout)) == ["a1 third", "everyone sees this", "a1 second", "a1 first"]
    table = run_cli(["list", "--agent-id", "a1"], env)
    assert table.returncode == 0 and "a1 second" in table.stdout and "a2 private" not in table.stdout


def test_cli_list_says_the_daemon_is_not_running(daemon: DaemonHandle) -> None:
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.home / "nothing" / "memoryd.sock")}
    out = run_cli(["list", "--agent-id", "a1"], env)
    assert out.returncode == 3
    assert "memoryd is not running" in out.stderr
