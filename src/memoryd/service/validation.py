"""Turn raw params into validated requests; every failure names its field.

Bad input gets -32602 (or 1001 for oversize content) and changes nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from memoryd.clock import normalize_rfc3339
from memoryd.config import Config
from memoryd.errors import InvalidParams, TooLarge
from memoryd.store.memories import NewMemory, normalize_content, request_hash
from memoryd.store.schema import OWNER_FIELDS, SCOPE_KEY, SCOPES
from memoryd.store.scope import Reader
from memoryd.store.search import SearchRequest

MAX_OWNER_LEN = 256
MAX_METADATA_BYTES = 65536
WRITE_PARAMS = {
    "content", "kind", "scope", "agent_id", "user_id", "project", "session_id", "importance",
    "valid_from", "valid_to", "ttl_s", "metadata", "idempotency_key",
}
SEARCH_PARAMS = {
    "query", "k", "scope", "agent_id", "user_id", "project", "session_id", "kind", "mode",
    "as_of", "valid_at", "include_candidates", "explain",
}
MODES = ("hybrid", "lexical", "vector")


def _unknown(params: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(params) - allowed)
    if extra:
        raise InvalidParams(extra[0], f"unknown parameter; expected some of {sorted(allowed)}")


def opt_str(params: Mapping[str, Any], name: str, max_len: int = MAX_OWNER_LEN) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidParams(name, "must be a non-empty string")
    if len(value) > max_len:
        raise InvalidParams(name, f"must be at most {max_len} characters")
    return value


def opt_time(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    try:
        return normalize_rfc3339(value)
    except (ValueError, TypeError) as exc:
        raise InvalidParams(name, f"must be an RFC 3339 timestamp ({exc})") from exc


def _number(params: Mapping[str, Any], name: str) -> float | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidParams(name, "must be a finite number")
    return float(value)


def _enum(params: Mapping[str, Any], name: str, choices: tuple[str, ...] | list[str],
          default: str | None) -> str | None:
    value = params.get(name, default)
    if value is None:
        return None
    if not isinstance(value, str) or value not in choices:
        raise InvalidParams(name, f"must be one of {list(choices)}")
    return value


def parse_write(params: Mapping[str, Any], cfg: Config) -> NewMemory:
    """Validate memory.write params."""
    _unknown(params, WRITE_PARAMS)
    content = params.get("content")
    if not isinstance(content, str):
        raise InvalidParams("content", "is required and must be a string")
    size = len(content.encode("utf-8", errors="surrogatepass"))
    if size > cfg.max_content_bytes:
        raise TooLarge(
            f"content is {size} bytes; the limit is {cfg.max_content_bytes} (split it into "
            "several memories)", field="content",
        )
    if not normalize_content(content):
        raise InvalidParams("content", "must contain at least one non-whitespace character")
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParams("content", "must be valid UTF-8 (lone surrogates found)") from exc
    kind = _enum(params, "kind", ["auto", *cfg.kinds], "auto")
    scope = _enum(params, "scope", SCOPES, "agent")
    assert kind is not None and scope is not None
    owners = {name: opt_str(params, name) for name in OWNER_FIELDS}
    if scope == "org":
        owner = ""
    else:
        key = SCOPE_KEY[scope]
        if owners[key] is None:
            raise InvalidParams(key, f"is required for scope {scope!r}")
        owner = owners[key] or ""
    importance = _number(params, "importance")
    if importance is not None and not 0.0 <= importance <= 1.0:
        raise InvalidParams("importance", "must be between 0 and 1")
    valid_from = opt_time(params, "valid_from")
    valid_to = opt_time(params, "valid_to")
    if valid_from and valid_to and valid_to <= valid_from:
        raise InvalidParams("valid_to", "must be later than valid_from")
    ttl_s = _number(params, "ttl_s")
    if ttl_s is not None and ttl_s <= 0:
        raise InvalidParams("ttl_s", "must be a positive number of seconds")
    metadata = params.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise InvalidParams("metadata", "must be an object")
    bad = sorted(k for k in metadata if k.startswith("_"))
    if bad:
        raise InvalidParams("metadata", f"keys starting with '_' are reserved ({bad[0]!r})")
    if len(json.dumps(metadata)) > MAX_METADATA_BYTES:
        raise TooLarge(f"metadata is larger than {MAX_METADATA_BYTES} bytes", field="metadata")
    idem = opt_str(params, "idempotency_key")
    return NewMemory(
        content=content, kind=kind, scope=scope, owner=owner,
        agent_id=owners["agent_id"], user_id=owners["user_id"], project=owners["project"],
        session_id=owners["session_id"], importance=0.5 if importance is None else importance,
        valid_from=valid_from, valid_to=valid_to, ttl_s=ttl_s, metadata=metadata,
        # Only a keyed write is ever compared with an earlier request.
        idempotency_key=idem, request_hash=request_hash(dict(params)) if idem is not None else "",
    )


def parse_write_many(params: Mapping[str, Any], cfg: Config) -> list[NewMemory]:
    """Validate memory.write_many params; an item's error names ``items[i].field``."""
    _unknown(params, {"items"})
    items = params.get("items")
    if not isinstance(items, list) or not 1 <= len(items) <= 1000:
        raise InvalidParams("items", "must be a list of 1 to 1000 memory.write params")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidParams(f"items[{i}]", "must be an object")
        try:
            out.append(parse_write(item, cfg))
        except (InvalidParams, TooLarge) as exc:
            exc.data["field"] = f"items[{i}].{exc.data.get('field')}"
            exc.data["index"] = i
            raise
    return out


