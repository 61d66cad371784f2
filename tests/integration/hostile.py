"""Hostile input for the daemon's sockets: Hypothesis strategies, the answers a frame must get,
and a runner that sends frames to a real daemon and checks every answer and the store.

Used by tests/integration/test_hostile_input_fast.py (a few hundred inputs, in ``make test``)
and tests/slow/test_hostile_input.py (ten thousand and more).

What a frame must get back follows from JSON-RPC 2.0 and PROTOCOL.md alone:

- every non-blank line gets exactly one answer, except a well-formed notification (a request
  object with no ``id``), which gets none;
- an answer is a JSON-RPC 2.0 response object carrying the request's ``id``, or ``id`` null
  when the id could not be read (a parse error, an invalid request, an oversize frame);
- its error code is one of PROTOCOL.md's table, and never 1003 (the store is healthy: an input
  error is the caller's, never "store unavailable") nor 1004 (one client, one request at a time);
- a refused request changes nothing: the row count of every table and the audit chain's head are
  the same after the answer as before the request.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from memoryd.store.driver import sqlite_module
from tests.integration.harness import DaemonHandle, hermetic_env, pg_connection, render_toml

#: PROTOCOL.md's error table, written out here so the test does not read it from the code under test.
CONTRACT_CODES = frozenset({-32700, -32600, -32601, -32602, 1001, 1002, 1003, 1004, 1005, 1006, 1007})
#: Codes an answer may carry with ``id`` null although the request had an id: the id was unreadable.
NULL_ID_CODES = frozenset({-32700, -32600, 1001})
#: Codes that are never the right answer to one client's bad input on a healthy daemon.
NEVER_FOR_INPUT = frozenset({1003, 1004})

#: The owner every generated request uses unless a mutation changes it.
AGENT = "hostile-a"
SESSIONS = tuple(f"hostile-s{i}" for i in range(4))
MAX_FRAME_BYTES = 1_048_576  # the daemon's default max_frame_bytes
READ_TIMEOUT_S = 60.0

#: Config for a daemon that only the test's requests change: the time-driven passes are due
#: at start and then not for days, so a refused request's before/after snapshot is exact.
QUIET_CONFIG: dict[str, Any] = {
    "retention_interval_s": 1_000_000.0,
    "decay_interval_s": 1_000_000.0,
    "prune_interval_s": 1_000_000.0,
    "tick_interval_s": 1_000_000.0,
    "governor_enabled": False,
}

#: Methods that change no row when they succeed. After any other success (and after a method
#: registered later) the runner waits for the work it queued before the next snapshot.
READ_ONLY = frozenset({"memory.get", "memory.search", "memory.list", "memory.export", "daemon.ping",
                       "daemon.status", "review.list", "queue.list", "audit.verify"})


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


# -- placeholders resolved when a frame is sent ---------------------------------------------------

@dataclass(frozen=True)
class MemRef:
    """An id from the runner's pool of memories (seeded and acknowledged), chosen at send time."""

    index: int


@dataclass(frozen=True)
class Big:
    """A long string: ``unit`` repeated ``count`` times (cheap to draw, costly to take in)."""

    unit: str
    count: int


@dataclass(frozen=True)
class Deep:
    """A value nested ``depth`` levels deep (``[[[...]]]`` or ``{"a":{"a":...}}``), spliced in as text."""

    depth: int
    opener: str = "["


@dataclass(frozen=True)
class Frame:
    """One input. ``raw`` bytes are sent as they are; otherwise ``obj`` is encoded as JSON.

    ``encoding``: ``ascii`` escapes every non-ASCII character (lone surrogates become ``\\udXXX``
    escapes), ``utf8`` writes them raw (lone surrogates as invalid UTF-8 bytes).
    """

    admin: bool
    raw: bytes | None = None
    obj: Any = None
    encoding: str = "ascii"
    ending: bytes = b"\n"
    label: str = ""


# -- strategies ---------------------------------------------------------------------------------
# Built once and cached: a Hypothesis strategy costs far more to build and validate than to draw.

EDGE_STRINGS = [
    "", " ", "\t\n", "\x00", "a\x00b", "\ud800", "\udfff", "x\udc80y", "\ud83d", "\ufeff", "\u202e",
    "\u2028\u2029", "\uffff", "\ufffe", "\U0010ffff", "e\u0301", "\U0001f600", "ǅ", "İ", "ß", "ﬃ",
    "mem_", "mem_01J00000000000000000000000", "mem_" + "Z" * 26, "mem_" + "I" * 26, "prp_", "fgt_",
    "' OR 1=1 --", "'); DROP TABLE memories; --", '"', "\\", "%s%n", "{}", "[]", "NaN", "null", "true",
    "0", "-1", "1e400", "__proto__", "_private", "auto", "agent", "org",
    "2026-13-45T25:61:61Z", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00",
    "0000-00-00T00:00:00Z", "9999-12-31T23:59:59Z", "1970-01-01T00:00:00Z", "2024-02-29T12:00:00+14:00",
    "0999-06-01T00:00:00Z", "2026-01-01T00:00:00", "2026-01-01", "now", "2026-01-01T00:00:00.123456789Z",
    'NEAR(a b)', '"unterminated', "a OR", "*", "content:x", "^x", "a AND NOT b", '"a" "b"', "-x",
]
EDGE_INTS = [0, -1, 1, 2**31, 2**31 - 1, -(2**31), 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1,
             10**400, -(10**400), 10**4000]
#: NaN and the infinities are not JSON: a frame holding one is a parse error.
EDGE_FLOATS = [0.0, -0.0, 0.5, 1.0000001, -1e-300, 5e-324, 1e308, 1.7976931348623157e308, -1e308,
               math.nan, math.inf, -math.inf]
