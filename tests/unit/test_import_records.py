"""`memoryd import` reads a hostile export file without crashing: every bad line is refused alone.

Hypothesis draws export files: valid memory records, records with one field spoilt (a wrong
type for every field of docs/export-format.md, values out of range, bad timestamps, NUL, lone
surrogates, deep nesting, huge strings), and raw lines (random bytes, bad UTF-8, JSON of other
shapes, nesting far past the JSON reader's limit). The parse/validate layer
(exchange/exportfile.py and exchange/records.py) must never raise; it must refuse a spoilt
record by its line and the field that was spoilt, and pass every valid one, whose write params
the daemon's own validation (service/validation.parse_write_request) then accepts. No daemon:
tests/integration/test_export_import.py imports such a file into real daemons on both backends.

The fast tests draw fifty files each; tests/slow/test_import_fuzz.py draws thousands.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.clock import to_rfc3339
from memoryd.config import Config
from memoryd.exchange import exportfile
from memoryd.exchange.importer import Importer
from memoryd.service.validation import parse_write_request

HEADER = json.dumps({"record": "header", "format": "memoryd-export", "format_version": 1,
                     "memoryd_version": "test", "exported_at": "2025-01-01T00:00:00.000000Z",
                     "filters": {}, "with_vectors": False, "total": 0})
CFG = Config()
FAST = settings(max_examples=50, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# -- valid records ------------------------------------------------------------------------

clean_char = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
clean_text = st.text(clean_char, min_size=1, max_size=40).filter(lambda t: t.strip() != "")
stamps = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                      timezones=st.just(UTC)).map(to_rfc3339)
json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | \
    st.floats(allow_nan=False, allow_infinity=False) | st.text(clean_char, max_size=20)
json_values = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(clean_char, max_size=8), inner, max_size=4),
                           max_leaves=12)
metadata = st.dictionaries(st.text(clean_char, min_size=1, max_size=8).filter(lambda k: k[0] != "_"),
                           json_values, max_size=4)
OWNER_OF = {"agent": "agent_id", "user": "user_id", "session": "session_id", "project": "project"}


@st.composite
def valid_records(draw: st.DrawFn) -> dict[str, Any]:
    scope = draw(st.sampled_from(["agent", "user", "session", "project", "org"]))
    record: dict[str, Any] = {
        "record": "memory", "id": "mem_" + draw(st.text("0123456789ABCDEFGHJKMNPQRSTVWXYZ", min_size=1,
                                                        max_size=26)),
        "content": draw(clean_text), "kind": draw(st.sampled_from(["auto", *CFG.kinds])), "scope": scope,
        "agent_id": None, "user_id": None, "project": None, "session_id": None,
        "status": draw(st.sampled_from(["active", "candidate", "superseded", "rejected", "archived"])),
        "importance": draw(st.floats(0, 1)), "importance_raw": draw(st.floats(0, 1)),
        "access_count": draw(st.integers(0, 2**31 - 1)), "last_accessed_at": draw(st.none() | stamps),
        "occurred_at": draw(st.none() | stamps), "recorded_at": draw(stamps),
        "retired_at": draw(st.none() | stamps), "expires_at": draw(st.none() | stamps),
        "metadata": draw(metadata), "derived": draw(st.booleans()),
        "corroboration": draw(st.integers(1, 2**31 - 1)), "kind_method": draw(st.none() | st.just("rule")),
        "kind_confidence": draw(st.none() | st.floats(0, 1)), "links": [],
        "vector": None,
    }
    if scope != "org":
        record[OWNER_OF[scope]] = draw(clean_text)
    return record


# -- spoilt records: (field, a value wrong for it) ----------------------------------------

# Finite floats only: json.dumps writes inf as Infinity, which is a bad line, not a bad field.
not_text = st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.booleans() \
    | st.lists(st.integers(), max_size=2) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
short = st.text(clean_char, max_size=5)
nul_text = st.builds(lambda a, b: f"{a}\x00{b}", short, short)
surrogate_text = st.builds(lambda a, s: f"{a}{s}", st.text(clean_char, max_size=5),
                           st.sampled_from(["\ud800", "\udfff", "\udc00x"]))
bad_stamps = st.sampled_from(["yesterday", "2025-13-01T00:00:00Z", "2025-06-02T09:15:10",
                              "2025-02-30T00:00:00Z",
                              "", "   ", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00", "1e9"]) \
    | not_text | nul_text


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


TEXT = ("kind", "scope", "status", "agent_id", "user_id", "project", "session_id", "kind_method")
TIMES = ("valid_from", "valid_to", "occurred_at", "recorded_at", "retired_at", "expires_at",
         "last_accessed_at")
SPOILERS: dict[str, st.SearchStrategy[Any]] = {
    "id": not_text | st.just("") | st.text("x", min_size=65, max_size=80) | nul_text | surrogate_text,
    "content": not_text | st.just("   \n\t") | nul_text | surrogate_text | st.none()
    | st.text(clean_char, min_size=1).map(lambda t: t + "\x00" * 3),
    **{name: not_text | nul_text | surrogate_text for name in TEXT},
    **{name: bad_stamps for name in TIMES},
    **{name: st.booleans() | st.text(max_size=4) | st.lists(st.floats(0, 1), max_size=2)
       | st.floats(min_value=1.0000001, allow_infinity=False, allow_nan=False)
       | st.floats(max_value=-0.0000001, allow_infinity=False, allow_nan=False)
       | st.just(10**400) for name in ("importance", "importance_raw", "kind_confidence")},
    **{name: st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4)
       | st.integers(max_value=-1) | st.integers(min_value=2**31)
       for name in ("corroboration", "access_count")},
    "derived": st.integers() | st.text(max_size=3) | st.lists(st.booleans(), max_size=2),
    "metadata": not_text.filter(lambda v: not isinstance(v, dict)) | st.builds(lambda k: {k: 1}, nul_text)
    | st.builds(lambda v: {"k": v}, nul_text | surrogate_text) | st.just({"deep": nested(300)}),
    "links": st.integers() | st.text(max_size=4)
    | st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)
    | st.lists(not_text.filter(lambda v: not isinstance(v, dict)), min_size=1, max_size=2)
    | st.builds(lambda k: [{"kind": k, "to": "mem_X"}], not_text)
    | st.builds(lambda t: [{"kind": "cites", "to": t}], not_text | st.just(""))
    | st.builds(lambda c: [{"kind": "cites", "to": "mem_X", "created_at": c}], bad_stamps),
}
#: Absent, this field is refused too.
REQUIRED = ("id", "content", "recorded_at")


@st.composite
def spoilt(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A valid record with one field spoilt (or a required one removed), and that field's name."""
    record = draw(valid_records())
    name = draw(st.sampled_from(sorted(SPOILERS)))
    if name in REQUIRED and draw(st.booleans()):
        del record[name]
    else:
        record[name] = draw(SPOILERS[name])
    return name, record


