"""Each step of erasure, one test each, on both backends (fast: no daemon, no model).

A forget (store/lifecycle.py ``forget``) marks rows, lays tombstones, withdraws
proposals and queues a retention job; the retention pass (passes/retention.py)
runs the job through ``finish_forget_request`` → ``erase``, then checkpoints the
WAL. Every test here drives the real pass on a real migrated store (a SQLite file,
or a fresh PostgreSQL database) and asserts the effect of exactly one step, so
that removing that step fails it. docs/security.md's table lists the steps;
the report of issue 20 lists step → test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy import Engine, select, text

from memoryd.config import Config
from memoryd.errors import Tombstoned
from memoryd.passes.base import PassContext
from memoryd.passes.retention import RetentionPass
from memoryd.queue import jobs as jobq
from memoryd.store import audit, derive, lifecycle, links, proposals
from memoryd.store import entities as ents
from memoryd.store.engine import create_store_engine
from memoryd.store.memories import NewMemory, get_row, request_hash, write_memory
from memoryd.store.migrate import upgrade
from memoryd.store.schema import entities, entity_aliases, entity_mentions, forget_requests, idempotency_keys
from memoryd.store.schema import jobs as jobs_table
from memoryd.store.schema import proposals as proposals_table
from tests.lifecycle.helpers import STORE_CTX, new_memory, store_write

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A migrated store: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'memoryd.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    engine = create_store_engine(url)
    upgrade(engine)
    yield engine
    engine.dispose()


def forget(engine: Engine, memory_id: str, **kw: Any) -> dict[str, Any]:
    """memory.forget by id, as the handler runs it (in its own transaction)."""
    with engine.begin() as conn:
        out: dict[str, Any] = lifecycle.forget(
            conn, memory_id=memory_id, subject=None, reason=kw.pop("reason", None),
            tombstone=kw.pop("tombstone", True), now=NOW, actor="test", max_attempts=5, **kw)
    return out


def run_retention(engine: Engine) -> int:
    """One run of the real retention pass over every due job; return the jobs it ran."""
    ctx = PassContext(engine=engine, config=Config(), embedder=cast(Any, None), now=time.time)
    pass_ = RetentionPass()
    with engine.begin() as conn:
        batch = jobq.claim(conn, "retention", owner="test", now=time.time() + 1, lease_s=60, limit=100)
    for job in batch:
        with engine.begin() as conn:
            pass_.apply(conn, job, NOW + timedelta(seconds=1), ctx)
            jobq.complete(conn, job, now=time.time())
    pass_.after_batch(ctx)
    return len(batch)


def row(engine: Engine, memory_id: str) -> Any:
    with engine.connect() as conn:
        return get_row(conn, memory_id)


# -- forget: the reply's transaction -------------------------------------------------------------


def test_forget_marks_the_row_deleting_and_queues_one_retention_job(store: Engine) -> None:
    doomed = store_write(store, "the staging token is rotated on fridays", NOW)
    kept = store_write(store, "the staging host is in rack four", NOW)
    out = forget(store, doomed)
    assert (out["matched"], out["memory_ids"]) == (1, [doomed])
    assert row(store, doomed).status == "deleting"
    assert row(store, doomed).retired_at is not None
    assert row(store, kept).status == "active"  # positive control
    with store.connect() as conn:
        queued = conn.execute(select(jobs_table.c.target)
                              .where(jobs_table.c["pass"] == "retention")).scalars().all()
        pending = conn.execute(select(forget_requests.c.status)).scalars().all()
    assert queued == [f"forget:{out['request_id']}"] and pending == ["pending"]
    assert run_retention(store) == 1
    assert row(store, doomed).status == "forgotten"
    with store.connect() as conn:
        assert conn.execute(select(forget_requests.c.status)).scalars().all() == ["done"]
    assert run_retention(store) == 0  # done is done: nothing queued again


def test_forget_lays_a_tombstone_that_refuses_the_owners_rewrite_only(store: Engine) -> None:
    doomed = store_write(store, "the door code is 4412", NOW)
    forget(store, doomed)
    with pytest.raises(Tombstoned), store.begin() as conn:
        write_memory(conn, new_memory("the door code is 4412"), NOW, STORE_CTX)
    # Another owner may still write it (positive control), and no tombstone without the flag.
    assert store_write(store, "the door code is 4412", NOW, owner="a2")
    other = store_write(store, "the gate code is 1234", NOW)
    forget(store, other, tombstone=False)
    run_retention(store)
    assert store_write(store, "the gate code is 1234", NOW)


def test_forget_withdraws_open_proposals_citing_the_row_before_the_erasure_runs(store: Engine) -> None:
    doomed = store_write(store, "deploys go out at noon on tuesdays", NOW)
    other = store_write(store, "deploys go out at noon", NOW)
    kept_a = store_write(store, "the cache is warmed at dawn", NOW)
    kept_b = store_write(store, "the cache warms at dawn", NOW)
    with store.begin() as conn:
        merge = proposals.propose(conn, kind="merge", memory_ids=sorted([doomed, other]),
                                  reason="near-duplicates: deploys go out at noon on tuesdays",
                                  payload={"merged_text": "deploys go out at noon on tuesdays"},
                                  created_by="consolidate", now=NOW)
        control = proposals.propose(conn, kind="merge", memory_ids=sorted([kept_a, kept_b]),
                                    reason="near-duplicates",
                                    payload={"merged_text": "the cache warms at dawn"},
                                    created_by="consolidate", now=NOW)
    forget(store, doomed)
    # Not yet erased: the reply's own transaction withdrew it.
    assert row(store, doomed).status == "deleting"
    with store.connect() as conn:
        got = proposals.get(conn, merge)
        ctl = proposals.get(conn, control)
    assert got.status == "withdrawn" and "tuesdays" not in got.reason and got.payload == {}
    assert ctl.status == "open" and ctl.payload == {"merged_text": "the cache warms at dawn"}


def test_forget_scrubs_the_words_of_proposals_already_decided_and_keeps_their_decision(store: Engine) -> None:
    doomed = store_write(store, "the badge reader code is 4417 at the north door", NOW)
    other = store_write(store, "the badge reader code is 4417", NOW)
    with store.begin() as conn:
        decided = proposals.propose(conn, kind="merge", memory_ids=sorted([doomed, other]),
                                    reason="near-duplicates: the badge reader code is 4417",
                                    payload={"merged_text": "the badge code is 4417 at the north door"},
                                    created_by="consolidate", now=NOW)
        assert proposals.close(conn, decided, "rejected", "operator", "not the same door", NOW)
    forget(store, doomed)
    with store.connect() as conn:
        got = proposals.get(conn, decided)
    # A decided proposal keeps its decision (it is never raised again) but loses every word.
    assert got.status == "rejected"
    assert "4417" not in got.reason and "4417" not in repr(got.payload)


# -- erase: the retention pass --------------------------------------------------------------------


def test_erase_clears_text_metadata_owner_fields_and_copy_hash_but_keeps_the_id(store: Engine) -> None:
    item = new_memory("the vpn secret is in the blue binder", scope="user", owner="u@example.org",
                      agent_id="agent-x", project="proj-x", session_id="sess-x",
                      metadata={"source": "binder note"})
    with store.begin() as conn:
        doomed = write_memory(conn, item, NOW, STORE_CTX)["id"]
    forget(store, doomed)
    run_retention(store)
    r = row(store, doomed)
    assert (r.status, r.content, r.metadata, r.owner) == ("forgotten", None, {}, "")
    assert (r.agent_id, r.user_id, r.project, r.session_id, r.loose_hash) == (None, None, None, None, None)
    assert r.content_hash == item.hash and r.id == doomed  # what stays: id and content hash


def test_erase_deletes_idempotency_keys_that_answer_with_the_row(store: Engine) -> None:
    def keyed_write(content: str, key: str) -> str:
        params = {"content": content, "scope": "agent", "agent_id": "a1", "kind": "fact"}
        item = NewMemory(content=content, kind="fact", scope="agent", owner="a1", agent_id="a1",
                         idempotency_key=key, request_hash=request_hash(params))
        with store.begin() as conn:
            return str(write_memory(conn, item, NOW, STORE_CTX)["id"])

    doomed = keyed_write("the payroll run is on the 25th", "k-doomed")
    keyed_write("the payroll tool is called ledger", "k-kept")
    forget(store, doomed)
    run_retention(store)
    with store.connect() as conn:
        keys = conn.execute(select(idempotency_keys.c.key)).scalars().all()
    assert keys == ["k-kept"]


def test_erase_scrubs_the_last_error_of_every_job_targeting_the_row(store: Engine) -> None:
    doomed = store_write(store, "the api key starts with sk-live", NOW)
    kept = store_write(store, "the api lives on port 8443", NOW)
    with store.begin() as conn:
        for target in (doomed, kept):
            jobq.enqueue(conn, "extract", target, now=time.time(), max_attempts=5)
    with store.begin() as conn:
        for job in jobq.claim(conn, "extract", owner="t", now=time.time() + 1, lease_s=60, limit=10):
            jobq.fail(conn, job, "ValueError: could not parse 'the api key starts with sk-live'",
                      now=time.time())
    forget(store, doomed)
    run_retention(store)
    with store.connect() as conn:
        errors = dict(conn.execute(select(jobs_table.c.target, jobs_table.c.last_error)
                                   .where(jobs_table.c["pass"] == "extract")).all())
    assert "sk-live" not in errors[doomed]
    assert "sk-live" in errors[kept]  # positive control: another row's job is not touched


def test_erase_appends_an_erase_event_and_the_chain_still_verifies(store: Engine) -> None:
    doomed = store_write(store, "the root password is on the sticky note", NOW)
    forget(store, doomed)
    run_retention(store)
    with store.connect() as conn:
        actions = [e["action"] for e in audit.events_for(conn, doomed)]
        checked, broken = audit.verify(conn)
    assert actions == ["memory.write", "memory.forget", "memory.erase"]
    assert broken is None and checked == 3


def test_erase_erases_derived_rows_citing_only_it_and_uncites_the_others(store: Engine) -> None:
    source = store_write(store, "we moved the build server to rack nine in may", NOW)
    other = store_write(store, "the build server sits in rack nine", NOW)
    with store.begin() as conn:
        only, _ = derive.derive_fact(conn, get_row(conn, source), "the build server moved in may",
                                     NOW, STORE_CTX)
        shared, _ = derive.derive_fact(conn, get_row(conn, source), "the build server is in rack nine",
                                       NOW, STORE_CTX)
        again, _ = derive.derive_fact(conn, get_row(conn, other), "the build server is in rack nine",
                                      NOW, STORE_CTX)
    assert only and shared and again == shared
    forget(store, source)
    run_retention(store)
    assert row(store, only).status == "forgotten" and row(store, only).content is None
    assert row(store, shared).content == "the build server is in rack nine"  # another source stays
    with store.connect() as conn:
        assert links.targets(conn, shared, links.CITES) == [other]


def test_erase_withdraws_the_proposals_of_the_derived_rows_it_erases(store: Engine) -> None:
    source = store_write(store, "the oncall phone is 555 0199 this week", NOW)
    with store.begin() as conn:
        fact, outcome = derive.derive_fact(conn, get_row(conn, source), "the oncall phone is 555 0199",
                                           NOW, STORE_CTX)
    assert outcome == "created"
    with store.connect() as conn:
        (promote,) = conn.execute(select(proposals_table).where(proposals_table.c.status == "open")).all()
    assert promote.memory_ids == [fact]
    forget(store, source)
    # The forget withdrew the source's proposals; the fact's is the erasure's to withdraw.
    with store.connect() as conn:
        assert proposals.get(conn, promote.id).status == "open"
    run_retention(store)
    with store.connect() as conn:
        got = proposals.get(conn, promote.id)
    assert got.status == "withdrawn" and source not in got.reason


def test_erase_deletes_entities_only_it_mentions_and_rebuilds_shared_ones(store: Engine) -> None:
    doomed = store_write(store, "Zorblatt-Prime runs the billing queue with Quuxdb", NOW)
    other = store_write(store, "zorblatt runs nightly", NOW)
    vec = b"\x01" * 16
    stamp = "2026-05-01T12:00:00.000000Z"
    with store.begin() as conn:
        # As the extract pass leaves them: doomed named both entities first; other's surface
        # reached the shared one by embedding similarity (an alias).
        shared = ents.create(conn, "agent", "a1", "Zorblatt-Prime", "zorblatt-prime", "service", vec, stamp)
        ents.mention(conn, shared, doomed, "Zorblatt-Prime")
        ents.add_alias(conn, shared, "zorblatt")
        ents.mention(conn, shared, other, "zorblatt")
        alone = ents.create(conn, "agent", "a1", "Quuxdb", "quuxdb", "database", vec, stamp)
        ents.mention(conn, alone, doomed, "Quuxdb")
        ents.add_alias(conn, alone, "quux")
    forget(store, doomed)
    run_retention(store)
    with store.connect() as conn:
        left = conn.execute(select(entities.c.id, entities.c.name, entities.c.norm, entities.c.vector)).all()
        aliases = conn.execute(select(entity_aliases.c.entity_id, entity_aliases.c.alias)).all()
        mentions = conn.execute(select(entity_mentions.c.memory_id, entity_mentions.c.surface)).all()
    # The shared entity is what the remaining mention says: its name, key and no vector of
    # the forgotten name; the entity only the forgotten row mentioned is gone with its alias.
    assert [tuple(r) for r in left] == [(shared, "zorblatt", "zorblatt", None)]
    assert aliases == []
    assert [tuple(m) for m in mentions] == [(other, "zorblatt")]


def test_erase_keeps_an_entitys_name_and_vector_when_a_remaining_mention_has_that_name(store: Engine) -> None:
    doomed = store_write(store, "Kafka feeds the ledger", NOW)
    other = store_write(store, "Kafka is on version three", NOW)
    vec = b"\x02" * 16
    with store.begin() as conn:
        kafka = ents.create(conn, "agent", "a1", "Kafka", "kafka", "service", vec,
                            "2026-05-01T12:00:00.000000Z")
        ents.mention(conn, kafka, doomed, "Kafka")
        ents.mention(conn, kafka, doomed, "kafka-ledger")
        ents.add_alias(conn, kafka, "kafka-ledger")
        ents.mention(conn, kafka, other, "Kafka")
    forget(store, doomed)
    run_retention(store)
    with store.connect() as conn:
        left = conn.execute(select(entities.c.name, entities.c.norm, entities.c.vector)).all()
        aliases = conn.execute(select(entity_aliases.c.alias)).scalars().all()
    assert [tuple(r) for r in left] == [("Kafka", "kafka", vec)]
    assert aliases == []  # the alias only the forgotten row used is gone


def test_erase_queues_the_turn_after_a_forgotten_turn_for_embedding_again(store: Engine) -> None:
    def turn(content: str, at: datetime) -> str:
        item = NewMemory(content=content, kind="conversation", scope="session", owner="s1", session_id="s1")
        with store.begin() as conn:
            return str(write_memory(conn, item, at, STORE_CTX)["id"])

    first = turn("user: my badge number is 7781", NOW)
    second = turn("assistant: noted", NOW + timedelta(seconds=5))
    forget(store, first)
    run_retention(store)
    with store.connect() as conn:
        embeds = conn.execute(select(jobs_table.c.target)
                              .where(jobs_table.c["pass"] == "embed")).scalars().all()
    assert embeds == [second]


def test_forget_by_id_takes_copies_of_any_length_and_merged_rows(store: Engine) -> None:
    text_ = "The Release Key is kept in vault seven"
    doomed = store_write(store, text_, NOW)
    shouted = store_write(store, text_ + "!" * 40, NOW)
    spaced = store_write(store, "the   release  key is kept in " + " " * 30 + "VAULT seven...", NOW)
    merged = store_write(store, "the release key is kept in vault seven.", NOW, owner="a1")
    with store.begin() as conn:
        # A duplicate consolidate collapsed into a row of other text (kept, linked merged_into).
        links.add(conn, merged, doomed, links.MERGED_INTO, "2026-05-01T12:00:00.000000Z")
    elsewhere = store_write(store, text_, NOW, owner="a2")  # another owner's row: its own
    different = store_write(store, "The Release Key is kept in vault eight", NOW)
    out = forget(store, doomed)
    assert set(out["memory_ids"]) == {doomed, shouted, spaced, merged}
    run_retention(store)
    for memory_id in (doomed, shouted, spaced, merged):
        assert row(store, memory_id).status == "forgotten"
    for memory_id in (elsewhere, different):
        assert row(store, memory_id).status == "active"


def test_retention_pass_truncates_the_wal_after_an_erasure(tmp_path: Path) -> None:
    # SQLite alone: the WAL is SQLite's (PostgreSQL's old row versions: docs/security.md).
    engine = create_store_engine(f"sqlite:///{tmp_path / 'memoryd.db'}")
    upgrade(engine)
    try:
        doomed = store_write(engine, "the wal should not keep zqwalmarker", NOW)
        forget(engine, doomed)
        wal = tmp_path / "memoryd.db-wal"
        assert wal.exists() and b"zqwalmarker" in wal.read_bytes()  # positive control
        run_retention(engine)
        assert wal.stat().st_size == 0
        with engine.connect() as conn:
            assert conn.execute(text("SELECT content FROM memories")).scalars().all() == [None]
    finally:
        engine.dispose()


def test_forget_by_subject_takes_the_subjects_rows_and_not_an_equal_row_of_another(store: Engine) -> None:
    # One agent wrote the same text for two users: a forget of one user's rows is not the other's.
    alices = store_write(store, "the standup moved to ten", NOW, owner="agent-a", user_id="alice")
    with store.begin() as conn:
        conn.execute(text("UPDATE memories SET status = 'superseded' WHERE id = :i"), {"i": alices})
    bobs = store_write(store, "the standup moved to ten", NOW, owner="agent-a", user_id="bob")
    with store.begin() as conn:
        out = lifecycle.forget(conn, memory_id=None, subject={"user_id": "alice"}, reason=None,
                               tombstone=True, now=NOW, actor="test", max_attempts=5)
    assert out["memory_ids"] == [alices]
    assert row(store, bobs).status == "active"


def erasure_events(engine: Engine) -> int:
    """The audit log's memory.erase events."""
    with engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM audit_events WHERE action = 'memory.erase'")).scalar_one())