PASSES = ["embed", "classify", "extract", "consolidate", "reflect", "decay", "retention"]
KINDS = ["auto", "fact", "decision", "preference", "procedure", "event", "task", "observation",
         "conversation"]
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of ``choices``, drawn with the given weights (shrinking moves toward the first)."""
    total = sum(w for w, _ in choices)

    @st.composite
    def pick(draw: st.DrawFn) -> Any:
        n = draw(st.integers(0, total - 1))
        for w, strategy in choices:
            if n < w:
                return draw(strategy)
            n -= w
        raise AssertionError("unreachable")

    return pick()


def _characters() -> st.SearchStrategy[str]:
    # Every code point, lone surrogates (category Cs) often: they are what JSON's \udXXX escapes
    # decode to, and what UTF-8 cannot carry.
    return st.one_of(st.characters(codec=None, exclude_categories=()),
                     st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, codec=None,
                                   exclude_categories=()))


@functools.cache
def unicode_text(max_size: int) -> st.SearchStrategy[str]:
    # Drawn as a list of characters: st.text() drops surrogates from a one_of alphabet.
    return st.lists(_characters(), max_size=max_size).map("".join)


@functools.cache
def any_text(max_size: int = 40) -> st.SearchStrategy[str]:
    return weighted((3, st.text(max_size=max_size)), (2, unicode_text(max_size)),
                    (2, st.sampled_from(EDGE_STRINGS)))


@functools.cache
def big_strings() -> st.SearchStrategy[Big]:
    units = st.sampled_from(["x", "é", "\U0001f600", "\x00", " ", "\ud800", "ab "])
    # Around the 65,536-byte content limit, and now and then over the 1 MiB frame limit.
    counts = weighted((4, st.integers(1, 70_000)),
                      (3, st.sampled_from([16_384, 21_845, 32_768, 65_535, 65_536, 65_537])),
                      (1, st.sampled_from([300_000, 600_000])))
    return st.builds(Big, units, counts)


@functools.cache
def deep_values() -> st.SearchStrategy[Deep]:
    return st.builds(Deep, st.sampled_from([2, 50, 400, 800, 990, 1_000, 1_100, 5_000, 100_000]),
                     st.sampled_from(["[", "{"]))


@functools.cache
def scalars() -> st.SearchStrategy[Any]:
    return weighted(
        (2, st.none()), (2, st.booleans()), (4, st.integers()), (2, st.sampled_from(EDGE_INTS)),
        (3, st.floats(allow_nan=False, allow_infinity=False)), (1, st.sampled_from(EDGE_FLOATS)),
        (8, any_text()),
    )


@functools.cache
def json_values() -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.dictionaries(any_text(12), inner, max_size=4)),
        max_leaves=10,
    )


@functools.cache
def hostile_values() -> st.SearchStrategy[Any]:
    """Anything a careless or malicious client could put where a parameter goes."""
    return weighted((14, json_values()), (2, big_strings()), (1, deep_values()))


@functools.cache
def timestamps() -> st.SearchStrategy[str]:
    good = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1)).map(
        lambda d: d.strftime("%Y-%m-%dT%H:%M:%S") + "Z")
    return st.one_of(good, st.sampled_from(["2026-01-01T00:00:00Z", "2030-06-01T12:00:00+02:00",
                                            "2020-01-01T00:00:00.5-07:00"]))


@functools.cache
def contents() -> st.SearchStrategy[str]:
    """Content a writer might send: mostly sensible, now and then odd (still valid) text."""
    words = st.lists(st.sampled_from(["deploy", "postgres", "uses", "port", "5432", "staging", "alice",
                                      "prefers", "tabs", "the", "build", "is", "green", "ünïcode"]),
                     min_size=1, max_size=8).map(" ".join)
    odd = st.text(st.characters(codec="utf-8"), min_size=1, max_size=60).filter(lambda s: s.strip() != "")
    # A drawn number makes most contents new, so most good writes add a row to account for.
    return st.builds(lambda text, n: f"{text} {n}" if n else text, weighted((3, words), (1, odd)),
                     st.integers(0, 10**9))


def _finite(value: Any) -> bool:
    return not (isinstance(value, float) and not math.isfinite(value))


@functools.cache
def write_params() -> st.SearchStrategy[dict[str, Any]]:
    scope_owner = st.sampled_from([
        ("agent", "agent_id", AGENT), ("user", "user_id", "hostile-u"), ("project", "project", "hostile-p"),
        *[("session", "session_id", s) for s in SESSIONS], ("org", None, None),
    ])

    def build(so: tuple[str, str | None, str | None], content: str, extras: dict[str, Any]) -> dict[str, Any]:
        scope, key, owner = so
        params: dict[str, Any] = {"content": content, "scope": scope, **extras}
        if key is not None:
            params[key] = owner
        return params

    utf8 = st.characters(codec="utf-8")
    extras = st.fixed_dictionaries({}, optional={
        "kind": st.sampled_from(KINDS),
        "importance": st.floats(0, 1),
        "valid_from": st.just("2020-01-01T00:00:00Z"),
        "valid_to": timestamps(),
        "occurred_at": timestamps(),
        "ttl_s": st.floats(1, 1e7),
        "metadata": st.dictionaries(st.text(utf8, max_size=8).filter(lambda k: not k.startswith("_")),
                                    scalars().filter(_finite), max_size=3),
        "idempotency_key": st.text(utf8, min_size=1, max_size=20).filter(str.strip),
    })
    return st.builds(build, scope_owner, contents(), extras)


@functools.cache
def mem_refs() -> st.SearchStrategy[MemRef]:
    return st.builds(MemRef, st.integers(0, 10**6))


@functools.cache
def valid_params(method: str) -> st.SearchStrategy[Any]:
    """A plausible, mostly valid params object for ``method`` (mutations spoil it afterwards)."""
    opt = st.fixed_dictionaries
    if method == "memory.write":
        return write_params()
    if method == "memory.write_many":
        return st.builds(lambda items: {"items": items}, st.lists(write_params(), min_size=1, max_size=4))
    if method == "memory.get":
        return opt({"id": mem_refs()}, optional={
            "include": st.lists(st.sampled_from(["history", "citations", "links", "entities"]), max_size=3)})
    if method == "memory.search":
        return opt({"query": contents(), "agent_id": st.just(AGENT)}, optional={
            "k": st.integers(1, 100), "mode": st.sampled_from(["hybrid", "lexical", "vector"]),
            "scope": st.sampled_from(["agent", "org"]), "as_of": timestamps(), "valid_at": timestamps(),
            "include_candidates": st.booleans(), "kind": st.sampled_from(["fact", "auto"]),
            "session_id": st.sampled_from(SESSIONS), "explain": st.booleans()})
    if method == "memory.supersede":
        by_content = opt({"old_id": mem_refs(), "content": contents(), "agent_id": st.just(AGENT)},
                         optional={"reason": contents()})
        by_id = opt({"old_id": mem_refs(), "new_id": mem_refs(), "agent_id": st.just(AGENT)})
        return weighted((3, by_content), (1, by_id))
    if method == "memory.forget":
        by_id = opt({"id": mem_refs()}, optional={"reason": contents(), "tombstone": st.booleans()})
        by_subject = opt({"subject": st.builds(lambda s: {"session_id": s}, st.sampled_from(SESSIONS))},
                         optional={"tombstone": st.booleans(), "limit": st.integers(1, 100)})
        return weighted((3, by_id), (1, by_subject))
    if method == "memory.list":
        return opt({"agent_id": st.just(AGENT)}, optional={
            "limit": st.integers(1, 100), "scope": st.sampled_from(["agent", "org"]),
            "status": st.sampled_from(["active", "superseded", "forgotten"]),
            "session_id": st.sampled_from(SESSIONS)})
    if method == "memory.export":
        return opt({}, optional={"limit": st.integers(1, 100), "agent_id": st.just(AGENT)})
    if method == "review.list":
        return opt({}, optional={"status": st.sampled_from(["open", "approved", "rejected", "stale"]),
                                 "limit": st.integers(1, 1000)})
    if method == "review.decide":
        proposal_ids = st.text(st.sampled_from(CROCKFORD), min_size=26, max_size=26).map(lambda s: "prp_" + s)
        return opt({"id": proposal_ids, "decision": st.sampled_from(["approve", "reject"])},
                   optional={"note": contents()})
    if method == "queue.list":
        return opt({}, optional={"state": st.sampled_from(["ready", "failed", "leased", "done", "dead"]),
                                 "pass": st.sampled_from(PASSES), "limit": st.integers(1, 10_000)})
    if method == "queue.retry":
        return st.one_of(opt({"ids": st.lists(st.integers(1, 10_000), min_size=1, max_size=5)}),
                         opt({"pass": st.sampled_from(PASSES)}), st.just({"all": True}))
    return st.just({})  # daemon.ping, daemon.status, audit.verify, and methods added later


@functools.cache
def mutated(method: str) -> st.SearchStrategy[Any]:
    """``method``'s params as drawn, or spoilt in one of the ways clients get parameters wrong."""
    params = valid_params(method)
    how_st = weighted((7, st.just("keep")), (5, st.just("set")), (2, st.just("drop")), (2, st.just("add")),
                      (3, st.just("nested")), (1, st.just("replace")))

    @st.composite
    def spoil(draw: st.DrawFn) -> Any:
        p = draw(params)
        how = draw(how_st)
        if how == "keep" or not isinstance(p, dict):
            return p
        p = dict(p)
        keys = sorted(p)
        if how == "drop" and keys:
            del p[draw(st.sampled_from(keys))]
        elif how == "set" and keys:
            p[draw(st.sampled_from(keys))] = draw(hostile_values())
        elif how == "replace":
            return draw(weighted((6, json_values().filter(lambda v: not isinstance(v, dict))),
                                 (1, deep_values())))
        elif how == "nested":
            _spoil_nested(draw, p)
        else:  # "add", or nothing to drop or set
            p[draw(any_text(20))] = draw(hostile_values())
        return p

    return spoil()


