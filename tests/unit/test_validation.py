"""Request validation: every error names its field; good input is normalised."""

from __future__ import annotations

from typing import Any

import pytest

from memoryd.config import Config
from memoryd.errors import InvalidParams, TooLarge
from memoryd.service.validation import parse_get, parse_search, parse_write, parse_write_many

CFG = Config()


def write_error(**params: Any) -> InvalidParams:
    with pytest.raises(InvalidParams) as info:
        parse_write(params, CFG)
    assert info.value.code == -32602
    return info.value


def test_valid_write_builds_a_new_memory_with_defaults() -> None:
    req = parse_write({"content": "  hello  ", "agent_id": "a1"}, CFG)
    assert (req.scope, req.owner, req.agent_id) == ("agent", "a1", "a1")
    assert (req.kind, req.importance) == ("auto", 0.5)
    assert req.metadata == {} and req.idempotency_key is None
    assert req.content == "  hello  "  # stored as sent; identity uses the normalised form
    assert req.request_hash == ""  # only a keyed write is compared with an earlier request
    keyed = parse_write({"content": "hello", "agent_id": "a1", "idempotency_key": "k1"}, CFG)
    assert len(keyed.request_hash) == 64


@pytest.mark.parametrize(("params", "field"), [
    ({"agent_id": "a1"}, "content"),
    ({"content": 42, "agent_id": "a1"}, "content"),
    ({"content": "   \n\t", "agent_id": "a1"}, "content"),
    ({"content": "x\udc80y", "agent_id": "a1"}, "content"),
    ({"content": "x", "agent_id": "a1", "kind": "invented"}, "kind"),
    ({"content": "x", "agent_id": "a1", "scope": "galaxy"}, "scope"),
    ({"content": "x"}, "agent_id"),
    ({"content": "x", "scope": "user", "agent_id": "a1"}, "user_id"),
    ({"content": "x", "scope": "project"}, "project"),
    ({"content": "x", "scope": "session"}, "session_id"),
    ({"content": "x", "agent_id": ""}, "agent_id"),
    ({"content": "x", "agent_id": "a" * 257}, "agent_id"),
    ({"content": "x", "agent_id": "a1", "importance": 1.5}, "importance"),
    ({"content": "x", "agent_id": "a1", "importance": True}, "importance"),
    ({"content": "x", "agent_id": "a1", "importance": "high"}, "importance"),
    ({"content": "x", "agent_id": "a1", "valid_from": "yesterday"}, "valid_from"),
    ({"content": "x", "agent_id": "a1", "valid_from": "2026-03-01T10:00:00"}, "valid_from"),
    ({"content": "x", "agent_id": "a1", "valid_from": "2026-03-02T00:00:00Z",
      "valid_to": "2026-03-01T00:00:00Z"}, "valid_to"),
    ({"content": "x", "agent_id": "a1", "ttl_s": 0}, "ttl_s"),
    ({"content": "x", "agent_id": "a1", "metadata": ["a"]}, "metadata"),
    ({"content": "x", "agent_id": "a1", "metadata": {"_internal": 1}}, "metadata"),
    ({"content": "x", "agent_id": "a1", "idempotency_key": ""}, "idempotency_key"),
    ({"content": "x", "agent_id": "a1", "colour": "blue"}, "colour"),
])
def test_bad_write_param_error_names_the_field(params: dict[str, Any], field: str) -> None:
    err = write_error(**params)
    assert err.field == field
    assert err.data["field"] == field
    assert field in err.message


def test_explicit_null_kind_and_scope_mean_the_defaults() -> None:
    # JSON null is how many clients spell "not given"; the hostile-input suite found it crashing
    req = parse_write({"content": "x", "agent_id": "a1", "scope": None, "kind": None}, CFG)
    assert (req.scope, req.kind, req.owner) == ("agent", "auto", "a1")
    found = parse_search({"query": "x", "agent_id": "a1", "mode": None}, CFG)
    assert found.mode == "hybrid"


def test_org_scope_needs_no_owner_key() -> None:
    req = parse_write({"content": "x", "scope": "org"}, CFG)
    assert (req.scope, req.owner) == ("org", "")


