"""Turn raw params into validated requests; every failure names its field.

Bad input gets -32602 (or 1001 for oversize content) and changes nothing.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from memoryd.clock import normalize_rfc3339
from memoryd.config import Config
from memoryd.errors import Forbidden, InvalidParams, TooLarge
from memoryd.exchange import vectors as record_vectors
from memoryd.store.ids import MAX_INTEGER
from memoryd.store.listing import EXPORTABLE_STATUSES, BadCursor, ExportRequest, ListRequest
from memoryd.store.memories import (
    KeptVector,
    NewMemory,
    Restore,
    content_hash,
    normalize_content,
    request_hash,
)
from memoryd.store.schema import OWNER_FIELDS, SCOPE_KEY, SCOPES, STATUSES
from memoryd.store.scope import Reader
from memoryd.store.search import SearchRequest

MAX_OWNER_LEN = 256
MAX_METADATA_BYTES = 65536
#: The longest ttl_s: its expiry time must stay a timestamp the store can write (years 1..9999).
MAX_TTL_S = 100 * 365.25 * 86400
#: Job ids are the store's integers (signed 64-bit).
MAX_JOB_ID = MAX_INTEGER
WRITE_PARAMS = {
    "content", "kind", "scope", "agent_id", "user_id", "project", "session_id", "importance",
    "valid_from", "valid_to", "occurred_at", "ttl_s", "metadata", "idempotency_key",
}
SEARCH_PARAMS = {
    "query", "k", "scope", "agent_id", "user_id", "project", "session_id", "kind", "mode",
    "as_of", "valid_at", "time_ref", "include_candidates", "explain",
}
MODES = ("hybrid", "lexical", "vector")


def _unknown(params: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(params) - allowed)
    if extra:
        raise InvalidParams(extra[0], f"unknown parameter; expected some of {sorted(allowed)}")


def refuse_nul(value: Any, path: str = "params") -> None:
    """Refuse a request whose parameters hold the NUL character (U+0000) in any string, key or
    value, at any depth: PostgreSQL's text and JSON cannot store it, so the same request would
    be stored on one backend and fail on the other. ``path`` names the field in the error."""
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidParams(path, "must not contain the NUL character (U+0000)")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path != "params" else str(key)
            refuse_nul(key, where)
            refuse_nul(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            refuse_nul(item, f"{path}[{i}]")


def is_utf8(text: str) -> bool:
    """Whether ``text`` has a UTF-8 form: JSON's ``\\ud800`` escapes decode to lone surrogates,
    which the store cannot hold and an answer cannot carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def opt_str(params: Mapping[str, Any], name: str, max_len: int = MAX_OWNER_LEN) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidParams(name, "must be a non-empty string")
    if len(value) > max_len:
        raise InvalidParams(name, f"must be at most {max_len} characters")
    if not is_utf8(value):
        raise InvalidParams(name, "must be valid UTF-8 text (a lone surrogate escape such as \\ud800 "
                                  "was found)")
    return value


