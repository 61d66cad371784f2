"""Forget reaches everywhere the text lives: copies, proposals, job errors, FTS pages, the WAL.

Over the real sockets of a real daemon. The proposals and the failed job are
seeded on the daemon's own file the way a pass writes them (the passes that
raise them for real are driven in tests/cognition/test_erasure.py, slow).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from memoryd.queue import jobs as jobq
from memoryd.store import proposals
from tests.integration.harness import DaemonHandle, run_cli, wait_until
from tests.lifecycle.helpers import QUIET, engine_on, error_of, files_holding, get, store_holding, wait_status


def _marker(tag: str) -> str:
    return f"zq{tag}{secrets.token_hex(8)}"


def _seed_proposals_and_failed_job(daemon: DaemonHandle, doomed: str, other: str,
                                   text: str) -> tuple[str, str]:
    now = datetime.now(UTC)
    with engine_on(daemon) as engine, engine.begin() as conn:
        merge = proposals.propose(conn, kind="merge", memory_ids=sorted([doomed, other]),
                                  reason=f"near-duplicates of {text!r}", payload={"merged_text": text},
                                  created_by="consolidate", now=now)
        supersede = proposals.propose(conn, kind="supersede", memory_ids=[doomed, other],
                                      reason=f"{other} updates {doomed}: value in {text}",
                                      payload={"old_id": doomed, "new_id": other, "relation": "updates"},
                                      created_by="reflect", now=now)
        # A job whose failed attempt quoted the text (the worst a pass could have done).
        jobq.enqueue(conn, "extract", doomed, now=time.time() + 3600, max_attempts=5)
    with engine_on(daemon) as engine, engine.begin() as conn:
        claimed = jobq.claim(conn, "extract", owner="test", now=time.time() + 7200, lease_s=60, limit=10)
        job = next(j for j in claimed if j.target == doomed)
        jobq.fail(conn, job, f"ValueError: the answer for {text!r} was invalid", now=time.time() + 7200)
        jobq.release(conn, [j for j in claimed if j is not job], now=time.time())
    assert merge and supersede
    return merge, supersede


def test_forget_by_id_erases_copies_withdraws_proposals_and_scrubs_job_errors(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config={**QUIET, "retention_interval_s": 3600})
    secret, control = _marker("s"), _marker("c")
    text = f"The vault combination is {secret} in the left drawer"
    doomed = daemon.write(text, agent_id="agent-a")["id"]
    # Its copy differs by a trailing period: not a duplicate for the write path, the same
    # text for consolidate (which would collapse it) and for forget.
    copy = daemon.write(text + ".", agent_id="agent-a")["id"]
    other = daemon.write(f"The vault combination was changed in {control}", agent_id="agent-a")["id"]
    elsewhere = daemon.write(text, agent_id="agent-b")["id"]  # another owner's row: untouched
    merge, supersede = _seed_proposals_and_failed_job(daemon, doomed, other, text)
    assert {merge, supersede} <= {p["id"] for p in daemon.call("review.list", {}, admin=True)["proposals"]}

    reply = daemon.call("memory.forget", {"id": doomed, "reason": "leaked"})

    assert reply["matched"] == 2  # the memory and its copy
    assert get(daemon, copy)["status"] in ("deleting", "forgotten")
    # The proposals are withdrawn in the reply's transaction, their words gone.
    assert daemon.call("review.list", {}, admin=True)["proposals"] == []
    withdrawn = {p["id"]: p for p in daemon.call("review.list", {"status": "withdrawn"},
                                                 admin=True)["proposals"]}
    assert set(withdrawn) == {merge, supersede}
    assert withdrawn[supersede]["payload"] == {"old_id": doomed, "new_id": other, "relation": "updates"}
    assert all(secret not in str(p) for p in withdrawn.values())

    for memory_id in (doomed, copy):
        row = wait_status(daemon, memory_id, "forgotten")
        assert row["content"] is None
    jobs = daemon.call("queue.list", {"pass": "extract"}, admin=True)["jobs"]
    assert jobs and all(secret not in str(j) for j in jobs)

    def gone() -> bool:
        # The word index keeps a word after the prefix it shares with the previous
        # word ("zq..."): its unique tail is what must be gone.
        return not store_holding(daemon, secret[-12:])

    # The other owner's copy still holds the text, so look for the doomed text's file
    # presence only after erasing that one too: first the positive control.
    assert store_holding(daemon, secret)
    daemon.call("memory.forget", {"id": elsewhere}, admin=True)
    wait_status(daemon, elsewhere, "forgotten")
    wait_until(gone, timeout_s=30, message="the forgotten text to leave the store")
    # The memory that was not forgotten keeps its words (positive control).
    assert get(daemon, other)["status"] == "active"
    assert control in get(daemon, other)["content"]
    for method, params, admin in [("memory.search", {"query": secret, "agent_id": "agent-a",
                                                     "mode": "lexical"}, False),
                                  ("memory.get", {"id": doomed, "include": ["history", "links"]}, False),
                                  ("review.list", {"status": "withdrawn"}, True),
                                  ("queue.list", {}, True), ("daemon.status", {}, False)]:
        assert secret not in str(daemon.call(method, params, admin=admin)), method
    assert daemon.stop() == 0
    assert not store_holding(daemon, secret[-12:])


@pytest.mark.sqlite_only("FTS5's secure-delete: reads the SQLite file's bytes for an index word "
                         "(PostgreSQL's lexemes: tests/postgres_store/test_pg_forget.py)")
def test_fts_secure_delete_leaves_no_word_of_a_forgotten_row_in_the_file(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    # FTS5 stores words, not sentences. Without its secure-delete option, deleting one row
    # of a segment only adds a delete marker, and the word stays in the segment's page
    # until a merge (none happens with two segments). The word must leave the file at once.
    daemon = start_daemon(config=QUIET)
    word, control = _marker("w"), _marker("k")
    items = [{"content": f"note {i} mentions {control} and more", "agent_id": "agent-a"} for i in range(30)]
    items[0]["content"] = f"note zero mentions {word} and {control}"
    ids = [r["id"] for r in daemon.call("memory.write_many", {"items": items})["results"]]
    daemon.call("memory.forget", {"id": ids[0]})
    wait_status(daemon, ids[0], "forgotten")
    assert daemon.stop() == 0
    # The index stores a word after the prefix it shares with the word before it
    # ("zq..."), so look for its unique tail, not the whole word.
    assert not files_holding(daemon.data_dir, word[-12:].encode())
    assert files_holding(daemon.data_dir, control[-12:].encode())  # positive control


def test_forget_by_subject_is_refused_on_the_agent_socket_and_changes_nothing(daemon: DaemonHandle) -> None:
    row = daemon.write("u1 prefers tabs", scope="user", user_id="u1")["id"]
    refused = error_of(daemon, "memory.forget", {"subject": {"user_id": "u1"}})
    assert refused.code == 1005
    assert refused.data.get("field") == "subject"
    assert "operator" in refused.message
    assert get(daemon, row)["status"] == "active"
    assert daemon.scalar("SELECT count(*) FROM forget_requests") == 0
    assert daemon.scalar("SELECT count(*) FROM tombstones") == 0


def test_forget_by_subject_pages_in_bounded_batches_on_the_operator_socket(daemon: DaemonHandle) -> None:
    items = [{"content": f"u7 note number {i}", "scope": "user", "user_id": "u7"} for i in range(23)]
    ids = [r["id"] for r in daemon.call("memory.write_many", {"items": items})["results"]]
    other = daemon.write("u8 note", scope="user", user_id="u8")["id"]

    first = daemon.call("memory.forget", {"subject": {"user_id": "u7"}, "limit": 10}, admin=True)
    assert (first["matched"], first["remaining"]) == (10, 13)
    assert first["next_cursor"]
    second = daemon.call("memory.forget", {"subject": {"user_id": "u7"}, "limit": 10,
                                           "cursor": first["next_cursor"]}, admin=True)
    assert (second["matched"], second["remaining"]) == (10, 3)
    third = daemon.call("memory.forget", {"subject": {"user_id": "u7"}, "limit": 10,
                                          "cursor": second["next_cursor"]}, admin=True)
    assert (third["matched"], third["remaining"], third["next_cursor"]) == (3, 0, None)
    assert len({*first["request_ids"], *second["request_ids"], *third["request_ids"]}) == 3
    for memory_id in ids:
        assert get(daemon, memory_id)["status"] in ("deleting", "forgotten")
    assert get(daemon, other)["status"] == "active"  # positive control
    for cursor in ("nope", f"s{2**63}", "s" + "9" * 400):  # past any seq: refused, not a crash
        bad = error_of(daemon, "memory.forget", {"subject": {"user_id": "u7"}, "cursor": cursor}, admin=True)
        assert (bad.code, bad.data.get("field")) == (-32602, "cursor"), cursor


def test_cli_forget_by_subject_goes_to_the_operator_socket(daemon: DaemonHandle) -> None:
    rows = [daemon.write(f"u9 fact {i}", scope="user", user_id="u9")["id"] for i in range(3)]
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    out = run_cli(["forget", "--subject", "user_id=u9", "--json"], env)
    assert out.returncode == 0, out.stderr
    assert '"matched": 3' in out.stdout
    for memory_id in rows:
        assert get(daemon, memory_id)["status"] in ("deleting", "forgotten")
