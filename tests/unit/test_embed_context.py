"""The embed pass encodes a conversation turn with the turn said before it (passes/embed.py).

A real migrated store and the real pass; the embedder is a fake that records
the texts it is given, so each test reads exactly what a turn was encoded as.
Turns arrive in order, out of order, and are forgotten; each case checks what
the next run of the pass encodes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import numpy as np
from sqlalchemy import Engine, select, text

from memoryd.config import Config
from memoryd.models.embedder import DIM
from memoryd.passes.base import PassContext
from memoryd.passes.embed import EmbedPass, embed_text
from memoryd.queue import jobs as jobq
from memoryd.store import lifecycle
from memoryd.store.memories import NewMemory, WriteContext, write_memory
from memoryd.store.schema import jobs, memories, memory_vectors

from .helpers import NOW


class RecordingEmbedder:
    """Unit vectors from each text's hash; every text encoded is kept in ``texts``."""

    spec = "fake"
    name = "fake-embedder"
    enabled = True
    loaded = True

    def __init__(self) -> None:
        self.texts: list[str] = []

    def unavailable_reason(self) -> str | None:
        return None

    def encode(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
        self.texts += list(texts)
        out = []
        for one in texts:
            seed = int.from_bytes(hashlib.sha256(one.encode()).digest()[:4], "little")
            vec = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
            out.append(vec / np.linalg.norm(vec))
        return np.stack(out)


def turn(engine: Engine, ctx: WriteContext, text: str, minute: int, *, session: str = "s1",
         kind: str = "conversation", project: str = "p1") -> str:
    """Write one turn of ``session``, said ``minute`` minutes after NOW; return its id."""
    req = NewMemory(content=text, kind=kind, scope="project", owner=project, project=project,
                    session_id=session, occurred_at=(NOW + timedelta(minutes=minute)).isoformat().replace(
                        "+00:00", "Z"))
    with engine.begin() as conn:
        return str(write_memory(conn, req, NOW, ctx)["id"])


def run_embed(engine: Engine, embedder: RecordingEmbedder) -> dict[str, str]:
    """Run the embed pass over every due job; return memory id -> the text it was encoded as."""
    embedder.texts.clear()
    with engine.begin() as conn:
        batch = jobq.claim(conn, "embed", owner="t", now=time.time() + 1, lease_s=60, limit=100)
    ids = [job.target for job in batch]
    ctx = PassContext(engine=engine, config=Config(), embedder=embedder, now=time.time)  # type: ignore[arg-type]
    EmbedPass().run(batch, ctx)
    texts = list(embedder.texts)
    # The pass encodes the rows it read in id order of its query, not the batch's: match by content.
    return {mid: next(t for t in texts if t.startswith(CONTENT[mid])) for mid in ids if mid in CONTENT}


CONTENT: dict[str, str] = {}


def write(engine: Engine, ctx: WriteContext, text: str, minute: int, **kw: Any) -> str:
    mid = turn(engine, ctx, text, minute, **kw)
    CONTENT[mid] = text
    return mid


def open_embed_jobs(engine: Engine) -> set[str]:
    with engine.begin() as conn:
        return {r.target for r in conn.execute(select(jobs.c.target).where(
            jobs.c["pass"] == "embed", jobs.c.state.in_(["ready", "leased"])))}


def test_embed_text_puts_the_turn_first_and_its_previous_turn_after() -> None:
    assert embed_text("Sam: Yes, it went great", "Elena: How did the interview go?") == (
        "Sam: Yes, it went great (replying to Elena: How did the interview go?)")
    assert embed_text("Sam: Hello", None) == "Sam: Hello"
    assert embed_text("B", "x" * 5000).endswith("x" * 1000 + ")")


def test_a_turn_is_embedded_with_the_turn_before_it_in_its_session(
        engine: Engine, write_ctx: WriteContext) -> None:
    emb = RecordingEmbedder()
    ask = write(engine, write_ctx, "Elena: How did the interview in Porto go?", 0)
    reply = write(engine, write_ctx, "Sam: Yes, it went great", 1)
    # Not context: another session, another project, a note that is not a turn, a day later.
    other = write(engine, write_ctx, "Sam: the Lisbon office is closed", 2, session="s2")
    elsewhere = write(engine, write_ctx, "Ana: see you at lunch", 3, project="p2")
    note = write(engine, write_ctx, "Staging runs Postgres 15", 4, kind="fact")
    late = write(engine, write_ctx, "Sam: Morning again", 60 * 25)
    texts = run_embed(engine, emb)
    assert texts[ask] == "Elena: How did the interview in Porto go?"
    assert texts[reply] == "Sam: Yes, it went great (replying to Elena: How did the interview in Porto go?)"
    assert texts[other] == "Sam: the Lisbon office is closed"
    assert texts[elsewhere] == "Ana: see you at lunch"
    assert texts[note] == "Staging runs Postgres 15"
    assert texts[late] == "Sam: Morning again"
    assert open_embed_jobs(engine) == set(), "turns written in order re-queue nothing"


def test_a_turn_stored_after_the_turn_that_follows_it_re_queues_that_turn(
        engine: Engine, write_ctx: WriteContext) -> None:
    emb = RecordingEmbedder()
    # Stored newest first: each arrival re-queues the turn after it, once.
    later = write(engine, write_ctx, "Elena: Then let's celebrate on Friday", 2)
    run_embed(engine, emb)
    reply = write(engine, write_ctx, "Sam: Yes, it went great", 1)
    assert run_embed(engine, emb)[reply] == "Sam: Yes, it went great"
    assert open_embed_jobs(engine) == {later}
    assert run_embed(engine, emb)[later] == (
        "Elena: Then let's celebrate on Friday (replying to Sam: Yes, it went great)")
    ask = write(engine, write_ctx, "Elena: How did the interview in Porto go?", 0)
    assert run_embed(engine, emb) == {ask: "Elena: How did the interview in Porto go?"}
    assert open_embed_jobs(engine) == {reply}
    assert run_embed(engine, emb) == {
        reply: "Sam: Yes, it went great (replying to Elena: How did the interview in Porto go?)"}
    assert open_embed_jobs(engine) == set(), "a re-embedded turn does not re-queue the next one"


def test_a_turn_whose_previous_turn_changes_while_it_is_encoded_is_embedded_again(
        engine: Engine, write_ctx: WriteContext) -> None:
    ask = write(engine, write_ctx, "Elena: How did the interview in Porto go?", 0)
    reply = write(engine, write_ctx, "Sam: Yes, it went great", 2)

    class ArrivalDuringEncode(RecordingEmbedder):
        arrived = False

        def encode(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
            if not self.arrived:  # a turn said in between arrives while the first batch is encoded
                self.arrived = True
                write(engine, write_ctx, "Elena: And the one in Braga?", 1)
            return super().encode(texts, threads)

    emb = ArrivalDuringEncode()
    first = run_embed(engine, emb)
    assert first[reply].endswith("(replying to Elena: How did the interview in Porto go?)")
    with engine.begin() as conn:
        stored = {r[0] for r in conn.execute(select(memories.c.id).join(
            memory_vectors, memory_vectors.c.memory_seq == memories.c.seq))}
    assert ask in stored and reply not in stored, "the vector with the old context is not written"
    assert reply in open_embed_jobs(engine)
    assert run_embed(engine, emb)[reply] == (
        "Sam: Yes, it went great (replying to Elena: And the one in Braga?)")


def test_erasing_a_turn_re_embeds_the_turn_after_it_without_its_text(
        engine: Engine, write_ctx: WriteContext) -> None:
    emb = RecordingEmbedder()
    first = write(engine, write_ctx, "Elena: The launch moved to May", 0)
    secret = write(engine, write_ctx, "Sam: my salary is 91k", 1)
    reply = write(engine, write_ctx, "Elena: Congrats!", 2)
    assert "91k" in run_embed(engine, emb)[reply]
    with engine.begin() as conn:
        lifecycle.forget(conn, memory_id=secret, subject=None, reason=None, tombstone=True, now=NOW,
                         actor="test", max_attempts=5)
        lifecycle.erase(conn, secret, NOW, "test")
    assert open_embed_jobs(engine) >= {reply}
    assert run_embed(engine, emb)[reply] == "Elena: Congrats! (replying to Elena: The launch moved to May)"
    assert not any("91k" in t for t in emb.texts)
    assert first in CONTENT


def test_the_neighbour_lookup_walks_the_time_index_not_every_row_of_the_owner(
        engine: Engine, write_ctx: WriteContext) -> None:
    from memoryd.store import turns

    with engine.connect() as conn:
        for clock in ("occurred_at", "recorded_at"):
            for before in (True, False):
                stmt = turns._statement(conn, clock, before)
                names = ("edge", "at", "seq", "scope", "owner", "session_id", "kind", "s0", "s1", "s2", "s3")
                plan = " ".join(str(r[-1]) for r in conn.execute(
                    text("EXPLAIN QUERY PLAN " + stmt.text), dict.fromkeys(names, "x")))
                assert f"USING INDEX ix_memories_{clock}" in plan, plan
                assert "TEMP B-TREE" not in plan, plan
