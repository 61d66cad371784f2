"""`memoryd mcp` driven by the MCP SDK's stdio client against a real `memoryd run`.

Each test spawns the bridge as an editor does (a subprocess speaking MCP on
stdin/stdout) and checks what the daemon stored or refused by reading it back
over the daemon's own socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from memoryd.client import Client
from tests.editors.mcp_harness import bridge, call, ok, text_of
from tests.integration.harness import DaemonHandle

TOOLS = {"remember", "recall", "get_memory", "update_memory", "forget", "memory_status"}
OWNER_FIELDS = {"agent_id", "user_id", "project", "session_id", "owner", "subject"}
ME = ("--agent-id", "agent-me", "--user-id", "user-me", "--project", "alpha")


def test_initialize_lists_six_tools_with_schemas_and_annotations(module_daemon: DaemonHandle) -> None:
    daemon = module_daemon
    async def body() -> None:
        async with bridge(daemon.socket, daemon.home, *ME) as session:
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(listed) == TOOLS
            required = {"remember": ["content"], "recall": ["query"], "get_memory": ["id"],
                        "update_memory": ["id", "content"], "forget": ["id"], "memory_status": None}
            for name, tool in listed.items():
                schema = tool.input_schema
                assert schema["type"] == "object" and schema["additionalProperties"] is False, name
                assert schema.get("required") == required[name], name
                # Identity is bound by the bridge's flags: no tool lets the model name an owner.
                assert not OWNER_FIELDS & set(schema["properties"]), name
                assert tool.output_schema and tool.output_schema["type"] == "object", name
                assert tool.description and len(tool.description) > 80, name
            read_only = {n for n, t in listed.items() if t.annotations and t.annotations.read_only_hint}
            destructive = {n for n, t in listed.items() if t.annotations and t.annotations.destructive_hint}
            assert read_only == {"recall", "get_memory", "memory_status"}
            assert destructive == {"forget"}
            # The scopes a tool may name are the bridge's --scopes, nothing wider.
            scope_enum = listed["remember"].input_schema["properties"]["scope"]["enum"]
            assert scope_enum == ["agent", "project", "user"]

    asyncio.run(body())


def test_remember_then_recall_finds_it_under_the_bound_identity(module_daemon: DaemonHandle) -> None:
    daemon = module_daemon
    content = "The billing service deploys with `make ship` from the ops/ directory"

    async def body() -> tuple[str, str]:
        async with bridge(daemon.socket, daemon.home, *ME, "--session-id", "sess-1") as session:
            written = ok(await call(session, "remember", {"content": content, "kind": "procedure"}))
            found = ok(await call(session, "recall", {"query": "how does billing deploy", "mode": "lexical"}))
            assert [hit["id"] for hit in found["results"]][:1] == [written["id"]]
            assert found["results"][0]["content"] == content
            assert found["results"][0]["scope"] == "project"
            return written["id"], written["scope"]

    memory_id, scope = asyncio.run(body())
    assert scope == "project"
    with Client(daemon.socket) as client:
        row = client.get(memory_id)
    # Every owner field comes from the flags; the model named none of them.
    assert (row.scope, row.project, row.agent_id, row.user_id, row.session_id, row.kind) == (
        "project", "alpha", "agent-me", "user-me", "sess-1", "procedure")


def test_two_bridges_with_different_projects_do_not_see_each_others_project_memories(
        module_daemon: DaemonHandle) -> None:
    daemon = module_daemon
    same_person = ("--agent-id", "agent-me", "--user-id", "user-me")

    async def body() -> None:
        async with bridge(daemon.socket, daemon.home, *same_person, "--project", "alpha") as alpha, \
                bridge(daemon.socket, daemon.home, *same_person, "--project", "beta") as beta:
            a = ok(await call(alpha, "remember", {"content": "alpha uses port 7001 for its queue worker"}))
            b = ok(await call(beta, "remember", {"content": "beta uses port 7002 for its queue worker"}))
            query = {"query": "port queue worker", "mode": "lexical"}
            seen_by_alpha = [h["id"] for h in ok(await call(alpha, "recall", query))["results"]]
            seen_by_beta = [h["id"] for h in ok(await call(beta, "recall", query))["results"]]
            assert seen_by_alpha == [a["id"]]  # its own (positive control), not beta's
            assert seen_by_beta == [b["id"]]
            refused = await call(beta, "get_memory", {"id": a["id"]})
            assert refused.is_error and "is visible" in text_of(refused)

    asyncio.run(body())


def test_a_bridge_cannot_read_change_or_forget_another_owners_rows(module_daemon: DaemonHandle) -> None:
    daemon = module_daemon
    # Rows the bridge's binding cannot see: another agent's, user's, project's, a session's, and
    # an org row (org is not in the default --scopes). Plus one row of its own as a control.
    foreign_params = [
        {"scope": "agent", "agent_id": "agent-other"},
        {"scope": "user", "user_id": "user-other"},
        {"scope": "project", "project": "secret-project"},
        {"scope": "session", "session_id": "sess-other"},
        {"scope": "org"},
    ]
    with Client(daemon.socket) as client:
        foreign = [client.write(f"confidential note {i}: the vault token rotates nightly", **params).id
                   for i, params in enumerate(foreign_params)]
        own = client.write("alpha's CI runs on the big runner", scope="project", project="alpha").id
        unknown = "mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB"

    async def body() -> None:
        async with bridge(daemon.socket, daemon.home, *ME) as session:
            answer_for_unknown = text_of(await call(session, "get_memory", {"id": unknown}))
            for memory_id in foreign:
                for tool, args in (("get_memory", {"id": memory_id}),
                                   ("update_memory", {"id": memory_id, "content": "overwritten by a bridge"}),
                                   ("forget", {"id": memory_id})):
                    result = await call(session, tool, args)
                    assert result.is_error, (tool, memory_id)
                    # Word for word the unknown-id answer: nothing tells the agent the id exists.
                    expected = answer_for_unknown.replace(unknown, memory_id)
                    assert text_of(result) == expected, (tool, memory_id)
            hits = ok(await call(session, "recall", {"query": "confidential vault token", "k": 100}))
            assert hits["results"] == []
            # No argument widens the binding: a scope outside --scopes, or an owner field, is refused.
            for args in ({"query": "vault", "scope": "org"}, {"query": "vault", "agent_id": "agent-other"}):
                refused = await call(session, "recall", args)
                assert refused.is_error, args
            # Positive control: its own project row is readable and changeable.
            mine = ok(await call(session, "get_memory", {"id": own}))
            assert mine["content"] == "alpha's CI runs on the big runner"
            moved = {"id": own, "content": "alpha's CI runs on runner-2", "reason": "moved"}
            assert ok(await call(session, "update_memory", moved))["old_id"] == own

    asyncio.run(body())
    with Client(daemon.socket) as client:
        for memory_id in foreign:
            row = client.get(memory_id)
            assert row.status == "active" and row.content is not None and "vault token" in row.content
        assert client.get(own).status == "superseded"


def test_daemon_down_answers_how_to_start_it_then_the_same_bridge_recovers(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    handle = start_daemon(start=False)

    async def body() -> None:
        async with bridge(handle.socket, handle.home, *ME) as session:
            down = await call(session, "memory_status")
            assert down.is_error
            message = text_of(down)
            assert "memoryd is not running" in message and str(handle.socket) in message
            assert "`memoryd run`" in message and "`memoryd service install`" in message
            down_again = await call(session, "remember", {"content": "written while the daemon is down"})
            assert down_again.is_error and "memoryd is not running" in text_of(down_again)
            await asyncio.to_thread(handle.start)
            status = ok(await call(session, "memory_status"))
            assert status["health"] == "healthy" and status["identity"]["project"] == "alpha"
            written = ok(await call(session, "remember", {"content": "written once the daemon is up"}))
            assert written["id"].startswith("mem_")

    asyncio.run(body())
    assert handle.count_content("written while the daemon is down") == 0
    assert handle.count_content("written once the daemon is up") == 1


def test_bad_arguments_are_tool_errors_naming_the_argument(module_daemon: DaemonHandle) -> None:
    daemon = module_daemon
    async def body() -> None:
        async with bridge(daemon.socket, daemon.home, *ME) as session:
            cases = [
                ("recall", {"query": "x", "k": 500}, "'k'"),
                ("recall", {"query": "x", "mode": "fuzzy"}, "'mode'"),
                ("remember", {}, "'content' is required"),
                ("remember", {"content": "x", "importance": 2}, "'importance'"),
                ("remember", {"content": "x", "metadata": {"_secret": 1}}, "'metadata'"),
                ("remember", {"content": "x", "owner": "someone"}, "'owner' is not an argument"),
                ("get_memory", {"id": 42}, "'id'"),
            ]
            for tool, args, expected in cases:
                result = await call(session, tool, args)
                assert result.is_error, (tool, args)
                assert expected in text_of(result), (tool, args, text_of(result))
                # No structured content on an error (it would not match the output schema);
                # the code and the argument ride in _meta.
                assert result.structured_content is None
                assert result.meta and result.meta["memoryd/error"]["code"] == -32602
            # A contract error from the daemon keeps its code and message.
            too_big = "é" * 40000  # 40,000 characters, 80,000 UTF-8 bytes: past the daemon's 65,536
            refused = await call(session, "remember", {"content": too_big})
            assert refused.is_error
            assert "[error 1001 too_large]" in text_of(refused) and "'content'" in text_of(refused)
            assert refused.meta and refused.meta["memoryd/error"] == {"code": 1001, "field": "content"}

    before = daemon.scalar("SELECT count(*) FROM memories")
    asyncio.run(body())
    assert daemon.scalar("SELECT count(*) FROM memories") == before  # no refused call wrote anything


def test_forget_erases_own_row_and_recall_stops_returning_it(module_daemon: DaemonHandle) -> None:
    daemon = module_daemon
    async def body() -> str:
        async with bridge(daemon.socket, daemon.home, *ME) as session:
            written = ok(await call(session, "remember", {"content": "my home address is 1 Elm St"}))
            gone = ok(await call(session, "forget", {"id": written["id"], "reason": "private"}))
            assert gone == {"id": written["id"], "request_id": gone["request_id"], "status": "deleting"}
            hits = ok(await call(session, "recall", {"query": "home address Elm", "mode": "lexical"}))
            assert hits["results"] == []
            again = await call(session, "remember", {"content": "my home address is 1 Elm St"})
            assert again.is_error and "1006" in text_of(again)  # the tombstone keeps it out
            return str(written["id"])

    memory_id = asyncio.run(body())
    with Client(daemon.socket) as client:
        assert client.get(memory_id).status in ("deleting", "forgotten")


def test_project_auto_names_the_git_top_level_of_the_working_dir(module_daemon: DaemonHandle,
                                                                 tmp_path: Path) -> None:
    daemon = module_daemon
    checkout = tmp_path / "webshop"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "src" / "cart").mkdir(parents=True)

    async def body() -> None:
        async with bridge(daemon.socket, daemon.home, "--project", "auto",
                          cwd=checkout / "src" / "cart") as session:
            status = ok(await call(session, "memory_status"))
            # The key is the top level's real path (no origin: docs/projects.md); the name is shown.
            assert status["identity"]["project"] == f"path:{checkout.resolve()}"
            assert status["identity"]["project_name"] == "webshop"

    asyncio.run(body())


@pytest.mark.slow  # loads the bundled embedding model in the daemon
def test_recall_finds_a_memory_by_meaning_once_it_is_embedded(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(embedder="bundled")

    async def body() -> None:
        async with bridge(daemon.socket, daemon.home, *ME) as session:
            target = ok(await call(session, "remember",
                                   {"content": "The staging database is PostgreSQL 15 running on host db1"}))
            ok(await call(session, "remember", {"content": "The web frontend is bundled with Vite"}))
            ok(await call(session, "remember", {"content": "Release notes are written every Friday"}))

            async def embedded() -> bool:
                memory = ok(await call(session, "get_memory", {"id": target["id"]}))
                return "embed" not in memory["pending"]

            for _ in range(600):  # a hang guard (the model loads once), not a speed claim
                if await embedded():
                    break
                await asyncio.sleep(0.2)
            found = ok(await call(session, "recall", {"query": "which database server does staging use",
                                                      "mode": "vector", "k": 3}))
            assert found["mode_used"] == "vector"
            assert found["results"][0]["id"] == target["id"]

    asyncio.run(body())
