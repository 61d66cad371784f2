"""The consolidate pass: collapse duplicates, propose merges of near-duplicates.

Reads: the memory named by the job, its vector, and its nearest neighbours in
the same scope and owner (vec0 filters inside the KNN). Writes, in one
transaction with the job's completion:

* **normalised duplicates** (same text after case folding, whitespace and
  trailing punctuation) collapse: the newer row is retired as ``superseded``,
  linked ``merged_into`` the older, whose ``corroboration`` absorbs it (no
  text is lost: the retired row keeps its text);
* **near-duplicates** (cosine ≥ ``merge_min_cosine`` AND content-word overlap
  ≥ ``merge_min_jaccard`` AND same kind AND the same values — numbers,
  versions, hosts, paths) become a ``merge`` proposal for review, never a
  merge. Differing values are reflect's business, not a duplicate.

Running it twice changes nothing: a collapsed row is no longer live, and a
proposal for the same pair is never raised twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import Connection, select, update

from memoryd.clock import to_rfc3339
from memoryd.passes.base import PassContext, PerJobPass
from memoryd.queue.jobs import Job
from memoryd.store import audit, links, proposals, vectors
from memoryd.store.memories import content_hash, is_tombstoned
from memoryd.store.schema import LIVE_STATUSES, memories, memory_vectors
from memoryd.text.normalize import jaccard, loose
from memoryd.text.values import value_slots

NEIGHBOURS = 10


class ConsolidatePass(PerJobPass):
    name: ClassVar[str] = "consolidate"
    batch_size: ClassVar[int] = 32

    def apply(self, conn: Connection, job: Job, now: datetime, ctx: PassContext) -> None:
        consolidate_one(conn, job.target, now, ctx)


def neighbours(conn: Connection, row: Any) -> list[tuple[Any, float]]:
    """Live rows of the same scope and owner nearest to ``row``, with cosine similarity."""
    blob = conn.execute(select(memory_vectors.c.vector)
                        .where(memory_vectors.c.memory_seq == row.seq)).scalar()
    if blob is None:
        return []
    hits = vectors.knn(conn, vectors.from_blob(blob), k=NEIGHBOURS + 1,
                       scope_keys=[f"{row.scope}:{row.owner}"], statuses=LIVE_STATUSES, kind=None)
    sims = {seq: 1.0 - dist for seq, dist in hits if seq != row.seq}
    if not sims:
        return []
    rows = conn.execute(select(memories).where(memories.c.seq.in_(list(sims)),
                                               memories.c.status.in_(LIVE_STATUSES)))
    return sorted(((r, sims[r.seq]) for r in rows), key=lambda p: -p[1])


def consolidate_one(conn: Connection, memory_id: str, now: datetime, ctx: PassContext) -> str | None:
    """Consolidate one memory; return what was done ('collapsed', 'proposed' or None)."""
    row = conn.execute(select(memories).where(memories.c.id == memory_id)).first()
    if row is None or row.status not in LIVE_STATUSES or row.content is None:
        return None
    cfg = ctx.config
    for other, sim in neighbours(conn, row):
        if loose(other.content) == loose(row.content):
            collapse(conn, row, other, now)
            return "collapsed"
        if (sim >= cfg.merge_min_cosine and other.kind == row.kind
                and jaccard(row.content, other.content) >= cfg.merge_min_jaccard
                and value_slots(row.content)[1] == value_slots(other.content)[1]):
            ids = sorted([row.id, other.id])
            merged_text = max((row.content, other.content), key=len)
            if is_tombstoned(conn, row.scope, row.owner, content_hash(merged_text)):
                continue
            proposals.propose(
                conn, kind="merge", memory_ids=ids,
                reason=f"near-duplicates: cosine {sim:.3f}, word overlap "
                       f"{jaccard(row.content, other.content):.2f}, same kind and values",
                payload={"merged_text": merged_text}, created_by="consolidate", now=now,
            )
            return "proposed"
    return None


def collapse(conn: Connection, a: Any, b: Any, now: datetime) -> None:
    """Retire the newer of two normalised duplicates into the older."""
    keep, drop = (a, b) if (a.recorded_at, a.seq) < (b.recorded_at, b.seq) else (b, a)
    stamp = to_rfc3339(now)
    retired = conn.execute(update(memories).where(memories.c.id == drop.id,
                                                  memories.c.status.in_(LIVE_STATUSES))
                           .values(status="superseded", retired_at=stamp, valid_to=stamp)).rowcount
    if not retired:
        return
    conn.execute(update(memories).where(memories.c.id == keep.id)
                 .values(corroboration=memories.c.corroboration + drop.corroboration))
    links.add(conn, drop.id, keep.id, links.MERGED_INTO, stamp)
    audit.append(conn, at=stamp, actor="pass:consolidate", memory_id=drop.id, action="memory.collapse",
                 detail={"before": {"status": drop.status}, "after": {"status": "superseded"},
                         "merged_into": keep.id, "corroboration": keep.corroboration + drop.corroboration})