def _spoil_nested(draw: st.DrawFn, p: dict[str, Any]) -> None:
    """One level down: a write_many item, the subject, the metadata, the include list."""
    for key in sorted(p):
        inner = p[key]
        if isinstance(inner, list) and inner:
            inner = list(inner)
            i = draw(st.integers(0, len(inner) - 1))
            item = inner[i]
            if isinstance(item, dict) and item:
                item = dict(item)
                item[draw(st.sampled_from(sorted(item)))] = draw(hostile_values())
            else:
                item = draw(hostile_values())
            inner[i] = item
            p[key] = inner
            return
        if isinstance(inner, dict):
            inner = dict(inner)
            name = draw(st.sampled_from(sorted(inner))) if inner else draw(any_text(10))
            inner[name] = draw(hostile_values())
            p[key] = inner
            return
    p[draw(any_text(20))] = draw(hostile_values())


def _has_deep(value: Any) -> bool:
    if isinstance(value, Deep):
        return True
    if isinstance(value, dict):
        return any(_has_deep(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_deep(v) for v in value)
    return False


BAD_IDS = [True, False, [], [1], {}, {"a": 1}]
METHOD_NOISE = ["", "memory", "memory.", ".write", "rpc.discover", "memory.write\x00", "__init__", "dispatch",
                "Memory.Write", "memory.write ", " daemon.ping", "memory..get", "memory.get.extra"]


def requests(agent_methods: Iterable[str], admin_methods: Iterable[str]) -> st.SearchStrategy[Frame]:
    """JSON-RPC request objects, valid-looking or spoilt, for every method of both sockets."""
    agent = sorted(agent_methods)
    admin = sorted(admin_methods)
    every = sorted(set(agent) | set(admin))
    methods_for = {
        on_admin: weighted((40, st.sampled_from(admin if on_admin else agent)), (4, st.sampled_from(every)),
                           (3, st.sampled_from(METHOD_NOISE)), (3, any_text(30)))
        for on_admin in (False, True)
    }
    jsonrpc_st = weighted((40, st.just("2.0")),
                          (2, st.sampled_from([MISSING, "1.0", 2.0, 2, None, "2.0 ", "2"])))
    id_st = weighted((34, st.integers(0, 2**31)), (3, st.text(max_size=20)), (1, st.none()),
                     (1, st.just(MISSING)), (1, st.sampled_from(EDGE_INTS[:-1])),
                     (1, st.floats(allow_nan=False, allow_infinity=False)), (1, st.sampled_from(BAD_IDS)),
                     (1, unicode_text(8)))
    method_field_st = weighted((46, st.just(True)), (1, st.sampled_from([MISSING, None, 1, ["daemon.ping"],
                                                                         {"name": "daemon.ping"}])))
    shape_st = weighted((36, st.just("params")), (2, st.just("none")), (2, st.just("missing")))
    encoding_st = weighted((6, st.just("ascii")), (1, st.just("utf8")))
    ending_st = weighted((8, st.just(b"\n")), (1, st.just(b"\r\n")), (1, st.just(b" \t\n")))

    @st.composite
    def build(draw: st.DrawFn) -> Frame:
        on_admin = draw(st.booleans())
        method = draw(methods_for[on_admin])
        params = draw(mutated(method if method in every else ""))
        obj: dict[str, Any] = {}
        jsonrpc = draw(jsonrpc_st)
        if jsonrpc is not MISSING:
            obj["jsonrpc"] = jsonrpc
        req_id = draw(id_st)
        if req_id is not MISSING:
            obj["id"] = req_id
        m = draw(method_field_st)
        if m is True:
            obj["method"] = method
        elif m is not MISSING:
            obj["method"] = m
        shape = draw(shape_st)
        if shape == "params":
            obj["params"] = params
        elif shape == "none":
            obj["params"] = None
        if draw(st.integers(0, 19)) == 0:
            obj[draw(any_text(10))] = draw(json_values())
        if "id" not in obj and _has_deep(obj):
            # Where the parser's depth limit falls differs between processes: a deep notification
            # could be answered (a parse error) or not, so deep frames always carry an id.
            obj["id"] = 0
        order = draw(st.permutations(sorted(obj, key=str)))
        obj = {k: obj[k] for k in order}
        return Frame(admin=on_admin, obj=obj, encoding=draw(encoding_st), ending=draw(ending_st),
                     label=f"request {method[:40]!r}")

    return build()


@functools.cache
def garbage() -> st.SearchStrategy[Frame]:
    """Lines that are not JSON-RPC requests: random bytes, text that is not JSON, JSON of other shapes."""
    raw_bytes = st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" "))
    lines_bytes = st.binary(max_size=200)  # may hold several lines, or blank ones
    not_json = any_text(80).map(lambda s: s.encode("utf-8", "surrogatepass"))
    broken_json = st.sampled_from([
        b'{"jsonrpc": "2.0", "id": 1, "method": "daemon.ping"', b'{"jsonrpc": "2.0", "id": 1,}',
        b"{'jsonrpc': '2.0'}", b'{"id": 1e400, "jsonrpc": "2.0", "method": "daemon.ping"}',
        b'{"id": NaN}', b'{"id": Infinity, "jsonrpc": "2.0", "method": "daemon.ping"}',
        b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "daemon.ping"}',
        b"\xef\xbb\xbf" + b'{"jsonrpc": "2.0", "id": 7, "method": "daemon.ping"}',
        '{"jsonrpc": "2.0", "id": 8, "method": "daemon.ping"}'.encode("utf-16-le"),
        '{"jsonrpc": "2.0", "id": 9, "method": "daemon.ping"}'.encode("utf-32"),
        b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "daemon.ping"}',
        b'{"jsonrpc": "2.0", "id": "\xed\xa0\x80", "method": "daemon.ping"}',
        b'{"jsonrpc": "2.0", "id": 10, "method": "daemon.ping", "params": {"x": "\\u0000"}}',
        b'{"jsonrpc": "2.0", "id": 11, "method": "daemon.ping"}{"jsonrpc": "2.0"}',
        b'{"jsonrpc": "2.0", "id": 12, "method": "daemon.ping"}\n{"jsonrpc": "2.0", "id": 13, "method": 5}',
        b"[" * 100_000 + b"]" * 100_000, b"\x00", b"\r", b"   ", b"\x0b\x0c",
    ])
    shapes = json_values().map(lambda v: json.dumps(v).encode())
    data = weighted((2, raw_bytes), (1, lines_bytes), (2, not_json), (1, broken_json), (2, shapes))
    return st.builds(lambda admin, raw: Frame(admin=admin, raw=raw, label="garbage"), st.booleans(), data)


