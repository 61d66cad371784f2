"""JSON-RPC 2.0 frame decoding: each malformed frame gets its own error code."""

from __future__ import annotations

import json

import pytest

from memoryd.errors import InvalidRequest, ParseError
from memoryd.service.protocol import decode, encode_error, encode_result


def frame(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def test_valid_request_decodes_method_params_and_id() -> None:
    req = decode(frame({"jsonrpc": "2.0", "id": 7, "method": "memory.get", "params": {"id": "x"}}))
    assert (req.method, req.params, req.id, req.is_notification) == ("memory.get", {"id": "x"}, 7, False)


def test_missing_or_null_params_decode_as_an_empty_object() -> None:
    assert decode(frame({"jsonrpc": "2.0", "id": 1, "method": "daemon.ping"})).params == {}
    assert decode(frame({"jsonrpc": "2.0", "id": 1, "method": "daemon.ping", "params": None})).params == {}


def test_not_json_is_a_parse_error() -> None:
    with pytest.raises(ParseError) as info:
        decode(b"{this is not json\n")
    assert info.value.code == -32700


def test_invalid_utf8_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        decode(b'{"jsonrpc": "2.0", "method": "\xff\xfe"}\n')


def test_json_array_batch_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest) as info:
        decode(frame([{"jsonrpc": "2.0", "id": 1, "method": "daemon.ping"}]))
    assert info.value.code == -32600
    assert "batch" in info.value.message


def test_a_json_scalar_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest):
        decode(frame("daemon.ping"))


def test_wrong_jsonrpc_version_is_an_invalid_request_carrying_the_id() -> None:
    with pytest.raises(InvalidRequest) as info:
        decode(frame({"jsonrpc": "1.0", "id": "req-9", "method": "daemon.ping"}))
    assert info.value.request_id == "req-9"  # type: ignore[attr-defined]
    with pytest.raises(InvalidRequest):
        decode(frame({"id": 1, "method": "daemon.ping"}))


def test_params_that_are_not_an_object_are_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest) as info:
        decode(frame({"jsonrpc": "2.0", "id": 3, "method": "memory.write", "params": ["a", "b"]}))
    assert "params" in info.value.message
    assert info.value.request_id == 3  # type: ignore[attr-defined]


def test_missing_or_empty_method_is_an_invalid_request() -> None:
    for bad in ({"jsonrpc": "2.0", "id": 1}, {"jsonrpc": "2.0", "id": 1, "method": ""},
                {"jsonrpc": "2.0", "id": 1, "method": 5}):
        with pytest.raises(InvalidRequest):
            decode(frame(bad))


def test_id_of_a_wrong_type_is_an_invalid_request() -> None:
    for bad_id in (True, {"a": 1}, [1]):
        with pytest.raises(InvalidRequest):
            decode(frame({"jsonrpc": "2.0", "id": bad_id, "method": "daemon.ping"}))


def test_request_without_id_is_a_notification_but_null_id_is_not() -> None:
    note = decode(frame({"jsonrpc": "2.0", "method": "daemon.ping"}))
    assert note.is_notification
    null_id = decode(frame({"jsonrpc": "2.0", "id": None, "method": "daemon.ping"}))
    assert not null_id.is_notification and null_id.id is None


def test_responses_are_one_json_line_with_the_request_id() -> None:
    ok = encode_result("r1", {"n": "é"})
    assert ok.endswith(b"\n") and ok.count(b"\n") == 1
    assert json.loads(ok) == {"jsonrpc": "2.0", "id": "r1", "result": {"n": "é"}}
    err = json.loads(encode_error(None, InvalidRequest("nope")))
    assert err["id"] is None
    assert err["error"]["code"] == -32600
    assert err["error"]["data"]["name"] == "invalid_request"


def test_an_error_answer_never_carries_a_urls_credentials() -> None:
    from memoryd.errors import StoreUnavailable

    error = StoreUnavailable("store unavailable: could not reach "
                             "postgresql://memo:hunter2@db1:5432/mem?password=hunter3; retry")
    body = json.loads(encode_error(7, error))["error"]
    assert "hunter2" not in body["message"] and "hunter3" not in body["message"]
    assert "db1:5432" in body["message"]  # positive control: the rest of the message stays
    assert body["code"] == 1003
