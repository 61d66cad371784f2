"""Reading an export file's lines as untrusted input: one line to one checked record.

An export file may come from anywhere (a colleague, a backup, an attacker),
so ``memoryd import`` treats each line as hostile: a line it cannot read
(not UTF-8, not JSON, longer than :data:`MAX_LINE_BYTES`, nested past
:data:`MAX_DEPTH`) and a memory record whose fields have the wrong shape are
refused by line number (and field), and the rest of the file is imported.
Nothing here raises for any input: every refusal is a value.

The checks are the shape docs/export-format.md gives each field, so that
building a write from a record cannot fail; what depends on the target store
(its kinds, its content limit, its tombstones) is the daemon's to refuse, and
it names the field too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from memoryd.clock import normalize_rfc3339
from memoryd.exchange import vectors as record_vectors

#: A line longer than this is refused unread (no record a daemon can take comes near it:
#: a request frame is at most max_frame_bytes, 1 MiB by default).
MAX_LINE_BYTES = 16 << 20
#: How deep a record may nest (objects and lists); an export of a memory written with deeper
#: metadata is refused with the field named.
MAX_DEPTH = 200

#: Fields that are a string or null.
TEXT_FIELDS = ("kind", "scope", "status", "agent_id", "user_id", "project", "session_id", "kind_method")
#: Fields that are an RFC 3339 timestamp or null.
TIME_FIELDS = ("valid_from", "valid_to", "occurred_at", "recorded_at", "retired_at", "expires_at",
               "last_accessed_at")
#: Fields that are a number from 0 to 1, or null.
UNIT_FIELDS = ("importance", "importance_raw", "kind_confidence")
#: Fields that are a non-negative integer (at most 2**31 - 1), or null.
COUNT_FIELDS = ("corroboration", "access_count")
LINK_FIELDS = {"kind", "to", "created_at"}


@dataclass(frozen=True)
class Bad:
    """Why a record is refused: the field (dotted, ``links[2].to``) and what is wrong with it."""

    field: str
    reason: str


@dataclass(frozen=True)
class Line:
    """One line of the file: its number and its bytes (without the newline), or, for a line
    too long to keep, ``too_long`` and no bytes."""

    number: int
    data: bytes
    too_long: bool = False


def lines(stream: IO[bytes], max_bytes: int = MAX_LINE_BYTES) -> Iterator[Line]:
    """The non-blank lines of ``stream``; a line longer than ``max_bytes`` is read through
    in pieces and given as ``too_long``, never held whole."""
    number = 0
    while True:
        data = stream.readline(max_bytes + 1)
        if not data:
            return
        number += 1
        if len(data) > max_bytes and not data.endswith(b"\n"):
            while data and not data.endswith(b"\n"):
                data = stream.readline(1 << 20)
            yield Line(number, b"", too_long=True)
            continue
        if data.strip():
            yield Line(number, data.rstrip(b"\r\n"))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode(line: Line) -> tuple[Any, str | None]:
    """The JSON value of a line, or (None, why it cannot be read)."""
    if line.too_long:
        return None, f"longer than {MAX_LINE_BYTES} bytes"
    try:
        text = line.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start + 1} of the line)"
    try:
        return json.loads(text, parse_constant=_no_constant), None
    except RecursionError:
        return None, "nested too deeply to read"
    except ValueError as exc:  # JSONDecodeError, NaN, an integer of more than 4300 digits
        return None, f"not JSON ({getattr(exc, 'msg', None) or exc})"


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` levels (iterative: no recursion to blow)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _text_problem(value: Any) -> str | None:
    """What keeps a string, or any string inside a JSON value, from being stored; else None.
    (Iterative for the same reason as :func:`_depth_over`; the depth is checked first.)"""
    stack = [value]
    while stack:
        item = stack.pop()
        texts: list[Any] = []
        if isinstance(item, str):
            texts = [item]
        elif isinstance(item, dict):
            texts = list(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return "holds a number that is not finite"
        for text in texts:
            if "\x00" in text:
                return "must not contain the NUL character (U+0000)"
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return "must be valid UTF-8 text (a lone surrogate escape such as \\ud800 was found)"
    return None


def _time_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be an RFC 3339 timestamp or null"
    try:
        normalize_rfc3339(value)
    except (ValueError, TypeError, OverflowError):
        return "must be an RFC 3339 timestamp (such as 2025-06-02T09:15:10.482000Z)"
    return None


def _number_problem(value: Any, low: float, high: float) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number or null"
    try:
        number = float(value)
    except OverflowError:
        return f"must be between {low:g} and {high:g}"
    if not (math.isfinite(number) and low <= number <= high):
        return f"must be between {low:g} and {high:g}"
    return None


def _link_problem(links: Any) -> Bad | None:
    if not isinstance(links, list):
        return Bad("links", "must be a list of links or null")
    for i, link in enumerate(links):
        where = f"links[{i}]"
        if not isinstance(link, dict):
            return Bad(where, "must be an object {kind, to, created_at}")
        if not isinstance(link.get("kind"), str):
            return Bad(f"{where}.kind", "must be a string")
        if not isinstance(link.get("to"), str) or not link["to"]:
            return Bad(f"{where}.to", "must be the id of another record")
        if link.get("created_at") is not None:
            problem = _time_problem(link["created_at"])
            if problem:
                return Bad(f"{where}.created_at", problem)
    return None


def check_memory(record: dict[str, Any]) -> Bad | None:
    """What is wrong with a memory record's shape, naming the field; None when a write can be
    built from it. ``vector`` is checked as exchange/vectors.py reads it (the importer sends
    it for the daemon to keep); fields of a later version are not looked at."""
    if _depth_over(record, MAX_DEPTH):
        return Bad(_deep_field(record), f"nests more than {MAX_DEPTH} levels deep")
    if readable_id(record) is None:
        return Bad("id", "must be a string of 1 to 64 characters (no NUL, valid UTF-8)")
    content = record.get("content")
    if not isinstance(content, str) or not content.strip():
        return Bad("content", "must be a string with at least one non-whitespace character")
    for name in TEXT_FIELDS:
        if record.get(name) is not None and not isinstance(record[name], str):
            return Bad(name, "must be a string or null")
    for name in TIME_FIELDS:
        if record.get(name) is not None:
            problem = _time_problem(record[name])
            if problem:
                return Bad(name, problem)
    if not isinstance(record.get("recorded_at"), str):
        return Bad("recorded_at", "is required (the time the source store first recorded the row)")
    for name in UNIT_FIELDS:
        if record.get(name) is not None:
            problem = _number_problem(record[name], 0.0, 1.0)
            if problem:
                return Bad(name, problem)
    for name in COUNT_FIELDS:
        value = record.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 0 <= value <= 2**31 - 1):
            return Bad(name, "must be an integer from 0 to 2147483647, or null")
    if record.get("derived") is not None and not isinstance(record["derived"], bool):
        return Bad("derived", "must be true, false or null")
    if record.get("metadata") is not None and not isinstance(record["metadata"], dict):
        return Bad("metadata", "must be an object or null")
    if record.get("links") is not None:
        bad_link = _link_problem(record["links"])
        if bad_link:
            return bad_link
    for name in ("content", *TEXT_FIELDS, "metadata", "links"):
        problem = _text_problem(record.get(name))
        if problem:
            return Bad(name, problem)
    vector = record_vectors.decode(record.get("vector"))
    if isinstance(vector, record_vectors.Problem):
        return Bad(vector.field, vector.reason)
    return None


def _deep_field(record: dict[str, Any]) -> str:
    """The field that nests too deeply (for the refusal's ``field``): a field of the format by
    its name, anything else (a key the file made up, which could hold any text) as ``record``."""
    for name in ("metadata", "links"):
        if _depth_over(record.get(name), MAX_DEPTH - 1):
            return name
    return "record"


def readable_id(record: dict[str, Any]) -> str | None:
    """The record's ``id`` when it is one a summary can show (a short clean string), else None."""
    value = record.get("id")
    if isinstance(value, str) and 0 < len(value) <= 64 and _text_problem(value) is None:
        return value
    return None