@functools.cache
def oversize() -> st.SearchStrategy[Frame]:
    """Frames over max_frame_bytes: a request whose content is too long, or a long junk line."""
    def build(admin: bool, extra: int, junk: bool) -> Frame:
        if junk:
            return Frame(admin=admin, raw=b"z" * (MAX_FRAME_BYTES + extra), label="oversize junk")
        return Frame(admin=admin, obj={"jsonrpc": "2.0", "id": 5, "method": "memory.write",
                                       "params": {"content": Big("x", MAX_FRAME_BYTES + extra),
                                                  "agent_id": AGENT}}, label="oversize request")
    return st.builds(build, st.booleans(), st.integers(1, 200_000), st.booleans())


def frames(agent_methods: Iterable[str], admin_methods: Iterable[str], *,
           with_oversize: bool = True) -> st.SearchStrategy[Frame]:
    """The mix: mostly requests (valid-looking, spoilt), a good share of garbage, a few oversize."""
    parts: list[tuple[int, st.SearchStrategy[Frame]]] = [(150, requests(agent_methods, admin_methods)),
                                                         (40, garbage())]
    if with_oversize:
        parts.append((1, oversize()))
    return weighted(*parts)


# -- the oracle: what a line must get back ---------------------------------------------------------

def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # RFC 8259 has no NaN or Infinity


