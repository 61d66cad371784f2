"""The embed pass: encodes new memories with the embedder and stores their vectors.

Reads: ``memories`` rows named by its jobs (content, content_hash, status), and
for a conversation turn the turn said just before it (store/turns.py).
Writes: one ``memory_vectors`` row per memory, and the job's completion, in one
transaction. Running it twice changes nothing: the vector is an upsert keyed
by the memory, written only while the row still holds the content that was
encoded (a row forgotten or changed meanwhile gets no stale vector).

A turn is embedded with its context: its own text, then the turn before it
(:func:`embed_text`), so a reply ("Yes, it went great") is found by what it
answers. Only the vector holds the context; no text of one memory is stored in
another's row. The context is right eventually, whatever order turns arrive in:

* a turn is written only while the turn before it is still the one encoded
  (else it is embedded again);
* a turn that arrives after the turn that follows it re-queues that turn's
  embed (in a capture, turns arrive in order and nothing is re-queued);
* erasing a turn re-queues the embed of the turn after it (store/lifecycle.py),
  so no vector keeps a forgotten turn's meaning.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import select

from memoryd.clock import rfc3339_from_epoch
from memoryd.passes.base import Pass, PassContext, PassResult
from memoryd.queue import jobs as jobq
from memoryd.queue.jobs import Job
from memoryd.store import turns, vectors
from memoryd.store.engine import read_only
from memoryd.store.memories import EMBED_FOLLOW_UPS
from memoryd.store.schema import memories

EMBEDDABLE = turns.CONTEXT_STATUSES
#: Passes that need a memory's vector, enqueued when it is stored.
FOLLOW_UPS = EMBED_FOLLOW_UPS
#: The most of the previous turn's text a turn is embedded with (the model reads 256 word pieces).
CONTEXT_CHARS = 1000
#: What the pass reads of each memory: its text and, for a turn, where it sits in its session.
_COLUMNS = (memories.c.id, memories.c.seq, memories.c.content, memories.c.content_hash,
            memories.c.status, memories.c.kind, memories.c.scope, memories.c.owner,
            memories.c.session_id, memories.c.occurred_at, memories.c.recorded_at)


def embed_text(content: str, previous: str | None) -> str:
    """The text a memory is embedded as: its own, and for a turn, the turn before it after it.

    Own text first: it always fits in the model's window, and on the tuning half of
    tests/data/conversations/ this order beat the previous turn first and a mix of the
    two encodings (bench/recall_conv_offline.py; the figures are in the README there).
    """
    if not previous:
        return content
    return f"{content} (replying to {previous[:CONTEXT_CHARS]})"


def _same(a: turns.Neighbour | None, b: turns.Neighbour | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None
                                         and (a.id, a.content_hash) == (b.id, b.content_hash))



class EmbedPass(Pass):
    name: ClassVar[str] = "embed"
    model_backed: ClassVar[bool] = True

    def unavailable_reason(self, ctx: PassContext) -> str | None:
        return ctx.embedder.unavailable_reason()

    def batch_limit(self, ctx: PassContext) -> int:
        return ctx.config.embed_batch_size

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        ids = [job.target for job in batch]
        with read_only(ctx.engine) as conn:
            rows = {r.id: r for r in conn.execute(select(*_COLUMNS).where(memories.c.id.in_(ids)))}
            index_dim = vectors.index_dim(conn)
            todo = [r for r in rows.values() if r.content is not None and r.status in EMBEDDABLE]
            context = {r.id: turns.previous(conn, r) for r in todo if turns.is_turn(r)}
            # The turn after each turn, when it was stored before it (turns that arrived out of order).
            early = {r.id: n.id for r in todo if turns.is_turn(r)
                     and (n := turns.following(conn, r)) is not None and n.seq < r.seq and n.id not in ids}
        texts = [embed_text(r.content, c.content if (c := context.get(r.id)) else None) for r in todo]
        encoded: list[Any] = list(ctx.embedder.encode(texts, threads=ctx.threads)) if todo else []
        if encoded and index_dim is not None and len(encoded[0]) != index_dim:
            # No retry can fix this: the start check missed it (a model whose dimension
            # its files do not state). The jobs end dead with the way out in last_error.
            raise vectors.DimensionMismatch(
                f"the embedder {ctx.embedder.name!r} made {len(encoded[0])}-dimensional vectors, but "
                f"the store's index holds {index_dim}; run `memoryd reembed --embedder "
                f"{ctx.embedder.spec}` with the daemon stopped, or go back to the embedder the "
                "store was built with")
        by_id = {r.id: (r.content_hash, vec) for r, vec in zip(todo, encoded, strict=True)}

        result = PassResult()
        now = ctx.now()
        stamp = rfc3339_from_epoch(now)
        with ctx.engine.begin() as conn:
            # Re-read inside the write transaction: only rows that still hold the
            # encoded content get a vector.
            current = {r.id: r for r in conn.execute(select(*_COLUMNS).where(memories.c.id.in_(ids)))}
            held = jobq.complete_many(conn, batch, now=now)
            embedded = vectors.embedded_seqs(conn, [r.seq for i, r in current.items() if i in early])
            out = []
            follow_ups: list[tuple[str, str]] = []
            for job in batch:
                if job.id not in held:
                    result.stale += 1
                    continue
                encoded_pair = by_id.get(job.target)
                row = current.get(job.target)
                if (encoded_pair is None or row is None or row.status not in EMBEDDABLE
                        or row.content_hash != encoded_pair[0]):
                    result.skipped += 1
                    continue
                if turns.is_turn(row) and not _same(turns.previous(conn, row), context.get(job.target)):
                    # The turn before it changed meanwhile (forgotten, or one arrived in between):
                    # this vector would hold the wrong context, so the turn is embedded again.
                    result.skipped += 1
                    follow_ups.append(("embed", job.target))
                    continue
                follow_ups += [(follow, job.target) for follow in FOLLOW_UPS
                               if follow != "classify" or row.kind == "auto"]
                if job.target in early and row.seq not in embedded:
                    # The turn after it was stored first, and embedded without it. Only on this
                    # turn's first vector: its re-embeds do not change that turn's context.
                    follow_ups.append(("embed", early[job.target]))
                out.append({
                    "memory_seq": row.seq, "model": ctx.embedder.name, "dim": len(encoded_pair[1]),
                    "vector": vectors.to_blob(encoded_pair[1]), "content_hash": row.content_hash,
                    "embedded_at": stamp,
                })
                result.processed += 1
            jobq.enqueue_many(conn, follow_ups, now=now, max_attempts=ctx.config.job_max_attempts)
            vectors.upsert(conn, out)
        return result