def parse_search(params: Mapping[str, Any], cfg: Config) -> SearchRequest:
    """Validate memory.search params."""
    _unknown(params, SEARCH_PARAMS)
    query = params.get("query")
    if not isinstance(query, str) or not query.strip():
        raise InvalidParams("query", "is required and must be a non-empty string")
    if len(query.encode("utf-8", errors="surrogatepass")) > cfg.max_content_bytes:
        raise TooLarge("query is too large", field="query")
    k = params.get("k", 10)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100:
        raise InvalidParams("k", "must be an integer from 1 to 100")
    include_candidates = params.get("include_candidates", False)
    if not isinstance(include_candidates, bool):
        raise InvalidParams("include_candidates", "must be true or false")
    explain = params.get("explain", False)
    if not isinstance(explain, bool):
        raise InvalidParams("explain", "must be true or false")
    reader = Reader(**{name: opt_str(params, name) for name in OWNER_FIELDS})
    return SearchRequest(
        query=query, k=k, reader=reader, scope=_enum(params, "scope", SCOPES, None),
        kind=_enum(params, "kind", ["auto", *cfg.kinds], None),
        mode=_enum(params, "mode", MODES, "hybrid") or "hybrid",
        as_of=opt_time(params, "as_of"), valid_at=opt_time(params, "valid_at"),
        include_candidates=include_candidates, explain=explain,
    )


def parse_get(params: Mapping[str, Any]) -> tuple[str, list[str]]:
    """Validate memory.get params: (id, include)."""
    _unknown(params, {"id", "include"})
    memory_id = params.get("id")
    if not isinstance(memory_id, str) or not memory_id:
        raise InvalidParams("id", "is required and must be a string")
    include = params.get("include", [])
    allowed = ("history", "citations", "links", "entities")
    if not isinstance(include, list) or any(i not in allowed for i in include):
        raise InvalidParams("include", f"must be a list of {list(allowed)}")
    return memory_id, include


def check_known(params: Mapping[str, Any], allowed: set[str]) -> None:
    """Refuse unknown parameters (a typo must not be silently ignored)."""
    _unknown(params, allowed)


def int_param(params: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidParams(name, f"must be an integer from {low} to {high}")
    return value


def parse_supersede(params: Mapping[str, Any]) -> tuple[str, str | None, Reader, str | None, dict[str, Any]]:
    """Validate memory.supersede: (old_id, new_id, caller's keys, reason, new row's write params)."""
    _unknown(params, WRITE_PARAMS | {"old_id", "new_id", "reason"})
    old_id = params.get("old_id")
    if not isinstance(old_id, str) or not old_id:
        raise InvalidParams("old_id", "is required and must be a string")
    new_id = params.get("new_id")
    has_content = "content" in params
    if (new_id is None) == (not has_content):
        raise InvalidParams("new_id", "give exactly one of new_id or content")
    if new_id is not None and (not isinstance(new_id, str) or not new_id):
        raise InvalidParams("new_id", "must be a string")
    reason = opt_str(params, "reason", 2000)
    reader = Reader(**{name: opt_str(params, name) for name in OWNER_FIELDS})
    write_params = {k: v for k, v in params.items() if k in WRITE_PARAMS}
    return old_id, new_id, reader, reason, write_params


def parse_forget(params: Mapping[str, Any]) -> tuple[str | None, dict[str, str] | None, str | None, bool]:
    """Validate memory.forget: (id, subject, reason, tombstone)."""
    _unknown(params, {"id", "subject", "reason", "tombstone"})
    memory_id = params.get("id")
    subject = params.get("subject")
    if (memory_id is None) == (subject is None):
        raise InvalidParams("id", "give exactly one of id or subject")
    if memory_id is not None and (not isinstance(memory_id, str) or not memory_id):
        raise InvalidParams("id", "must be a string")
    parsed_subject = None
    if subject is not None:
        if not isinstance(subject, dict) or len(subject) != 1:
            raise InvalidParams("subject", f"must be an object with exactly one of {list(OWNER_FIELDS)}")
        (field, value), = subject.items()
        if field not in OWNER_FIELDS or not isinstance(value, str) or not value:
            raise InvalidParams("subject", f"must name one of {list(OWNER_FIELDS)} with a non-empty string")
        parsed_subject = {field: value}
    tombstone = params.get("tombstone", True)
    if not isinstance(tombstone, bool):
        raise InvalidParams("tombstone", "must be true or false")
    return memory_id, parsed_subject, opt_str(params, "reason", 2000), tombstone