def opt_time(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    try:
        return normalize_rfc3339(value)
    except (ValueError, TypeError) as exc:
        raise InvalidParams(name, f"must be an RFC 3339 timestamp ({exc})") from exc
    except OverflowError as exc:  # e.g. 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise InvalidParams(name, "must be an RFC 3339 timestamp between years 1 and 9999 in UTC") from exc


def _number(params: Mapping[str, Any], name: str) -> float | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidParams(name, "must be a finite number")
    try:
        number = float(value)  # an integer past a double's range (10**400) raises OverflowError
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InvalidParams(name, "must be a finite number")
    return number


def _enum(params: Mapping[str, Any], name: str, choices: tuple[str, ...] | list[str],
          default: str | None) -> str | None:
    """An enum field; absent and JSON null both mean the default."""
    value = params.get(name)
    if value is None:
        return default
    if not isinstance(value, str) or value not in choices:
        raise InvalidParams(name, f"must be one of {list(choices)}")
    return value


def parse_write(params: Mapping[str, Any], cfg: Config, *, admin: bool = False) -> NewMemory:
    """Validate memory.write params (``restore`` only from the operator socket)."""
    if "restore" in params and not admin:
        raise Forbidden("'restore' is served on the operator socket only (memoryd import uses it)",
                        data={"field": "restore"})
    _unknown(params, WRITE_PARAMS | {"restore"} if admin else WRITE_PARAMS)
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
    kind = _enum(params, "kind", ["auto", *cfg.kinds], "auto") or "auto"
    scope = _enum(params, "scope", SCOPES, "agent") or "agent"
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
    occurred_at = opt_time(params, "occurred_at")
    ttl_s = _number(params, "ttl_s")
    if ttl_s is not None and not 0 < ttl_s <= MAX_TTL_S:
        raise InvalidParams("ttl_s", f"must be a positive number of seconds, at most {MAX_TTL_S:.0f} "
                                     "(100 years)")
    metadata = params.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise InvalidParams("metadata", "must be an object")
    bad = sorted(k for k in metadata if k.startswith("_"))
    if bad:
        raise InvalidParams("metadata", f"keys starting with '_' are reserved ({bad[0]!r})")
    try:
        if len(json.dumps(metadata)) > MAX_METADATA_BYTES:
            raise TooLarge(f"metadata is larger than {MAX_METADATA_BYTES} bytes", field="metadata")
        json.dumps(metadata, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParams("metadata", "must hold valid UTF-8 text only (a lone surrogate escape such as "
                                        "\\ud800 was found)") from exc
    idem = opt_str(params, "idempotency_key")
    restore = parse_restore(params["restore"]) if "restore" in params else None
    if restore is not None and "vector" in params["restore"]:
        restore = replace(restore, vector=keep_vector(params["restore"]["vector"], content, cfg))
    return NewMemory(
        content=content, kind=kind, scope=scope, owner=owner,
        agent_id=owners["agent_id"], user_id=owners["user_id"], project=owners["project"],
        session_id=owners["session_id"], importance=0.5 if importance is None else importance,
        valid_from=valid_from, valid_to=valid_to, occurred_at=occurred_at, ttl_s=ttl_s, metadata=metadata,
        # Only a keyed write is ever compared with an earlier request.
        idempotency_key=idem, request_hash=request_hash(dict(params)) if idem is not None else "",
        restore=restore,
    )


def parse_write_request(params: Mapping[str, Any], cfg: Config, *, admin: bool = False) -> NewMemory:
    """Validate one memory.write as a write on the socket is validated: the NUL check the
    socket runs on every request (dispatch(), submit_write()), then :func:`parse_write`.
    Writes that do not come in on a socket (the capture spool's replay) go through this, so
    a turn the socket refuses is never stored because it came by another road."""
    refuse_nul(params)
    return parse_write(params, cfg, admin=admin)


def parse_write_many(params: Mapping[str, Any], cfg: Config, *, admin: bool = False) -> list[NewMemory]:
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
            out.append(parse_write(item, cfg, admin=admin))
        except (InvalidParams, TooLarge, Forbidden) as exc:
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
    if not is_utf8(query):
        raise InvalidParams("query", "must be valid UTF-8 text (a lone surrogate escape such as \\ud800 "
                                     "was found)")
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
        time_ref=opt_time(params, "time_ref"),
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


def job_ids(params: Mapping[str, Any]) -> list[int]:
    """queue.retry's ``ids``: a list of job ids, each an integer the store can hold."""
    ids = params.get("ids", [])
    if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int)
                                        or not 1 <= i <= MAX_JOB_ID for i in ids):
        raise InvalidParams("ids", f"must be a list of job ids (integers from 1 to {MAX_JOB_ID})")
    return ids


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
    _unknown(params, {"id", "subject", "reason", "tombstone", "limit", "cursor"})
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
        if field not in OWNER_FIELDS or not isinstance(value, str) or not value or not is_utf8(value):
            raise InvalidParams("subject", f"must name one of {list(OWNER_FIELDS)} with a non-empty string")
        parsed_subject = {field: value}
    tombstone = params.get("tombstone", True)
    if not isinstance(tombstone, bool):
        raise InvalidParams("tombstone", "must be true or false")
    if memory_id is not None:
        for name in ("limit", "cursor"):
            if name in params:
                raise InvalidParams(name, "applies to a forget by subject only")
    return memory_id, parsed_subject, opt_str(params, "reason", 2000), tombstone