@dataclass(frozen=True)
class Expect:
    """The answers one line must get: how many (0 or 1), and the ids they may carry."""

    answers: int
    ids: tuple[Any, ...] = ()
    notification: bool = False


def expect(line: bytes, sent_id: Any = MISSING) -> Expect:
    """What JSON-RPC 2.0 and PROTOCOL.md say one line (without its ``\\n``) gets back."""
    if len(line) > MAX_FRAME_BYTES:
        return Expect(1, (None,))
    if not line.strip():
        return Expect(0)  # blank lines are skipped (docs/protocol.md "Framing decisions")
    try:
        # UTF-8 only (PROTOCOL.md); a leading byte order mark may be ignored (RFC 8259 section 8.1).
        obj = json.loads(line.decode("utf-8-sig"), parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError):
        return Expect(1, (None,))
    except RecursionError:
        # Where exactly the parser's depth limit falls differs between processes.
        return Expect(1, (None,) if sent_id is MISSING else (None, sent_id))
    if not isinstance(obj, dict):
        return Expect(1, (None,))
    if "id" not in obj:
        method, params = obj.get("method"), obj.get("params")
        if (obj.get("jsonrpc") == "2.0" and isinstance(method, str) and method
                and (params is None or isinstance(params, dict))):
            return Expect(0, notification=True)
        return Expect(1, (None,))
    req_id = obj["id"]
    if req_id is None or isinstance(req_id, bool) or not isinstance(req_id, str | int | float):
        return Expect(1, (None,))
    return Expect(1, (req_id, None))  # None only with NULL_ID_CODES (checked per answer)


# -- encoding frames ----------------------------------------------------------------------------------

def _resolve(value: Any, pool: list[str], deep: dict[str, Deep]) -> Any:
    if isinstance(value, MemRef):
        return pool[value.index % len(pool)] if pool else "mem_" + "0" * 26
    if isinstance(value, Big):
        return value.unit * value.count
    if isinstance(value, Deep):
        token = f"@@deep{len(deep)}@@"
        deep[token] = value
        return token
    if isinstance(value, dict):
        return {k: _resolve(v, pool, deep) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, pool, deep) for v in value]
    return value


def _deep_text(d: Deep) -> str:
    if d.opener == "[":
        return "[" * d.depth + "]" * d.depth
    return '{"a":' * d.depth + "1" + "}" * d.depth


def encode(frame: Frame, pool: list[str]) -> tuple[bytes, Any]:
    """The bytes to send for ``frame`` and the id it carries (MISSING when none or raw)."""
    data, obj = encode_resolved(frame, pool)
    sent_id = obj.get("id", MISSING) if isinstance(obj, dict) else MISSING
    return data, sent_id


def encode_resolved(frame: Frame, pool: list[str]) -> tuple[bytes, Any]:
    """The bytes to send for ``frame`` and the request object they encode (None for raw bytes)."""
    if frame.raw is not None:
        return frame.raw + frame.ending, None
    deep: dict[str, Deep] = {}
    obj = _resolve(frame.obj, pool, deep)
    text = json.dumps(obj, ensure_ascii=frame.encoding == "ascii", allow_nan=True)
    for token, d in deep.items():
        text = text.replace(json.dumps(token), _deep_text(d))
    return text.encode("utf-8", "surrogatepass") + frame.ending, obj


# -- the store, seen directly ------------------------------------------------------------------------

