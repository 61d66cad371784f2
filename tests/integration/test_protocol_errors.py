"""Every framing, method and parameter error of PROTOCOL.md, reached over the real socket.

Each test sends one bad input, checks the error code (and ``data.field`` where
one parameter is at fault), checks nothing was written, and then shows the
daemon still answers — on the same connection where the protocol says it stays
usable, and on a new one. The whole module shares one daemon: it must shrug off
every one of these inputs in turn, so writes are judged by content or by
before/after counts.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from memoryd.service.client import ClientError
from memoryd.store.ids import new_memory_id
from tests.integration.harness import DaemonHandle, RawConnection


@pytest.fixture
def daemon(module_daemon: DaemonHandle) -> DaemonHandle:
    return module_daemon


def _stored(daemon: DaemonHandle) -> tuple[int, int]:
    """(memory rows, write audit events): a refused request changes neither."""
    return (daemon.scalar("SELECT count(*) FROM memories"),
            daemon.scalar("SELECT count(*) FROM audit_events WHERE action = 'memory.write'"))


def _error(daemon: DaemonHandle, method: str, params: dict[str, Any], *, admin: bool = False) -> ClientError:
    with pytest.raises(ClientError) as info:
        daemon.call(method, params, admin=admin)
    return info.value


# -- -32700 / -32600: frames that are not JSON-RPC requests -------------------------------------

GARBAGE = [
    pytest.param(b"this is {not json", id="text"),
    pytest.param(b"\xff\xfe{}", id="not-utf8"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": "daemon.ping"', id="truncated"),
    # Python's json module would accept these; they are not JSON, and echoing them breaks clients.
    pytest.param(b'{"jsonrpc": "2.0", "id": NaN, "method": "daemon.ping"}', id="NaN"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 1e400, "method": "daemon.ping"}', id="overflowing-number"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 3, "method": "memory.write", "params": {"content": "inf",'
                 b' "agent_id": "agent-a", "metadata": {"x": -Infinity}}}', id="Infinity"),
    pytest.param(b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "daemon.ping"}',
                 id="integer-over-the-digit-limit"),
    # Nesting deeper than the decoder's recursion limit, well inside max_frame_bytes.
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="deeply-nested"),
]


@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_line_is_answered_with_parse_error_and_connection_stays_usable(
        daemon: DaemonHandle, garbage: bytes) -> None:
    before = _stored(daemon)
    with RawConnection(daemon.socket, timeout_s=15) as conn:
        conn.send(garbage + b"\n")
        reply = conn.read()
        assert reply["id"] is None
        assert reply["error"]["code"] == -32700
        conn.request("daemon.ping", req_id=2)
        assert conn.read()["id"] == 2
    assert _stored(daemon) == before
    daemon.assert_alive()


def test_json_array_batch_is_answered_with_invalid_request(daemon: DaemonHandle) -> None:
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "daemon.ping"},
             {"jsonrpc": "2.0", "id": 2, "method": "daemon.ping"}]
    with RawConnection(daemon.socket) as conn:
        conn.send_json(batch)
        reply = conn.read()
        assert reply["id"] is None
        assert reply["error"]["code"] == -32600
        # The batch's members were not run: the next line on the wire answers the next request.
        conn.request("daemon.ping", req_id="after")
        assert conn.read()["id"] == "after"
    daemon.assert_alive()


def test_object_without_jsonrpc_member_is_invalid_request_echoing_its_id(daemon: DaemonHandle) -> None:
    with RawConnection(daemon.socket) as conn:
        conn.send_json({"id": 41, "method": "memory.write",
                        "params": {"content": "no jsonrpc member", "agent_id": "agent-a"}})
        reply = conn.read()
        assert reply["id"] == 41
        assert reply["error"]["code"] == -32600
        conn.request("daemon.ping", req_id=42)
        assert conn.read()["id"] == 42
    assert daemon.count_content("no jsonrpc member") == 0
    daemon.assert_alive()


# -- -32601: methods that do not exist on this socket --------------------------------------------

def test_unknown_method_is_answered_with_method_not_found(daemon: DaemonHandle) -> None:
    err = _error(daemon, "memory.teleport", {})
    assert err.code == -32601
    daemon.assert_alive()


@pytest.mark.parametrize(("method", "result_key"), [("review.list", "proposals"), ("queue.list", "jobs")])
def test_operator_method_on_agent_socket_is_method_not_found(daemon: DaemonHandle, method: str,
                                                             result_key: str) -> None:
    err = _error(daemon, method, {})
    assert err.code == -32601
    # Positive control: the same call on the operator socket is served.
    assert result_key in daemon.call(method, {}, admin=True)
    daemon.assert_alive()


# -- -32602: bad parameters, each naming its field -------------------------------------------------

BAD_WRITES = [
    pytest.param({"agent_id": "agent-a"}, "content", id="missing-content"),
    pytest.param({"content": 42, "agent_id": "agent-a"}, "content", id="content-not-a-string"),
    pytest.param({"content": "{c}", "scope": "galaxy", "agent_id": "agent-a"}, "scope", id="bad-scope"),
    pytest.param({"content": "{c}"}, "agent_id", id="agent-scope-without-agent_id"),
    pytest.param({"content": "{c}", "scope": "user", "agent_id": "agent-a"}, "user_id",
                 id="user-scope-without-user_id"),
    pytest.param({"content": "{c}", "scope": "project", "user_id": "u1"}, "project",
                 id="project-scope-without-project"),
    pytest.param({"content": "{c}", "scope": "session", "user_id": "u1"}, "session_id",
                 id="session-scope-without-session_id"),
    pytest.param({"content": "{c}", "agent_id": "agent-a", "importance": 1.5}, "importance",
                 id="importance-above-1"),
    pytest.param({"content": "{c}", "agent_id": "agent-a", "importance": -0.1}, "importance",
                 id="importance-below-0"),
    pytest.param({"content": "{c}", "agent_id": "agent-a", "metadata": {"_internal": 1}}, "metadata",
                 id="metadata-key-with-underscore"),
]


@pytest.mark.parametrize(("params", "field"), BAD_WRITES)
def test_invalid_write_param_is_rejected_naming_the_field_and_writes_nothing(
        daemon: DaemonHandle, params: dict[str, Any], field: str) -> None:
    content = f"invalid write probe {uuid.uuid4().hex} about the build cache"
    params = {k: (v.format(c=content) if isinstance(v, str) else v) for k, v in params.items()}
    before = _stored(daemon)
    err = _error(daemon, "memory.write", params)
    assert err.code == -32602
    assert err.data["field"] == field
    assert daemon.count_content(content) == 0
    assert _stored(daemon) == before
    # Positive control: the corrected write goes through.
    ok = daemon.write(content, agent_id="agent-a")
    assert daemon.call("memory.get", {"id": ok["id"]})["content"] == content
    daemon.assert_alive()


@pytest.mark.parametrize("k", [0, 101, -1, "10", True])
def test_search_k_out_of_range_is_invalid_params(daemon: DaemonHandle, k: Any) -> None:
    reader = f"agent-{uuid.uuid4().hex[:8]}"
    daemon.write("the deploy script lives in ops/deploy.sh", agent_id=reader)
    query = {"query": "deploy script", "agent_id": reader, "scope": "agent", "mode": "lexical"}
    err = _error(daemon, "memory.search", {**query, "k": k})
    assert err.code == -32602
    assert err.data["field"] == "k"
    for good_k in (1, 100):  # positive control: the edges of 1..100 are accepted
        found = daemon.call("memory.search", {**query, "k": good_k})
        assert len(found["results"]) == 1
    daemon.assert_alive()


# -- 1001: too large --------------------------------------------------------------------------

def test_content_over_65536_bytes_is_too_large_naming_content(daemon: DaemonHandle) -> None:
    too_big = "é" * 32769  # 65,538 UTF-8 bytes in 32,769 characters: the limit counts bytes
    before = _stored(daemon)
    err = _error(daemon, "memory.write", {"content": too_big, "agent_id": "agent-a"})
    assert err.code == 1001
    assert err.data["field"] == "content"
    assert _stored(daemon) == before
    # Positive control: exactly 65,536 bytes is accepted and stored whole.
    at_limit = "é" * 32768
    ok = daemon.write(at_limit)
    assert daemon.call("memory.get", {"id": ok["id"]})["content"] == at_limit
    daemon.assert_alive()


def test_frame_over_max_frame_bytes_is_answered_with_null_id_and_connection_stays_usable(
        daemon: DaemonHandle) -> None:
    huge = {"jsonrpc": "2.0", "id": 7, "method": "memory.write",
            "params": {"content": "x" * (1_100_000), "agent_id": "agent-a"}}  # > 1 MiB default
    small_content = f"small frame {uuid.uuid4().hex} after a huge one"
    small = {"jsonrpc": "2.0", "id": 8, "method": "memory.write",
             "params": {"content": small_content, "agent_id": "agent-a"}}
    memories_before, writes_before = _stored(daemon)
    with RawConnection(daemon.socket) as conn:
        # Both frames in one send: the small one's bytes follow the huge one's line end directly.
        conn.send(json.dumps(huge).encode() + b"\n" + json.dumps(small).encode() + b"\n")
        replies = {r["id"]: r for r in (conn.read(), conn.read())}
        assert set(replies) == {None, 8}
        assert replies[None]["error"]["code"] == 1001
        assert replies[8]["result"]["id"].startswith("mem_")
        # The same connection goes on serving requests.
        conn.request("daemon.ping", req_id=9)
        assert conn.read()["id"] == 9
    assert _stored(daemon) == (memories_before + 1, writes_before + 1)  # the small one only
    assert daemon.count_content(small_content) == 1
    daemon.assert_alive()


# -- 1002: not found ----------------------------------------------------------------------------

@pytest.mark.parametrize("memory_id", [new_memory_id(), "mem_not-an-id", "../../etc/passwd"],
                         ids=["unknown", "malformed", "path"])
def test_unknown_or_malformed_id_is_not_found(daemon: DaemonHandle, memory_id: str) -> None:
    stored = daemon.write("a memory that does exist")
    err = _error(daemon, "memory.get", {"id": memory_id})
    assert err.code == 1002
    # Positive control: a real id reads back.
    assert daemon.call("memory.get", {"id": stored["id"]})["id"] == stored["id"]
    daemon.assert_alive()


NUL_CASES = [
    pytest.param("memory.write", {"content": "a\x00b", "agent_id": "nul"}, "content", id="write-content"),
    pytest.param("memory.write", {"content": "ok", "agent_id": "nul", "metadata": {"k\x00": 1}},
                 "metadata.k\x00", id="write-metadata-key"),
    pytest.param("memory.write_many", {"items": [{"content": "fine", "agent_id": "nul"},
                                                 {"content": "x", "agent_id": "n\x00l"}]},
                 "items[1].agent_id", id="write-many-owner"),
    pytest.param("memory.search", {"query": "deploy\x00", "agent_id": "nul"}, "query", id="search-query"),
]


@pytest.mark.parametrize(("method", "params", "field"), NUL_CASES)
def test_a_nul_character_in_any_string_is_invalid_params_naming_the_field(
        daemon: DaemonHandle, method: str, params: dict[str, Any], field: str) -> None:
    """PostgreSQL cannot store U+0000 in text or JSON: the request is refused on both backends
    alike, before anything is written (found by the hostile suite on PostgreSQL, where it was
    answered 1003 and failed the rest of its group commit)."""
    before = _stored(daemon)
    err = _error(daemon, method, params)
    assert err.code == -32602 and err.data["field"] == field, (err.code, err.data, err)
    assert "NUL" in str(err)
    assert _stored(daemon) == before
    assert daemon.proc is not None and daemon.call("daemon.ping")["pid"] == daemon.proc.pid
