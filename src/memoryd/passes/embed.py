"""The embed pass: encodes new memories with the embedder and stores their vectors.

Reads: ``memories`` rows named by its jobs (content, content_hash, status).
Writes: one ``memory_vectors`` row per memory, and the job's completion, in one
transaction. Running it twice changes nothing: the vector is an upsert keyed
by the memory, written only while the row still holds the content that was
encoded (a row forgotten or changed meanwhile gets no stale vector).
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import select

from memoryd.clock import rfc3339_from_epoch
from memoryd.passes.base import Pass, PassContext, PassResult
from memoryd.queue import jobs as jobq
from memoryd.queue.jobs import Job
from memoryd.store import vectors
from memoryd.store.engine import read_only
from memoryd.store.schema import memories

EMBEDDABLE = ("active", "candidate", "superseded", "archived")
#: Passes that need a memory's vector, enqueued when it is stored.
FOLLOW_UPS = ("classify", "consolidate", "reflect")



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
            rows = {
                r.id: r
                for r in conn.execute(
                    select(memories.c.id, memories.c.content, memories.c.content_hash,
                           memories.c.status).where(memories.c.id.in_(ids))
                )
            }
            index_dim = vectors.index_dim(conn)
        todo = [r for r in rows.values() if r.content is not None and r.status in EMBEDDABLE]
        encoded: list[Any] = (
            list(ctx.embedder.encode([r.content for r in todo], threads=ctx.threads)) if todo else []
        )
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
            current = {
                r.id: r
                for r in conn.execute(
                    select(memories.c.id, memories.c.seq, memories.c.content_hash,
                           memories.c.status, memories.c.kind).where(memories.c.id.in_(ids))
                )
            }
            held = jobq.complete_many(conn, batch, now=now)
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
                follow_ups += [(follow, job.target) for follow in FOLLOW_UPS
                               if follow != "classify" or row.kind == "auto"]
                out.append({
                    "memory_seq": row.seq, "model": ctx.embedder.name, "dim": len(encoded_pair[1]),
                    "vector": vectors.to_blob(encoded_pair[1]), "content_hash": row.content_hash,
                    "embedded_at": stamp,
                })
                result.processed += 1
            jobq.enqueue_many(conn, follow_ups, now=now, max_attempts=ctx.config.job_max_attempts)
            vectors.upsert(conn, out)
        return result

