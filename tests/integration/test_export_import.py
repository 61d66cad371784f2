"""memory.export, `memoryd export` and `memoryd import`: a store moved to a fresh data dir intact."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from memoryd.service.client import ClientError
from memoryd.store import derive, proposals
from memoryd.store import vectors as store_vectors
from memoryd.store.memories import WriteContext, get_row
from memoryd.store.schema import memories
from tests.integration.harness import DaemonHandle, run_cli
from tests.lifecycle.helpers import engine_on

#: On both store backends (tests/conftest.py pytest_generate_tests).

#: No pass changes a row while the test compares (no models; decay and retention ran on the empty store).
QUIET = {"governor_enabled": False}
CTX = WriteContext(actor="pass:extract", passes=[], max_attempts=5, idempotency_ttl_s=86400.0)
FORGOTTEN_TEXT = "The VPN password is hunter2"


def _derive(daemon: DaemonHandle, source_id: str, fact: str) -> str:
    """A fact derived from ``source_id`` through the extract pass's own store call."""
    with engine_on(daemon) as engine, engine.begin() as conn:
        source = get_row(conn, source_id)
        memory_id, outcome = derive.derive_fact(conn, source, fact, datetime.now(UTC), CTX)
    assert memory_id is not None, outcome
    return memory_id


def _seed(daemon: DaemonHandle) -> dict[str, str]:
    """A store with every status an export holds, citations, supersedes and merge links."""
    w = daemon.call
    ids: dict[str, str] = {}
    ids["db"] = w("memory.write", {
        "content": "Staging runs Postgres 15 on db1:5432", "kind": "fact", "agent_id": "a1",
        "importance": 0.9, "metadata": {"source": "chat", "n": 1}, "occurred_at": "2025-02-03T04:05:06Z",
        "valid_from": "2025-01-01T00:00:00Z"})["id"]
    ids["db2"] = w("memory.write", {
        "content": "db1:5432 hosts the staging Postgres 15 instance", "kind": "fact", "agent_id": "a1"})["id"]
    ids["tabs"] = w("memory.write", {"content": "Alice prefers tabs", "kind": "preference", "scope": "user",
                                     "user_id": "alice", "agent_id": "a1"})["id"]
    ids["deploy"] = w("memory.write", {"content": "Deploys happen on Tuesdays", "scope": "project",
                                       "project": "shop", "ttl_s": 86400,
                                       "valid_to": "2030-01-01T00:00:00Z"})["id"]
    ids["org"] = w("memory.write", {"content": "Everyone uses UTC in logs", "scope": "org",
                                    "kind": "procedure"})["id"]
    ids["sess"] = w("memory.write", {"content": "This session is about checkout", "scope": "session",
                                     "session_id": "s-1", "occurred_at": "2025-06-02T09:15:10.482Z"})["id"]
    ids["port_old"] = w("memory.write", {"content": "Service A listens on port 8080", "agent_id": "a1"})["id"]
    sup = w("memory.supersede", {"old_id": ids["port_old"], "content": "Service A listens on port 9090",
                                 "agent_id": "a1", "reason": "moved"})
    ids["port_new"] = sup["new_id"]
    # A fact derived from two sources with different text: a candidate, then promoted, citing both.
    ids["fact"] = _derive(daemon, ids["db"], "Staging runs Postgres 15")
    assert _derive(daemon, ids["db2"], "Staging runs Postgres 15") == ids["fact"]
    ids["cand"] = _derive(daemon, ids["deploy"], "Deploys happen on Tuesdays only")
    # A merge: two rows retired into a newer one (merged_into links point forward in the file).
    ids["ci1"] = w("memory.write", {"content": "CI runs on GitHub Actions", "agent_id": "a1"})["id"]
    ids["ci2"] = w("memory.write", {"content": "CI has a macOS runner", "agent_id": "a1"})["id"]
    with engine_on(daemon) as engine, engine.begin() as conn:
        pid = proposals.propose(conn, kind="merge", memory_ids=[ids["ci1"], ids["ci2"]], reason="same topic",
                                payload={"merged_text": "CI runs on GitHub Actions, with a macOS runner"},
                                created_by="consolidate", now=datetime.now(UTC))
    ids["merged"] = daemon.call("review.decide", {"id": pid, "decision": "approve"}, admin=True)["merged_id"]
    forgotten = w("memory.write", {"content": FORGOTTEN_TEXT, "agent_id": "a1"})["id"]
    w("memory.forget", {"id": forgotten, "reason": "secret"})
    # A read, so access counts are part of what must survive.
    w("memory.get", {"id": ids["tabs"]})
    return ids