def read_lines(*lines: bytes) -> exportfile.ExportFile:
    return exportfile.read(io.BytesIO(HEADER.encode() + b"\n" + b"\n".join(lines) + b"\n"))


def stream_lines(*lines: bytes) -> exportfile.Reader:
    return exportfile.Reader(io.BytesIO(HEADER.encode() + b"\n" + b"\n".join(lines) + b"\n"))


def answering(check: bool) -> Any:
    """A memory.write_many that answers a new id per item; ``check``: each item is first
    validated as the daemon's operator socket validates it (raises when it would refuse)."""
    count = [0]

    def call(method: str, params: dict[str, Any]) -> Any:
        results = []
        for item in params["items"]:
            if check:
                parse_write_request(item, CFG, admin=True)
            count[0] += 1
            results.append({"id": f"mem_new{count[0]}", "queued": []})
        return {"results": results}

    return call


def line_of(record: dict[str, Any]) -> bytes:
    # ensure_ascii: a lone surrogate is written as the \ud800 escape a hostile file would hold.
    return json.dumps(record, ensure_ascii=True).encode()


def test_the_issue_repros_are_refused_by_line_and_field_and_the_next_record_is_kept() -> None:
    good = {"record": "memory", "id": "mem_1", "content": "kept", "recorded_at": "2025-01-01T00:00:00Z"}
    links5 = {**good, "id": "mem_2", "content": "links five", "links": 5}
    deep = b"[" * 200_000 + b"]" * 200_000
    export = read_lines(line_of(links5), deep, b'{"record": "memory", "id": "mem_3", "content": "\xff\xfe"}',
                        line_of(good))
    assert [(r.line, r.field, r.source_id) for r in export.refused] == [(2, "links", "mem_2")]
    assert [n for n, _ in export.bad_lines] == [3, 4]
    assert "nested too deeply" in export.bad_lines[0][1] and "not UTF-8" in export.bad_lines[1][1]
    assert [(m.line, m.record["content"]) for m in export.memories] == [(5, "kept")]


