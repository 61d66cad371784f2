"""memoryd.client against a real `memoryd run`: every typed method, the errors, reconnects.

The scripted unit tests (test_client_unit.py) stage what a real daemon will
not do on demand; these show the same paths on the real socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from memoryd.client import (
    AsyncClient,
    Client,
    Conflict,
    Forbidden,
    ForgetResult,
    InvalidParams,
    Memory,
    MethodNotFound,
    NotFound,
    NotRunning,
    Ping,
    SearchResult,
    Status,
    SupersedeResult,
    Tombstoned,
    TooLarge,
    WriteResult,
)
from tests.integration.harness import DaemonHandle


def test_every_typed_method_round_trips(module_daemon: DaemonHandle) -> None:
    with Client(module_daemon.socket) as md:
        pong = md.ping()
        assert isinstance(pong, Ping) and pong.protocol == 1 and pong.pid == module_daemon.proc.pid  # type: ignore[union-attr]
        written = md.write("client lib: the cache TTL is 300 s", agent_id="client-a", kind="fact",
                           importance=0.8, metadata={"source": "test"})
        assert isinstance(written, WriteResult) and written.id.startswith("mem_") and not written.duplicate
        again = md.write("client lib: the cache TTL is 300 s", agent_id="client-a", kind="fact")
        assert again.duplicate and again.id == written.id
        many = md.write_many([{"content": "client lib: queue A", "agent_id": "client-a"},
                              {"content": "client lib: queue B", "agent_id": "client-a"}])
        assert [type(r) for r in many] == [WriteResult, WriteResult] and many[0].id != many[1].id

        got = md.get(written.id, include=["history"])
        assert isinstance(got, Memory)
        assert (got.content, got.agent_id, got.kind, got.importance, got.metadata) == (
            "client lib: the cache TTL is 300 s", "client-a", "fact", 0.8, {"source": "test"})
        assert got.history and got.history[0]["action"] == "memory.write"
        assert got.owner == "client-a"

        found = md.search("cache TTL", agent_id="client-a", mode="lexical", k=5)
        assert isinstance(found, SearchResult) and found.mode_used == "lexical"
        assert [hit.id for hit in found.results] == [written.id]
        assert md.search("cache TTL", agent_id="client-b", mode="lexical").results == []  # scope keys

        replaced = md.supersede(written.id, content="client lib: the cache TTL is 600 s", reason="raised",
                                agent_id="client-a")
        assert isinstance(replaced, SupersedeResult) and replaced.old_id == written.id
        assert md.get(written.id).status == "superseded" and md.get(replaced.new_id).status == "active"

        gone = md.forget(many[0].id, reason="test")
        assert isinstance(gone, ForgetResult) and gone.matched == 1 and gone.request_id.startswith("fgt_")

        status = md.status()
        assert isinstance(status, Status) and status.healthy and status.memories.get("active", 0) >= 2
        assert status.admin_socket == str(module_daemon.admin_socket)
        assert status.raw["queues"] == status.queues


@pytest.mark.parametrize(("call", "error", "field"), [
    (lambda md: md.get("mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB"), NotFound, "id"),
    (lambda md: md.search("x", k=500), InvalidParams, "k"),
    (lambda md: md.write("x", scope="agent"), InvalidParams, "agent_id"),
    (lambda md: md.write("é" * 40000, agent_id="a"), TooLarge, "content"),
    (lambda md: md.call("review.list"), MethodNotFound, None),
])
def test_each_error_answer_raises_its_class_with_the_field(module_daemon: DaemonHandle, call: Callable,
                                                          error: type, field: str | None) -> None:
    with Client(module_daemon.socket) as md, pytest.raises(error) as caught:
        call(md)
    assert caught.value.field == field


def test_owner_tombstone_and_race_errors(module_daemon: DaemonHandle) -> None:
    with Client(module_daemon.socket) as md:
        row = md.write("client lib: owner-bound note", agent_id="owner-1")
        with pytest.raises(Forbidden):
            md.supersede(row.id, content="taken over", agent_id="owner-2")
        md.supersede(row.id, content="client lib: owner-bound note v2", agent_id="owner-1")
        with pytest.raises(Conflict):  # the old row is no longer live
            md.supersede(row.id, content="client lib: owner-bound note v3", agent_id="owner-1")
        doomed = md.write("client lib: forget me", agent_id="owner-1")
        md.forget(doomed.id)
        with pytest.raises(Tombstoned):
            md.write("client lib: forget me", agent_id="owner-1")


def test_operator_socket_is_reached_with_admin(module_daemon: DaemonHandle) -> None:
    with Client(module_daemon.socket, admin=True) as op:
        assert op.path == module_daemon.admin_socket
        assert "proposals" in op.call("review.list", {"status": "open"})


def test_a_client_survives_a_daemon_restart(start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon()
    md = Client(daemon.socket)
    first = md.write("client lib: before the restart", agent_id="a", idempotency_key="k-restart")
    daemon.stop()
    with pytest.raises(NotRunning):
        md.ping()
    daemon.start()
    # The same client object: a read and a keyed write go through on a new connection.
    assert md.get(first.id).content == "client lib: before the restart"
    replay = md.write("client lib: before the restart", agent_id="a", idempotency_key="k-restart")
    assert replay.id == first.id and replay.recorded_at == first.recorded_at
    md.close()


def test_async_client_pipelines_on_one_connection(module_daemon: DaemonHandle) -> None:
    async def body() -> list[str]:
        async with AsyncClient(module_daemon.socket) as md:
            written = await asyncio.gather(*(md.write(f"async client note {i}", agent_id="async-a")
                                             for i in range(20)))
            got = await asyncio.gather(*(md.get(w.id) for w in written))
            assert len({w.id for w in written}) == 20
            return [m.content or "" for m in got]

    assert asyncio.run(body()) == [f"async client note {i}" for i in range(20)]