def _export(daemon: DaemonHandle, out: Path, *args: str) -> list[dict[str, Any]]:
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    done = run_cli(["export", "-o", str(out), *args], env)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def _import(daemon: DaemonHandle, path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    done = run_cli(["import", "--json", *args, str(path)], env)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def _by_identity(records: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Memory records keyed by what identifies them across stores (the id does not)."""
    return {(r["content"], r["scope"], r["agent_id"], r["user_id"], r["project"], r["session_id"],
             r["recorded_at"]): r for r in records if r["record"] == "memory"}


def _comparable(record: dict[str, Any], new_of: dict[str, str]) -> dict[str, Any]:
    """A record with its ids (its own and its links' targets) mapped into the other store."""
    out = {k: v for k, v in record.items() if k not in ("id", "links")}
    out["links"] = sorted((lk["kind"], new_of[lk["to"]], lk["created_at"]) for lk in record["links"])
    return out


def test_export_then_import_into_a_fresh_store_keeps_every_memory_citation_and_link(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    source = start_daemon("src", config=QUIET)
    ids = _seed(source)
    exported = _export(source, source.home / "memories.jsonl")

    head, body, tail = exported[0], exported[1:-1], exported[-1]
    assert head["record"] == "header" and head["format"] == "memoryd-export"
    assert head["format_version"] == 1 and head["total"] == len(body) == 13
    assert tail == {"record": "end", "count": 13}
    assert FORGOTTEN_TEXT not in (source.home / "memories.jsonl").read_text()
    statuses = sorted(r["status"] for r in body)
    assert statuses == ["active"] * 9 + ["candidate"] + ["superseded"] * 3
    by_id = {r["id"]: r for r in body}
    assert sorted(lk["to"] for lk in by_id[ids["fact"]]["links"]) == sorted([ids["db"], ids["db2"]])
    assert by_id[ids["db"]]["occurred_at"] == "2025-02-03T04:05:06.000000Z"

    target = start_daemon("dst", config=QUIET)
    code, summary = _import(target, source.home / "memories.jsonl")
    assert code == 0, summary
    assert (summary["written"], summary["duplicates"], summary["refused"]) == (13, 0, [])
    assert (summary["links_restored"], summary["links_skipped"]) == (6, 0)
    assert summary["complete"] is True

    again = _export(target, target.home / "again.jsonl")
    before, after = _by_identity(body), _by_identity(again[1:-1])
    assert set(before) == set(after)
    new_of = {rec["id"]: after[key]["id"] for key, rec in before.items()}
    for key, rec in before.items():
        assert _comparable(after[key], {v: v for v in new_of.values()}) == _comparable(rec, new_of), key
    # Spot checks with literal values, independent of the comparison above.
    got = target.call("memory.get", {"id": new_of[ids["fact"]], "include": ["citations"]})
    assert (got["status"], got["derived"], got["kind"]) == ("active", True, "fact")
    assert sorted(got["citations"]) == sorted([new_of[ids["db"]], new_of[ids["db2"]]])
    old = target.call("memory.get", {"id": new_of[ids["port_old"]], "include": ["links"]})
    assert old["status"] == "superseded" and old["retired_at"] is not None
    assert [(lk["kind"], lk["from"]) for lk in old["links"]] == [("supersedes", new_of[ids["port_new"]])]
    # What the store believed before the supersede holds after the move too.
    hits = target.call("memory.search", {"query": "Service A port", "mode": "lexical", "agent_id": "a1",
                                         "as_of": before[_key_of(body, ids["port_old"])]["recorded_at"]})
    assert [h["content"] for h in hits["results"]] == ["Service A listens on port 8080"]
    history = target.call("memory.get", {"id": new_of[ids["db"]], "include": ["history"]})["history"]
    assert [(e["action"], e["detail"]["source_id"]) for e in history] == [("memory.import", ids["db"])]


def _key_of(records: list[dict[str, Any]], memory_id: str) -> tuple[Any, ...]:
    (key,) = [k for k, r in _by_identity(records).items() if r["id"] == memory_id]
    return key


def test_an_interrupted_import_run_again_writes_nothing_twice(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    source = start_daemon("src", config=QUIET)
    _seed(source)
    whole = source.home / "memories.jsonl"
    lines = [json.dumps(r) for r in _export(source, whole)]
    # The first run stopped after 8 of 13 memories (no end record): a cut in the middle of the
    # file, after the supersede but before the derived facts and the merge.
    prefix = source.home / "prefix.jsonl"
    prefix.write_text("\n".join(lines[:9]) + "\n")

    target = start_daemon("dst", config=QUIET)
    code, first = _import(target, prefix)
    assert code == 0 and first["records"] == 8 and first["written"] == 8
    assert first["complete"] is False
    assert target.scalar("SELECT count(*) FROM memories") == 8

    code, second = _import(target, whole)
    assert code == 0, second
    assert second["refused"] == [] and second["records"] == 13
    assert target.scalar("SELECT count(*) FROM memories") == 13
    assert target.scalar("SELECT count(*) FROM memory_links") == 6
    for (content, n) in target.query("SELECT content, count(*) FROM memories GROUP BY content, scope"):
        assert n == 1, content
    # A third full run changes nothing either.
    _import(target, whole)
    assert target.scalar("SELECT count(*) FROM memories") == 13


def test_import_reports_a_tombstoned_line_and_writes_the_rest(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    source = start_daemon("src", config=QUIET)
    written = {text: source.call("memory.write", {"content": text, "agent_id": "a1"})["id"]
               for text in ("keep one", "refuse me", "keep two")}
    path = source.home / "three.jsonl"
    _export(source, path)
    target = start_daemon("dst", config=QUIET)
    doomed = target.call("memory.write", {"content": "refuse me", "agent_id": "a1"})["id"]
    target.call("memory.forget", {"id": doomed})
    code, summary = _import(target, path)
    assert code == 1
    assert summary["written"] == 2
    assert [(r["line"], r["id"] == written["refuse me"]) for r in summary["refused"]] == [(3, True)]
    assert "(error 1006)" in summary["refused"][0]["reason"]
    assert target.count_content("keep one") == 1 and target.count_content("keep two") == 1


def test_export_is_served_on_the_operator_socket_only(daemon: DaemonHandle) -> None:
    with pytest.raises(ClientError) as err:
        daemon.call("memory.export", {})
    assert err.value.code == -32601
    assert daemon.call("memory.export", {}, admin=True)["memories"] == []


def test_restore_is_refused_on_the_agent_socket_and_writes_nothing(daemon: DaemonHandle) -> None:
    params = {"content": "forged history", "agent_id": "a1",
              "restore": {"status": "superseded", "recorded_at": "2020-01-01T00:00:00Z"}}
    with pytest.raises(ClientError) as err:
        daemon.call("memory.write", params)
    assert (err.value.code, err.value.data["field"]) == (1005, "restore")
    with pytest.raises(ClientError) as err:
        daemon.call("memory.write_many", {"items": [params]})
    assert (err.value.code, err.value.data["field"]) == (1005, "items[0].restore")
    assert daemon.count_content("forged history") == 0
    # Positive control: the operator socket takes it.
    ack = daemon.call("memory.write", params, admin=True)
    row = daemon.call("memory.get", {"id": ack["id"]})
    assert (row["status"], row["recorded_at"]) == ("superseded", "2020-01-01T00:00:00.000000Z")


def test_export_filters_and_pages(daemon: DaemonHandle) -> None:
    for i in range(5):
        daemon.call("memory.write", {"content": f"alice note {i}", "scope": "user", "user_id": "alice"})
    daemon.call("memory.write", {"content": "bob note", "scope": "user", "user_id": "bob"})
    daemon.call("memory.write", {"content": "agent note", "agent_id": "a1", "user_id": "alice"})
    first = daemon.call("memory.export", {"user_id": "alice", "limit": 4}, admin=True)
    assert first["total"] == 6  # owner fields filter the rows' columns: the agent row carries alice too
    second = daemon.call("memory.export", {"user_id": "alice", "limit": 4, "cursor": first["next_cursor"]},
                         admin=True)
    assert second["next_cursor"] is None and "total" not in second
    contents = [m["content"] for m in first["memories"] + second["memories"]]
    assert contents == [f"alice note {i}" for i in range(5)] + ["agent note"]
    scoped = daemon.call("memory.export", {"user_id": "alice", "scope": "user"}, admin=True)
    assert [m["content"] for m in scoped["memories"]] == [f"alice note {i}" for i in range(5)]
    with pytest.raises(ClientError) as err:
        daemon.call("memory.export", {"status": "forgotten"}, admin=True)
    assert (err.value.code, err.value.data["field"]) == (-32602, "status")


def test_import_refuses_a_file_that_is_not_an_export(daemon: DaemonHandle) -> None:
    bogus = daemon.home / "bogus.jsonl"
    bogus.write_text('{"content": "no header"}\n')
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    done = run_cli(["import", str(bogus)], env)
    assert done.returncode == 2  # not an export: nothing written (1 would say "some lines refused")
    assert "not a memoryd export header" in done.stderr
    assert daemon.scalar("SELECT count(*) FROM memories") == 0


def test_export_with_vectors_carries_each_rows_current_embedding(daemon: DaemonHandle) -> None:
    fresh = daemon.call("memory.write", {"content": "vector export probe", "agent_id": "a1"})["id"]
    stale = daemon.call("memory.write", {"content": "vector export stale", "agent_id": "a1"})["id"]
    daemon.call("memory.write", {"content": "vector export none", "agent_id": "a1"})
    values = [((i % 7) - 3) / 8.0 for i in range(384)]  # exact in float32
    blob = struct.pack("<384f", *values)
    # Through the store's own vector writer: a BLOB in SQLite's view, a pgvector value on PostgreSQL.
    with engine_on(daemon) as engine, engine.begin() as conn:
        for memory_id, chash in ((fresh, None), (stale, "0" * 64)):
            seq, own_hash = conn.execute(select(memories.c.seq, memories.c.content_hash)
                                         .where(memories.c.id == memory_id)).one()
            store_vectors.upsert(conn, [{
                "memory_seq": seq, "model": "probe-model", "dim": 384, "vector": blob,
                "content_hash": chash or own_hash, "embedded_at": "2025-01-01T00:00:00.000000Z"}])
    rows = daemon.call("memory.export", {"with_vectors": True}, admin=True)["memories"]
    vectors = {r["content"]: r["vector"] for r in rows}
    got = vectors["vector export probe"]
    assert (got["model"], got["dim"], got["encoding"]) == ("probe-model", 384, "f32le-base64")
    assert list(struct.unpack("<384f", base64.b64decode(got["data"]))) == values
    # A vector of other content (stale) is not exported as this row's, and no vector is null.
    assert vectors["vector export stale"] is None and vectors["vector export none"] is None
    plain = daemon.call("memory.export", {}, admin=True)["memories"]
    assert all("vector" not in r for r in plain)


def _record(source_id: str, content: str, **fields: Any) -> dict[str, Any]:
    return {"record": "memory", "id": source_id, "content": content, "scope": "agent", "agent_id": "a1",
            "recorded_at": "2025-01-01T00:00:00.000000Z", **fields}


def test_a_hostile_file_is_imported_but_its_bad_lines_each_refused_by_line_and_field(
        daemon: DaemonHandle) -> None:
    head = {"record": "header", "format": "memoryd-export", "format_version": 1, "memoryd_version": "x",
            "exported_at": "2025-01-01T00:00:00Z", "filters": {}, "with_vectors": False, "total": 12}
    good = [_record(f"mem_good{i}", f"good record {i}") for i in range(4)]
    lines: list[bytes] = [json.dumps(head).encode(), json.dumps(good[0]).encode()]
    lines += [
        json.dumps(_record("mem_links", "hostile links five", links=5)).encode(),             # line 3
        b"[" * 200_000 + b"]" * 200_000,                                                      # line 4
        json.dumps(good[1]).encode(),                                                         # line 5
        json.dumps(_record("mem_nul", "hostile nul \x00 inside")).encode(),                   # line 6
        b'{"record": "memory", "id": "mem_utf8", "content": "hostile \xff\xfe bytes"}',       # line 7
        json.dumps(_record("mem_when", "hostile timestamp", occurred_at="last tuesday")).encode(),  # 8
        json.dumps(_record("mem_big", "hostile huge " + "x" * 70_000)).encode(),              # line 9
        json.dumps(_record("mem_lone", "hostile lone \ud800 surrogate")).encode(),            # line 10
        json.dumps(_record("mem_deepmeta", "hostile deep metadata",
                           metadata={"a": json.loads("[" * 300 + "]" * 300)})).encode(),      # line 11
        json.dumps(good[2]).encode(),                                                         # line 12
        # A good record that cites a refused one: written, its link skipped.
        json.dumps(_record("mem_good3", "good record 3",
                           links=[{"kind": "cites", "to": "mem_nul", "created_at": None}])).encode(),
        json.dumps({"record": "end", "count": 11}).encode(),
    ]
    path = daemon.home / "hostile.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    done = run_cli(["import", "--json", str(path)], env)
    assert done.returncode == 1, done.stderr  # imported, some refused
    assert "Traceback" not in done.stderr
    summary = json.loads(done.stdout)
    refused = {r["line"]: (r["id"], r["field"]) for r in summary["refused"]}
    assert refused == {3: ("mem_links", "links"), 6: ("mem_nul", "content"), 8: ("mem_when", "occurred_at"),
                       9: ("mem_big", "content"), 10: ("mem_lone", "content"),
                       11: ("mem_deepmeta", "metadata")}
    assert [line for line, _ in (tuple(b.values()) for b in summary["bad_lines"])] == [4, 7]
    assert summary["written"] == 4 and summary["records"] == 10 and summary["complete"] is True
    assert summary["links_skipped"] == 1
    for i in range(4):
        assert daemon.count_content(f"good record {i}") == 1
    # Nothing of a refused record was written: no row, no link.
    assert daemon.scalar("SELECT count(*) FROM memories WHERE content LIKE 'hostile%'") == 0
    assert daemon.scalar("SELECT count(*) FROM memories") == 4
    assert daemon.scalar("SELECT count(*) FROM memory_links") == 0
    # The text summary names each refused line and its field (run again: the 4 come from their keys).
    text = run_cli(["import", str(path)], env)
    assert text.returncode == 1
    assert ("0 written, 0 duplicates of existing memories, 4 already imported by an earlier run, "
            "6 refused and 2 unreadable lines") in text.stdout
    assert "refused line 3 (mem_links) field links" in text.stdout
    assert "unreadable line 4: nested too deeply" in text.stdout