def test_a_line_longer_than_the_limit_is_refused_unread_and_the_next_line_is_read() -> None:
    from memoryd.exchange import records

    good = line_of({"record": "memory", "id": "mem_1", "content": "after",
                    "recorded_at": "2025-01-01T00:00:00Z"})
    stream = io.BytesIO(HEADER.encode() + b"\n" + b"x" * 5000 + b"\n" + good + b"\n")
    found = list(records.lines(stream, max_bytes=1000))
    assert [(x.number, x.too_long) for x in found] == [(1, False), (2, True), (3, False)]
    assert found[2].data == good


@FAST
@given(spoilt())
def test_a_record_with_one_spoilt_field_is_refused_naming_that_field(
        case: tuple[str, dict[str, Any]]) -> None:
    name, record = case
    export = read_lines(line_of(record))
    assert export.memories == [] and export.bad_lines == []
    (refusal,) = export.refused
    assert refusal.line == 2
    assert refusal.field == name or refusal.field.startswith((f"{name}[", f"{name}.")), (refusal, name)


@FAST
@given(st.lists(valid_records(), min_size=1, max_size=5))
def test_valid_records_pass_and_their_writes_pass_the_daemons_validation(found: list[dict[str, Any]]) -> None:
    for i, record in enumerate(found):
        record["id"] = f"mem_{i}"
        if i:
            record["links"] = [{"kind": "cites", "to": f"mem_{i - 1}", "created_at": record["recorded_at"]}]
    with Importer(answering(check=True), batch_size=2) as importer:
        summary = importer.run(stream_lines(*(line_of(r) for r in found)))
    assert summary.refused == [] and summary.bad_lines == []
    assert summary.written == len(found)
    assert (summary.links_restored, summary.links_skipped) == (len(found) - 1, 0)


raw_lines = st.one_of(
    st.binary(max_size=200),
    st.binary(max_size=40).map(lambda b: b'{"record": "memory", "id": "m", "content": "' + b + b'"}'),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(1000, 5000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1000, 5000).map(
        lambda n: b'{"record":"memory","metadata":' + b'{"a":' * n + b"1" + b"}" * n + b"}"),
    st.sampled_from([b'{"record": "memory", "id": "m", "content": "x", "importance": NaN}',
                     b'{"record": "end"}', b'{"record": "later-kind"}', b"\xc3\x28", b"null", b"[]",
                     b'{"record": "memory", "id": "m", "content": "' + b"a" * 200_000 + b'"}']),
    spoilt().map(lambda case: line_of(case[1])),
    valid_records().map(line_of),
)


@FAST
@given(st.lists(raw_lines, max_size=8))
def test_any_lines_are_each_read_refused_or_counted_and_reading_never_raises(lines: list[bytes]) -> None:
    body = [line.replace(b"\n", b" ").replace(b"\r", b" ") for line in lines]
    export = read_lines(*body)
    numbers = ([m.line for m in export.memories] + [r.line for r in export.refused]
               + [n for n, _ in export.bad_lines])
    assert len(numbers) == len(set(numbers))  # no line is both kept and refused
    # Every other non-blank line is an end record or a record kind this version skips.
    others = sum(1 for b in body if b.strip()) - len(numbers)
    assert others == export.unknown_records + sum(1 for b in body if _is_record(b, ("end",)))

    # Importing the records that were kept (links and all) must not raise either.
    with Importer(answering(check=False), batch_size=3) as importer:
        summary = importer.run(stream_lines(*body))
    assert summary.written == len(export.memories)
    assert [(r.line, r.field) for r in summary.refused] == [(r.line, r.field) for r in export.refused]


def _is_record(line: bytes, kinds: tuple[str, ...]) -> bool:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and value.get("record") in kinds


@pytest.mark.parametrize("value", [5, "5", {"kind": "cites"}, [5], [{"kind": 5, "to": "m"}]])
def test_plan_is_never_handed_a_links_value_it_cannot_walk(value: Any) -> None:
    record = {"record": "memory", "id": "mem_1", "content": "x", "recorded_at": "2025-01-01T00:00:00Z",
              "links": value}
    export = read_lines(line_of(record))
    assert export.memories == [] and export.refused[0].field.startswith("links")