class StoreProbe:
    """Row counts of every table and the audit chain's head, read from the daemon's store: its
    SQLite file, or its PostgreSQL database (``?`` placeholders and JSON as text on both)."""

    def __init__(self, daemon: DaemonHandle):
        self._stack = contextlib.ExitStack()
        self.conn: Any
        if daemon.db_url is not None:
            self.conn = self._stack.enter_context(pg_connection(daemon.db_url))
            listing = ("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                       "AND table_type = 'BASE TABLE' ORDER BY table_name")
        else:
            # Not bound to its thread: a runner may be built in one thread and driven from another.
            self.conn = sqlite_module().connect(str(daemon.db_path), timeout=10.0, check_same_thread=False)
            self.conn.isolation_level = None
            self._stack.callback(self.conn.close)
            listing = ("SELECT name FROM sqlite_master WHERE type = 'table' "
                       "AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name")
        self.tables = [name for (name,) in self.conn.execute(listing).fetchall()]

    def close(self) -> None:
        self._stack.close()

    def snapshot(self) -> tuple[Any, ...]:
        counts = tuple(self.conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in self.tables)
        head = self.conn.execute("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1").fetchone()
        return (counts, tuple(head) if head else None)

    def diff(self, before: tuple[Any, ...], after: tuple[Any, ...]) -> str:
        changed = [f"{t}: {a} -> {b}" for t, a, b in zip(self.tables, before[0], after[0], strict=True)
                   if a != b]
        if before[1] != after[1]:
            changed.append(f"audit head: {before[1]} -> {after[1]}")
        return "; ".join(changed)

    def erased_with(self, forgotten_ids: Iterable[str]) -> set[str]:
        """Ids that forgets of ``forgotten_ids`` took with them: a forget by id erases the row's
        copies too (the same text under the same owner), which the request records."""
        wanted = set(forgotten_ids)
        taken: set[str] = set()
        for subject, memory_ids in self.conn.execute("SELECT subject, memory_ids FROM forget_requests"):
            if json.loads(subject).get("id") in wanted:
                taken.update(json.loads(memory_ids))
        return taken

    def settle(self, active_passes: Iterable[str] = (), timeout_s: float = 30.0) -> tuple[Any, ...]:
        """Wait until work a success queued has run, and return the store's snapshot.

        ``active_passes`` are the passes that run on this daemon (the others wait for a model
        that is off): the store is settled when none of their jobs is due or leased and two
        snapshots in a row agree.
        """
        names = sorted(active_passes)
        marks = ",".join("?" * len(names))
        due_sql = (f"SELECT count(*) FROM jobs WHERE pass IN ({marks}) AND (state = 'leased' OR "
                   "(state = 'ready' AND run_after <= ?))")
        deadline = time.monotonic() + timeout_s
        last = self.snapshot()
        while time.monotonic() < deadline:
            due = self.conn.execute(due_sql, (*names, time.time())).fetchone()[0] if names else 0
            if not due:
                now = self.snapshot()
                if now == last:
                    return now
                last = now
            else:
                time.sleep(0.01)
                last = self.snapshot()
        raise AssertionError(f"the store kept changing for {timeout_s:.0f}s after a request")

    def statuses(self, ids: Iterable[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        chunk: list[str] = []
        for mid in [*ids, None]:
            if mid is not None:
                chunk.append(mid)
            if chunk and (mid is None or len(chunk) == 500):
                marks = ",".join("?" * len(chunk))
                out.update(self.conn.execute(f"SELECT id, status FROM memories WHERE id IN ({marks})",
                                             chunk).fetchall())
                chunk = []
        return out


# -- the runner ------------------------------------------------------------------------------------------

class Conn:
    """A raw connection that reads answers line by line with a deadline."""

    def __init__(self, path: Path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(READ_TIMEOUT_S)
        self.sock.connect(str(path))
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_line(self) -> bytes:
        while b"\n" not in self.buf:
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                raise AssertionError(f"no answer within {READ_TIMEOUT_S:.0f}s on {self.path.name}: "
                                     "the daemon hangs on this input") from None
            if not chunk:
                raise AssertionError(f"the daemon closed the connection on {self.path.name}")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line


@dataclass
class Tally:
    """What a run did, for the report the lead quotes."""

    inputs: int = 0
    lines: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    notifications: int = 0
    refusals_checked: int = 0
    pings: int = 0
    acknowledged: int = 0
    lost: int = 0
    by_method: Counter[str] = field(default_factory=Counter)

    def as_json(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "lines": self.lines,
                "answers_by_code": dict(sorted(self.answers.items())),
                "unanswered_notifications": self.notifications, "refusals_checked": self.refusals_checked,
                "pings": self.pings, "writes_acknowledged": self.acknowledged, "rows_lost": self.lost,
                "requests_by_method": dict(self.by_method.most_common(40))}


class HostileRun:
    """Sends frames to one daemon (agent and operator sockets) and checks everything PROTOCOL.md promises."""

    def __init__(self, daemon: DaemonHandle, *, check_store: bool = True):
        self.daemon = daemon
        #: Compare the store before and after each refused request (only when this runner is the
        #: daemon's only client: other clients' writes would show up in the comparison).
        self.check_store = check_store
        self.agent = Conn(daemon.socket)
        self.admin = Conn(daemon.admin_socket)
        self.probe = StoreProbe(daemon)
        self.tally = Tally()
        #: Memory ids requests may name (MemRef); seeded, then every acknowledged write joins.
        self.pool: list[str] = []
        #: Acknowledged ids and the owner fields they were written with: none may be lost.
        self.acked: dict[str, dict[str, str]] = {}
        self.forgotten_ids: set[str] = set()
        self.forgotten_subjects: set[tuple[str, str]] = set()
        self._ping_seq = 0
        status = daemon.call("daemon.status")
        #: Passes that run here (the model-backed ones wait for models that are off).
        self.active_passes = [name for name, p in status["passes"].items() if p.get("state") == "active"]
        agent, admin = method_tables()
        self.methods = set(agent) | set(admin)

    def close(self) -> None:
        self.agent.close()
        self.admin.close()
        self.probe.close()

    # -- setup ----------------------------------------------------------------------------------
    def seed(self, n: int = 40) -> None:
        items = []
        for i in range(n):
            scope, key, owner = [("agent", "agent_id", AGENT), ("session", "session_id", SESSIONS[i % 4]),
                                 ("user", "user_id", "hostile-u")][i % 3]
            items.append({"content": f"seed memory {i} about the staging deploy {uuid.uuid4().hex[:6]}",
                          "scope": scope, key: owner})
        result = self.daemon.call("memory.write_many", {"items": items})
        for item, res in zip(items, result["results"], strict=True):
            self._ack(res["id"], item)

    def _ack(self, mid: Any, params: Any) -> None:
        if not isinstance(mid, str):
            raise AssertionError(f"an acknowledged write answered id {mid!r}")
        owners = {f: params[f] for f in ("agent_id", "user_id", "project", "session_id")
                  if isinstance(params, dict) and isinstance(params.get(f), str)}
        if mid not in self.acked:
            self.acked[mid] = owners
            self.pool.append(mid)
            self.tally.acknowledged += 1

    # -- one input --------------------------------------------------------------------------------
    def send(self, frame: Frame) -> list[dict[str, Any]]:
        """Send one frame, read and check its answers, check the store if it was refused; return
        the answers."""
        data, obj = encode_resolved(frame, self.pool)
        sent_id = obj.get("id", MISSING) if isinstance(obj, dict) else MISSING
        conn = self.admin if frame.admin else self.agent
        lines = data.split(b"\n")
        assert lines[-1] == b"", "frames end with a newline"
        expects = [expect(line, sent_id) for line in lines[:-1]]
        wanted = sum(e.answers for e in expects)
        before = self.probe.snapshot() if self.check_store else None
        conn.send(data)
        answers = [self._parse_answer(conn.read_line(), data) for _ in range(wanted)]
        self.tally.inputs += 1
        self.tally.lines += len(expects)
        self.tally.notifications += sum(e.notification for e in expects)
        method = obj.get("method") if isinstance(obj, dict) else None
        if isinstance(method, str):
            self.tally.by_method[method if method in self.methods else "(other names)"] += 1
        self._match(answers, expects, data)
        errors = [a for a in answers if "error" in a]
        refused = answers and len(errors) == len(answers) and not any(e.notification for e in expects)
        if refused and self.check_store:
            assert before is not None
            after = self.probe.snapshot()
            if after != before:
                raise AssertionError(f"a refused request changed the store "
                                     f"({self.probe.diff(before, after)}):\n  sent {_show(data)}\n"
                                     f"  got {answers}")
            self.tally.refusals_checked += 1
            return answers
        if any(e.notification for e in expects):
            # Executed, never answered: whatever it may have forgotten is excused from the count of
            # lost rows, and the store settles before the next snapshot.
            self._note_forget(obj)
            self._barrier(conn)
            if self.check_store:
                self.probe.settle(self.active_passes)
        elif self.check_store and isinstance(method, str) and method not in READ_ONLY:
            self.probe.settle(self.active_passes)
        for answer in answers:
            if "result" in answer and isinstance(obj, dict):
                self._note_success(obj, answer["result"])
        return answers

    def _barrier(self, conn: Conn) -> None:
        """Wait until every write a notification queued on ``conn`` has committed.

        Writes commit in the order they were queued, and a request's handler queues its write
        before it first waits, so the answer to a later request that goes through the write
        queue (a supersede of an id that does not exist: 1002) comes after theirs.
        """
        self._ping_seq += 1
        tag = f"barrier-{self._ping_seq}"
        conn.send(json.dumps({"jsonrpc": "2.0", "id": tag, "method": "memory.supersede", "params": {
            "old_id": "mem_" + "0" * 26, "content": "barrier", "agent_id": AGENT}}).encode() + b"\n")
        msg = json.loads(conn.read_line())
        assert msg.get("id") == tag and msg["error"]["code"] == 1002, msg

    def _parse_answer(self, line: bytes, sent: bytes) -> dict[str, Any]:
        try:
            msg = json.loads(line)
        except ValueError as exc:
            raise AssertionError(f"the answer is not JSON ({exc}): {line[:300]!r}\n"
                                 f"  sent {_show(sent)}") from None
        ok = (isinstance(msg, dict) and msg.get("jsonrpc") == "2.0" and "id" in msg
              and (("result" in msg) != ("error" in msg)))
        if not ok:
            raise AssertionError(f"not a JSON-RPC 2.0 response: {line[:300]!r}\n  sent {_show(sent)}")
        if "error" in msg:
            err = msg["error"]
            if not (isinstance(err, dict) and isinstance(err.get("code"), int)
                    and isinstance(err.get("message"), str) and err["message"]):
                raise AssertionError(f"malformed error object: {err!r}\n  sent {_show(sent)}")
            code = err["code"]
            self.tally.answers[str(code)] += 1
            if code not in CONTRACT_CODES:
                raise AssertionError(f"error code {code} is not in PROTOCOL.md's table: {err!r}\n"
                                     f"  sent {_show(sent)}")
            if code in NEVER_FOR_INPUT:
                raise AssertionError(f"error {code} answered an input error: {err['message']}\n"
                                     f"  sent {_show(sent)}")
        else:
            self.tally.answers["ok"] += 1
        return msg

    def _match(self, answers: list[dict[str, Any]], expects: list[Expect], sent: bytes) -> None:
        """Each answer belongs to one expected line: its id is that line's, or null where allowed."""
        open_ids = [e.ids for e in expects if e.answers]
        for answer in answers:
            aid = answer["id"]
            code = answer.get("error", {}).get("code")
            for i, ids in enumerate(open_ids):
                # JSON gives the id back as it was sent: same value, same type (1 is not 1.0).
                id_ok = aid is not None and any(aid == x and type(aid) is type(x) for x in ids)
                # Null only where the id could not be read, or the request's id was null itself.
                null_ok = aid is None and None in ids and (ids == (None,) or code in NULL_ID_CODES)
                if id_ok or null_ok:
                    del open_ids[i]
                    break
            else:
                raise AssertionError(f"answer {answer} does not carry the request's id (expected one of "
                                     f"{open_ids})\n  sent {_show(sent)}")

    def _note_forget(self, req: Any) -> None:
        params = req.get("params") if isinstance(req, dict) and req.get("method") == "memory.forget" else None
        if not isinstance(params, dict):
            return
        if isinstance(params.get("id"), str):
            self.forgotten_ids.add(params["id"])
        subject = params.get("subject")
        if isinstance(subject, dict):
            self.forgotten_subjects.update((k, v) for k, v in subject.items() if isinstance(v, str))

    def _note_success(self, req: dict[str, Any], result: Any) -> None:
        method, params = req.get("method"), req.get("params")
        if not isinstance(result, dict):
            return
        if method == "memory.write":
            self._ack(result.get("id"), params)
        elif method == "memory.write_many":
            items = params.get("items", []) if isinstance(params, dict) else []
            for item, res in zip(items, result.get("results", []), strict=False):
                self._ack(res.get("id"), item)
        elif method == "memory.supersede":
            new_id = result.get("new_id")
            if isinstance(new_id, str) and new_id not in self.acked:
                owners = self.probe.conn.execute(
                    "SELECT agent_id, user_id, project, session_id FROM memories WHERE id = ?",
                    (new_id,)).fetchone()
                fields = ("agent_id", "user_id", "project", "session_id")
                self._ack(new_id, {f: v for f, v in zip(fields, owners or (), strict=False) if v})
        elif method == "memory.forget":
            self._note_forget(req)

    # -- batches and the end ---------------------------------------------------------------------
    def feed(self, batch: list[Frame]) -> None:
        """Send a batch of frames, then show both sockets still answer a ping."""
        for frame in batch:
            self.send(frame)
        self.ping()

    def ping(self) -> None:
        for conn in (self.agent, self.admin):
            self._ping_seq += 1
            tag = f"ping-{self._ping_seq}"
            conn.send(json.dumps({"jsonrpc": "2.0", "id": tag, "method": "daemon.ping"}).encode() + b"\n")
            msg = json.loads(conn.read_line())
            assert msg.get("id") == tag and msg["result"]["pid"] == self.daemon.proc.pid, msg  # type: ignore[union-attr]
            self.tally.pings += 1

    def lost_rows(self) -> list[str]:
        """Acknowledged ids no longer readable, unless a successful forget named them (or named
        a copy of their text, which a forget by id takes with it)."""
        self.probe.settle(self.active_passes)
        statuses = self.probe.statuses(self.acked)
        copies = self.probe.erased_with(self.forgotten_ids)
        lost = []
        for mid, owners in self.acked.items():
            status = statuses.get(mid)
            if status not in (None, "forgotten", "deleting"):
                continue
            excused = mid in self.forgotten_ids or mid in copies or any(
                (f, v) in self.forgotten_subjects for f, v in owners.items())
            if not excused:
                lost.append(f"{mid} ({status or 'absent'})")
        self.tally.lost = len(lost)
        return lost


def _show(data: bytes) -> str:
    return repr(data[:400]) + (f"... ({len(data)} bytes)" if len(data) > 400 else "")


def method_tables() -> tuple[list[str], list[str]]:
    """The methods the daemon registers on the agent and on the operator socket (from its dispatcher)."""
    from memoryd.config import Config
    from memoryd.service.handlers import Dispatcher

    dispatcher = Dispatcher(Config(), engine=None, committer=None, status=dict,  # type: ignore[arg-type]
                            embedder=None)  # type: ignore[arg-type]
    try:
        return sorted(dispatcher.agent_methods), sorted(dispatcher.admin_methods)
    finally:
        dispatcher.close()


def batches(agent_methods: Iterable[str], admin_methods: Iterable[str], *, max_size: int,
            min_size: int = 1, with_oversize: bool = True) -> st.SearchStrategy[list[Frame]]:
    """Lists of frames: the runner sends one list, then pings both sockets."""
    return st.lists(frames(agent_methods, admin_methods, with_oversize=with_oversize),
                    min_size=min_size, max_size=max_size)


def run_until(target: int, run: Callable[[], None], tally: Tally) -> None:
    """Call the Hypothesis-driven ``run`` until ``target`` inputs were sent."""
    while tally.inputs < target:
        run()


@contextlib.contextmanager
def quiet_daemon(name: str = "hostile", config: dict[str, Any] | None = None,
                 db_url: str | None = None) -> Iterator[DaemonHandle]:
    """A ``memoryd run`` (``--embedder none --llm none``) on a short temp dir with QUIET_CONFIG,
    settled (its start-up ticks have run), stopped with SIGTERM at the end (exit 0 required).
    ``db_url``: a PostgreSQL database for its store (None: SQLite in its data dir)."""
    root = Path(tempfile.mkdtemp(prefix="md-", dir="/tmp"))
    home = root / name
    home.mkdir(mode=0o700)
    handle = DaemonHandle(name=name, home=home, data_dir=home / "data", socket=home / "s" / "memoryd.sock",
                          env=hermetic_env(home), db_url=db_url)
    handle.config_path = home / "config.toml"
    handle.config_path.write_text(render_toml({**QUIET_CONFIG, **(config or {})}), encoding="utf-8")
    try:
        handle.start()
        yield handle
        rc = handle.stop()
        assert rc == 0, f"memoryd exited with {rc} on SIGTERM:\n{handle.stderr_tail()}"
    except BaseException:
        sys.stderr.write(f"--- memoryd stderr ({name}) ---\n{handle.stderr_tail()}\n")
        raise
    finally:
        handle.kill()
        shutil.rmtree(root, ignore_errors=True)


def report(tally: Tally, name: str, out_dir: Path) -> Path:
    """Write the run's counts as JSON (and echo them to stdout, seen with ``pytest -s``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    text = json.dumps(tally.as_json(), indent=1, ensure_ascii=True)
    path.write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(f"\n{name}: {path}\n{text}\n")
    return path