def test_oversize_content_is_too_large_naming_content() -> None:
    limit = CFG.max_content_bytes
    parse_write({"content": "a" * limit, "agent_id": "a1"}, CFG)  # exactly at the limit is fine
    with pytest.raises(TooLarge) as info:
        parse_write({"content": "a" * (limit + 1), "agent_id": "a1"}, CFG)
    assert info.value.code == 1001
    assert info.value.data["field"] == "content"
    # Bytes, not characters: 'é' is two bytes in UTF-8.
    with pytest.raises(TooLarge):
        parse_write({"content": "é" * (limit // 2 + 1), "agent_id": "a1"}, CFG)


@pytest.mark.parametrize(("given", "stored"), [
    ("2026-03-01T12:00:00+02:00", "2026-03-01T10:00:00.000000Z"),
    ("2026-03-01T10:00:00Z", "2026-03-01T10:00:00.000000Z"),
    ("2026-03-01T10:00:00.5Z", "2026-03-01T10:00:00.500000Z"),
    ("2026-03-01T10:00:00.123456-05:30", "2026-03-01T15:30:00.123456Z"),
    ("2026-03-01t10:00:00z", "2026-03-01T10:00:00.000000Z"),
    ("2026-03-01 10:00:00+00:00", "2026-03-01T10:00:00.000000Z"),
])
def test_rfc3339_inputs_are_normalised_to_utc_z_microseconds(given: str, stored: str) -> None:
    req = parse_write({"content": "x", "agent_id": "a1", "valid_from": given}, CFG)
    assert req.valid_from == stored
    search = parse_search({"query": "x", "agent_id": "a1", "as_of": given, "valid_at": given}, CFG)
    assert (search.as_of, search.valid_at) == (stored, stored)


def test_request_hash_ignores_the_idempotency_key_but_not_the_content() -> None:
    a = parse_write({"content": "x", "agent_id": "a1", "idempotency_key": "k1"}, CFG)
    b = parse_write({"content": "x", "agent_id": "a1", "idempotency_key": "k2"}, CFG)
    c = parse_write({"content": "y", "agent_id": "a1", "idempotency_key": "k1"}, CFG)
    assert a.request_hash == b.request_hash != c.request_hash


def test_write_many_item_error_names_the_item_and_field() -> None:
    items = [{"content": "ok", "agent_id": "a1"}, {"content": "x", "agent_id": "a1", "importance": 9}]
    with pytest.raises(InvalidParams) as info:
        parse_write_many({"items": items}, CFG)
    assert info.value.data["field"] == "items[1].importance"
    assert info.value.data["index"] == 1
    assert len(parse_write_many({"items": items[:1]}, CFG)) == 1


@pytest.mark.parametrize("items", [[], "nope", [{"content": "x", "agent_id": "a"}] * 1001])
def test_write_many_needs_one_to_a_thousand_items(items: Any) -> None:
    with pytest.raises(InvalidParams) as info:
        parse_write_many({"items": items}, CFG)
    assert info.value.field == "items"


def test_write_many_oversize_item_is_too_large_naming_the_item() -> None:
    big = {"content": "a" * (CFG.max_content_bytes + 1), "agent_id": "a1"}
    with pytest.raises(TooLarge) as info:
        parse_write_many({"items": [big]}, CFG)
    assert info.value.data["field"] == "items[0].content"


@pytest.mark.parametrize(("params", "field"), [
    ({}, "query"),
    ({"query": "  "}, "query"),
    ({"query": "x", "k": 0}, "k"),
    ({"query": "x", "k": 101}, "k"),
    ({"query": "x", "k": True}, "k"),
    ({"query": "x", "mode": "psychic"}, "mode"),
    ({"query": "x", "scope": "galaxy"}, "scope"),
    ({"query": "x", "as_of": "last week"}, "as_of"),
    ({"query": "x", "include_candidates": "yes"}, "include_candidates"),
    ({"query": "x", "user_id": 7}, "user_id"),
])
def test_bad_search_param_error_names_the_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidParams) as info:
        parse_search(params, CFG)
    assert info.value.field == field


def test_valid_search_has_defaults_and_the_reader_keys() -> None:
    req = parse_search({"query": "db port", "user_id": "u1", "project": "api"}, CFG)
    assert (req.k, req.mode, req.include_candidates, req.scope) == (10, "hybrid", False, None)
    assert (req.reader.user_id, req.reader.project, req.reader.agent_id) == ("u1", "api", None)


def test_get_validates_id_and_include() -> None:
    assert parse_get({"id": "mem_x", "include": ["history"]}) == ("mem_x", ["history"])
    with pytest.raises(InvalidParams) as info:
        parse_get({"id": "mem_x", "include": ["everything"]})
    assert info.value.field == "include"
    with pytest.raises(InvalidParams) as info:
        parse_get({})
    assert info.value.field == "id"
