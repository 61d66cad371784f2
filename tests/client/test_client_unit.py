"""The client library against a scripted socket (tests/client/fake_daemon.py).

What only a script can stage: a daemon that closes the connection after
reading a request, or never answers. test_client_daemon.py runs the same
paths against a real ``memoryd run``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.client import (
    ERROR_CLASSES,
    AsyncClient,
    Client,
    ClientError,
    Conflict,
    Disconnected,
    Forbidden,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    NotRunning,
    Overloaded,
    ParseError,
    SearchResult,
    StoreUnavailable,
    Timeout,
    Tombstoned,
    TooLarge,
    WriteResult,
    error_from_answer,
    retry_safe,
    socket_path,
)
from tests.client.fake_daemon import FakeDaemon, error, result

WRITE_ANSWER = {"id": "mem_01", "recorded_at": "2026-01-01T00:00:00.000000Z", "queued": ["embed"],
                "notices": []}


@pytest.fixture
def fake_factory() -> Iterator[Any]:
    made: list[FakeDaemon] = []

    def make(respond: Any) -> FakeDaemon:
        fake = FakeDaemon(respond)
        made.append(fake)
        return fake

    yield make
    for fake in made:
        fake.close()


# -- error classes ---------------------------------------------------------------------------
@pytest.mark.parametrize(("code", "cls"), [
    (-32700, ParseError), (-32600, InvalidRequest), (-32601, MethodNotFound), (-32602, InvalidParams),
    (1001, TooLarge), (1002, NotFound), (1003, StoreUnavailable), (1004, Overloaded), (1005, Forbidden),
    (1006, Tombstoned), (1007, Conflict),
])
def test_each_contract_code_raises_its_own_class(fake_factory: Any, code: int, cls: type) -> None:
    fake = fake_factory(lambda msg, _: error(msg, code, "it went wrong", {"field": "content"}))
    with Client(fake.path) as client, pytest.raises(cls) as caught:
        client.call("memory.write", {"content": "x"})
    assert isinstance(caught.value, ClientError)
    assert (caught.value.code, caught.value.message, caught.value.field) == (code, "it went wrong", "content")
    assert ERROR_CLASSES[code] is cls


def test_an_unknown_code_is_a_plain_client_error() -> None:
    err = error_from_answer({"code": 4242, "message": "new in a later protocol"})
    assert type(err) is ClientError
    assert err.code == 4242 and err.data == {}


# -- results keep what the client does not name ------------------------------------------------------
def test_results_keep_unknown_fields_in_raw(fake_factory: Any) -> None:
    answer = {"results": [{"id": "mem_1", "content": "a", "score": 0.5, "novel": 7}], "mode_used": "hybrid",
              "notices": ["n"], "future_field": {"x": 1}}
    fake = fake_factory(lambda msg, _: result(msg, answer))
    with Client(fake.path) as client:
        found = client.search("q", agent_id="a", k=3)
    assert isinstance(found, SearchResult)
    assert found.results[0].score == 0.5 and found.results[0].raw["novel"] == 7
    assert found.raw["future_field"] == {"x": 1}
    assert fake.received[0][1]["params"] == {"query": "q", "agent_id": "a", "k": 3}


def test_typed_write_sends_only_the_params_given(fake_factory: Any) -> None:
    fake = fake_factory(lambda msg, _: result(msg, WRITE_ANSWER))
    with Client(fake.path) as client:
        written = client.write("hello", project="p", scope="project", future_param=1)
    assert isinstance(written, WriteResult) and written.id == "mem_01" and not written.duplicate
    assert fake.received[0][1]["params"] == {"content": "hello", "project": "p", "scope": "project",
                                             "future_param": 1}


# -- reconnect --------------------------------------------------------------------------------------
def test_a_read_on_a_connection_the_daemon_closed_reconnects_once(fake_factory: Any) -> None:
    fake = fake_factory(lambda msg, _: result(msg, {"version": "x", "protocol": 1, "pid": 1}))
    with Client(fake.path) as client:
        client.ping()
        fake.drop_connections()
        assert client.ping().protocol == 1
    assert fake.connections == 2


def test_an_unanswered_read_is_sent_again_on_a_new_connection(fake_factory: Any) -> None:
    # The first connection dies after reading the request; a read is safe to send twice.
    fake = fake_factory(lambda msg, conn: None if conn == 1 and msg["method"] == "memory.get"
                        else result(msg, {"id": "mem_1", "status": "active"}))
    with Client(fake.path) as client:
        client.ping()
        assert client.get("mem_1").status == "active"
    assert fake.methods() == ["daemon.ping", "memory.get", "memory.get"]


def test_an_unanswered_write_without_a_key_is_not_sent_again(fake_factory: Any) -> None:
    fake = fake_factory(lambda msg, conn: None if conn == 1 and msg["method"] == "memory.write"
                        else result(msg, WRITE_ANSWER if msg["method"] == "memory.write" else {}))
    with Client(fake.path) as client:
        client.ping()
        with pytest.raises(Disconnected) as caught:
            client.write("remember me", agent_id="a")
    assert caught.value.sent is True
    assert fake.methods() == ["daemon.ping", "memory.write"]  # the daemon may have done it: not twice


def test_an_unanswered_write_with_a_key_is_sent_again(fake_factory: Any) -> None:
    fake = fake_factory(lambda msg, conn: None if conn == 1 and msg["method"] == "memory.write"
                        else result(msg, WRITE_ANSWER if msg["method"] == "memory.write" else {}))
    with Client(fake.path) as client:
        client.ping()
        assert client.write("remember me", agent_id="a", idempotency_key="k1").id == "mem_01"
    assert fake.methods() == ["daemon.ping", "memory.write", "memory.write"]


def test_retry_policy_by_method() -> None:
    assert retry_safe("memory.search", {}) and retry_safe("daemon.status", {})
    assert retry_safe("memory.write", {"idempotency_key": "k"})
    assert not retry_safe("memory.write", {"content": "x"})
    assert retry_safe("memory.write_many", {"items": [{"idempotency_key": "a"}, {"idempotency_key": "b"}]})
    assert not retry_safe("memory.write_many", {"items": [{"idempotency_key": "a"}, {"content": "b"}]})
    assert not retry_safe("memory.supersede", {"old_id": "m"})
    assert not retry_safe("memory.forget", {"id": "m"})


# -- timeouts and a missing daemon ---------------------------------------------------------------------
def test_an_unanswered_call_times_out_and_the_next_call_uses_a_new_connection(fake_factory: Any) -> None:
    fake = fake_factory(lambda msg, conn: "silent" if conn == 1 else result(msg, {"protocol": 1}))
    with Client(fake.path, timeout_s=0.3) as client:
        with pytest.raises(Timeout) as caught:
            client.ping()
        assert "daemon.ping" in str(caught.value) and isinstance(caught.value, TimeoutError)
        assert client.ping().protocol == 1
    assert fake.connections == 2


def test_no_socket_is_not_running_with_the_start_hint(tmp_path: Path) -> None:
    path = tmp_path / "nothing.sock"
    with pytest.raises(NotRunning) as caught:
        Client(path)
    assert str(caught.value) == (f"memoryd is not running (no socket at {path}); start it with "
                                 "`memoryd run` or `memoryd service install`")


def test_connect_false_defers_the_missing_daemon_to_the_first_call(tmp_path: Path) -> None:
    client = Client(tmp_path / "nothing.sock", connect=False)
    with pytest.raises(NotRunning):
        client.ping()


# -- socket discovery ---------------------------------------------------------------------------------
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("MEMORYD_SOCKET", "MEMORYD_ADMIN_SOCKET", "MEMORYD_CONFIG", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_discovery_follows_protocol_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _clean_env(monkeypatch, tmp_path)
    assert socket_path() == tmp_path / "state" / "memoryd" / "memoryd.sock"
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert socket_path() == Path("/run/user/1000/memoryd/memoryd.sock")
    assert socket_path(admin=True) == Path("/run/user/1000/memoryd-admin/memoryd-admin.sock")
    monkeypatch.setenv("MEMORYD_SOCKET", "/tmp/x/s/memoryd.sock")
    assert socket_path() == Path("/tmp/x/s/memoryd.sock")
    assert socket_path(admin=True) == Path("/tmp/x/memoryd-admin/memoryd-admin.sock")
    assert socket_path("/tmp/flag/s/a.sock") == Path("/tmp/flag/s/a.sock")
    monkeypatch.setenv("MEMORYD_ADMIN_SOCKET", "/tmp/adm/op.sock")
    assert socket_path(admin=True) == Path("/tmp/adm/op.sock")


def test_discovery_reads_the_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _clean_env(monkeypatch, tmp_path)
    config = tmp_path / "memoryd.toml"
    config.write_text('socket = "/tmp/from-file/s/m.sock"\n', encoding="utf-8")
    assert socket_path(config=config) == Path("/tmp/from-file/s/m.sock")
    monkeypatch.setenv("MEMORYD_SOCKET", "/tmp/env/s/m.sock")  # the environment wins over the file
    assert socket_path(config=config) == Path("/tmp/env/s/m.sock")


# -- the asyncio client ---------------------------------------------------------------------------------
def test_async_client_pipelines_and_reconnects(fake_factory: Any) -> None:
    fake = fake_factory(lambda msg, conn: None if conn == 1 and msg["method"] == "memory.get"
                        else result(msg, {"id": msg["params"].get("id", ""), "status": "active"}))

    async def main() -> list[str]:
        async with AsyncClient(fake.path) as client:
            await client.ping()
            first = await client.get("mem_a")  # connection 1 dies: a read is sent again
            rest = await asyncio.gather(*(client.get(f"mem_{i}") for i in range(5)))
            return [first.id, *(m.id for m in rest)]

    assert asyncio.run(main()) == ["mem_a", "mem_0", "mem_1", "mem_2", "mem_3", "mem_4"]
    assert fake.connections == 2


def test_async_client_does_not_resend_an_unkeyed_write(fake_factory: Any) -> None:
    fake = fake_factory(lambda msg, conn: None if msg["method"] == "memory.write" else result(msg, {}))

    async def main() -> None:
        async with AsyncClient(fake.path) as client:
            await client.ping()
            await client.write("x", agent_id="a")

    with pytest.raises(Disconnected):
        asyncio.run(main())
    assert fake.methods().count("memory.write") == 1


def test_async_client_times_out_and_keeps_the_connection(fake_factory: Any) -> None:
    fake = fake_factory(lambda msg, _: "silent" if msg["method"] == "daemon.status" else result(msg, {}))

    async def main() -> None:
        async with AsyncClient(fake.path, timeout_s=0.3) as client:
            with pytest.raises(Timeout):
                await client.status()
            await client.ping()

    asyncio.run(main())
    assert fake.connections == 1