def test_a_large_request_is_erased_a_chunk_to_a_transaction_and_each_row_once(
        store: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass erases a request's rows ERASE_CHUNK to a transaction before its completing one
    (a request of 500 rows in one transaction held SQLite's write lock past other writers' busy
    timeout): a row that fails leaves the chunks before it erased, and the job run again erases
    the rest, each row with one audit event."""
    from memoryd.passes import retention

    n = 2 * retention.ERASE_CHUNK + 10
    ids = [store_write(store, f"carol's note {i} about the deploy", NOW, owner="agent-a", user_id="carol")
           for i in range(n)]
    with store.begin() as conn:
        out = lifecycle.forget(conn, memory_id=None, subject={"user_id": "carol"}, reason=None,
                               tombstone=False, now=NOW, actor="test", max_attempts=5)
    assert sorted(out["memory_ids"]) == sorted(ids)
    order = list(out["memory_ids"])
    real_erase = lifecycle.erase
    bad = order[retention.ERASE_CHUNK + 5]  # in the second chunk

    def erase_failing_on_one_row(conn: Any, memory_id: str, now: datetime, actor: str) -> int:
        if memory_id == bad:
            raise ValueError("a row the pass cannot erase")
        return real_erase(conn, memory_id, now, actor)

    monkeypatch.setattr(lifecycle, "erase", erase_failing_on_one_row)
    ctx = PassContext(engine=store, config=Config(), embedder=cast(Any, None), now=time.time)
    with store.begin() as conn:
        [job] = jobq.claim(conn, "retention", owner="test", now=time.time() + 1, lease_s=60, limit=10)
    result = RetentionPass().run([job], ctx)
    assert [j.id for j, _ in result.failed] == [job.id]
    statuses = {i: row(store, i).status for i in order}
    assert [statuses[i] for i in order[:retention.ERASE_CHUNK]] == ["forgotten"] * retention.ERASE_CHUNK
    assert {statuses[i] for i in order[retention.ERASE_CHUNK:]} == {"deleting"}  # that chunk rolled back
    monkeypatch.setattr(lifecycle, "erase", real_erase)
    result = RetentionPass().run([job], ctx)
    assert result.processed == 1 and not result.failed
    assert {row(store, i).status for i in order} == {"forgotten"}
    with store.connect() as conn:
        assert conn.execute(select(forget_requests.c.status)).scalars().all() == ["done"]
    assert erasure_events(store) == n


@pytest.mark.postgres
def test_two_workers_erasing_one_row_at_once_erase_and_audit_it_once(pg_url: str) -> None:
    """A lease lost mid-request lets a second worker erase the same rows. On PostgreSQL the
    second one reads the row while the first one's erasure is uncommitted, then waits on its
    lock: it must find the row forgotten and add no second erasure or audit event."""
    engine = create_store_engine(pg_url)
    try:
        upgrade(engine)
        doomed = store_write(engine, "the vpn password is hunter2", NOW)
        forget(engine, doomed)
        second: list[int] = []
        with engine.begin() as first:
            assert lifecycle.erase(first, doomed, NOW, "worker-1") == 1

            def other_worker() -> None:
                with engine.begin() as conn:
                    second.append(lifecycle.erase(conn, doomed, NOW, "worker-2"))

            thread = threading.Thread(target=other_worker)
            thread.start()
            time.sleep(1.0)  # it has read the row (still 'deleting' to it) and waits on the lock
            assert thread.is_alive()
        thread.join(30)
        assert second == [0]
        assert erasure_events(engine) == 1
    finally:
        engine.dispose()