def parse_forget_page(params: Mapping[str, Any]) -> tuple[int | None, int]:
    """memory.forget by subject's paging: (rows for this call or None for all, seq to start after).

    The cursor is the ``next_cursor`` of the previous call: an opaque string."""
    limit = None if params.get("limit") is None else int_param(params, "limit", 500, 1, 5000)
    cursor = params.get("cursor")
    if cursor is None:
        return limit, 0
    if (not isinstance(cursor, str) or not cursor.startswith("s") or not cursor[1:].isdigit()
            or len(cursor) > 20 or int(cursor[1:]) > MAX_INTEGER):
        raise InvalidParams("cursor", "must be the next_cursor of the previous answer")
    return limit, int(cursor[1:])


RESTORE_PARAMS = {
    "source_id", "status", "recorded_at", "retired_at", "expires_at", "derived", "importance_raw",
    "corroboration", "access_count", "last_accessed_at", "kind_method", "kind_confidence", "links",
    "vector",
}
RESTORABLE_STATUSES = EXPORTABLE_STATUSES
LINK_KINDS = ("supersedes", "merged_into", "cites")


def parse_restore(value: Any) -> Restore:
    """Validate a write item's ``restore`` block (memoryd import; operator socket only).

    It carries what a client may not otherwise set: the row's status, its
    record times, counters, and links to rows already in the store.
    """
    if not isinstance(value, dict):
        raise InvalidParams("restore", "must be an object")
    extra = sorted(set(value) - RESTORE_PARAMS)
    if extra:
        raise InvalidParams(f"restore.{extra[0]}",
                            f"unknown field; expected some of {sorted(RESTORE_PARAMS)}")

    def sub(name: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(value, name, *args)
        except InvalidParams as exc:
            raise InvalidParams(f"restore.{name}", exc.message.split(": ", 1)[-1]) from exc

    status = sub("status", _enum, RESTORABLE_STATUSES, "active")
    recorded_at = sub("recorded_at", opt_time)
    if recorded_at is None:
        raise InvalidParams("restore.recorded_at", "is required (the time the row was first recorded)")
    derived = value.get("derived", False)
    if not isinstance(derived, bool):
        raise InvalidParams("restore.derived", "must be true or false")
    importance_raw = sub("importance_raw", _number)
    if importance_raw is not None and not 0.0 <= importance_raw <= 1.0:
        raise InvalidParams("restore.importance_raw", "must be between 0 and 1")
    kind_confidence = sub("kind_confidence", _number)
    counts = {name: sub(name, int_param, 1 if name == "corroboration" else 0, 0, 2**31 - 1)
              for name in ("corroboration", "access_count")}
    return Restore(
        source_id=sub("source_id", opt_str, 64), status=status or "active", recorded_at=recorded_at,
        retired_at=sub("retired_at", opt_time), expires_at=sub("expires_at", opt_time),
        derived=derived, importance_raw=importance_raw, corroboration=counts["corroboration"],
        access_count=counts["access_count"], last_accessed_at=sub("last_accessed_at", opt_time),
        kind_method=sub("kind_method", opt_str, 16), kind_confidence=kind_confidence,
        links=_restore_links(value.get("links", [])),
    )


def keep_vector(value: Any, content: str, cfg: Config) -> KeptVector | None:
    """``restore.vector`` (exchange/vectors.py's shape): the vector to store as is, or None
    to embed the row again. It is kept only when its model and dimension are this daemon's
    embedder's and the content hash it was made from equals the hash of ``content``,
    recomputed here (the file's hash alone is never trusted). A malformed vector is refused
    (-32602 naming ``restore.vector.<field>``) whether or not it would be kept."""
    decoded = record_vectors.decode(value, "restore.vector")
    if isinstance(decoded, record_vectors.Problem):
        raise InvalidParams(decoded.field, decoded.reason)
    if decoded is None or decoded.content_hash is None or cfg.embedder == "none":
        return None
    model, dim = embedder_identity(cfg.embedder)
    if (decoded.model, decoded.dim) != (model, dim) or decoded.content_hash != content_hash(content):
        return None
    return KeptVector(model=decoded.model, dim=decoded.dim, data=decoded.data)


@functools.lru_cache(maxsize=4)
def embedder_identity(spec: str) -> tuple[str, int | None]:
    """The model name stored beside each vector and the dimension the embedder ``spec`` makes
    (read from its files once, without loading it; None when they do not say)."""
    from memoryd.models.embedder import model_dimension, spec_name

    return spec_name(spec), model_dimension(spec)


def _restore_links(value: Any) -> tuple[tuple[str, str, str, str | None], ...]:
    """``links``: [{kind, to | from, created_at?}] → (kind, src role, other id, created_at)."""
    if not isinstance(value, list) or len(value) > 1000:
        raise InvalidParams("restore.links", "must be a list of at most 1000 links")
    out = []
    for i, link in enumerate(value):
        where = f"restore.links[{i}]"
        if not isinstance(link, dict) or link.get("kind") not in LINK_KINDS:
            raise InvalidParams(where, f"must be an object with kind one of {list(LINK_KINDS)}")
        extra = sorted(set(link) - {"kind", "to", "from", "created_at"})
        if extra or ("to" in link) == ("from" in link):
            raise InvalidParams(where, "give kind and exactly one of to or from (and created_at)")
        direction = "to" if "to" in link else "from"
        other = link[direction]
        if not isinstance(other, str) or not other:
            raise InvalidParams(f"{where}.{direction}", "must be a memory id")
        try:
            created_at = opt_time(link, "created_at")
        except InvalidParams as exc:
            raise InvalidParams(f"{where}.created_at", "must be an RFC 3339 timestamp") from exc
        out.append((link["kind"], direction, other, created_at))
    return tuple(out)


LIST_PARAMS = {"scope", "kind", "status", "limit", "cursor", "recorded_after", "recorded_before",
               *OWNER_FIELDS}
EXPORT_PARAMS = {"scope", "kind", "status", "limit", "cursor", "with_vectors", *OWNER_FIELDS}


def _statuses(params: Mapping[str, Any], allowed: tuple[str, ...],
              default: tuple[str, ...]) -> tuple[str, ...]:
    """``status``: one status or a list of them."""
    value = params.get("status")
    if value is None:
        return default
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or any(v not in allowed for v in values):
        raise InvalidParams("status", f"must be one of {list(allowed)}, or a non-empty list of them")
    return tuple(dict.fromkeys(values))


def _cursor(params: Mapping[str, Any]) -> str | None:
    cursor = params.get("cursor")
    if cursor is not None and (not isinstance(cursor, str) or not cursor or len(cursor) > 512):
        raise InvalidParams("cursor", "must be the next_cursor of an earlier page")
    return cursor


def parse_list(params: Mapping[str, Any], cfg: Config) -> ListRequest:
    """Validate memory.list params: owner fields are access keys, as in memory.search."""
    _unknown(params, LIST_PARAMS)
    return ListRequest(
        reader=Reader(**{name: opt_str(params, name) for name in OWNER_FIELDS}),
        scope=_enum(params, "scope", SCOPES, None),
        kind=_enum(params, "kind", ["auto", *cfg.kinds], None),
        statuses=_statuses(params, STATUSES, ("active",)),
        limit=int_param(params, "limit", 50, 1, 1000),
        cursor=_cursor(params),
        recorded_after=opt_time(params, "recorded_after"),
        recorded_before=opt_time(params, "recorded_before"),
    )


def parse_export(params: Mapping[str, Any], cfg: Config) -> ExportRequest:
    """Validate memory.export params: owner fields filter the rows' own columns."""
    _unknown(params, EXPORT_PARAMS)
    with_vectors = params.get("with_vectors", False)
    if not isinstance(with_vectors, bool):
        raise InvalidParams("with_vectors", "must be true or false")
    owners = tuple((name, value) for name in OWNER_FIELDS
                   if (value := opt_str(params, name)) is not None)
    return ExportRequest(
        owners=owners, scope=_enum(params, "scope", SCOPES, None),
        kind=_enum(params, "kind", ["auto", *cfg.kinds], None),
        statuses=_statuses(params, EXPORTABLE_STATUSES, EXPORTABLE_STATUSES),
        limit=int_param(params, "limit", 500, 1, 1000), cursor=_cursor(params),
        with_vectors=with_vectors,
    )


def cursor_error(exc: BadCursor) -> InvalidParams:
    """-32602 for a cursor the listing cannot read."""
    return InvalidParams("cursor", f"{exc}; start again without a cursor")
