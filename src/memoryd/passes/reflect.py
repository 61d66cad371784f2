"""The reflect pass: find contradictions and updates, and propose supersessions.

Reads: the memory named by the job and its nearest live neighbours in the same
scope and owner. A pair is a candidate only when the two texts say the same
thing about the same subject with different values — their text with values
masked (numbers, versions, hosts, paths, dates…) is the same, or nearly (word
overlap ≥ ``reflect_subject_jaccard``), and the values differ. Similar is not
contradictory: "auth listens on 8080" and "billing listens on 9090" differ in
the subject, so they are never a candidate.

Each candidate is judged by the LLM with a grammar-bound answer. With
``reflect_llm_veto`` (for a capable configured model) the answer may be
updates | contradicts | compatible | duplicate, and only the first two become
a proposal. The bundled 270M base model answered "duplicate" for every real
update we measured, so by default the gate decides *whether* and the LLM only
labels *how* (updates | contradicts). A ``supersede`` proposal (older → newer
by record time) goes to review; reflect never changes a row's status. A pair
ever proposed (open, approved or rejected) is never proposed again, so running
it twice changes nothing.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import Connection, select

from memoryd.errors import StaleLease
from memoryd.passes.base import Pass, PassContext, PassResult
from memoryd.passes.consolidate import neighbours
from memoryd.queue import jobs as jobq
from memoryd.queue.jobs import Job
from memoryd.store import failures, proposals
from memoryd.store.engine import read_only
from memoryd.store.schema import LIVE_STATUSES, memories
from memoryd.text.normalize import STOPWORDS, jaccard, loose, tokens
from memoryd.text.values import value_slots

RELATIONS = ("updates", "contradicts", "compatible", "duplicate")
LLM_RETRY_S = 300.0
JUDGE_EXAMPLES = [
    ("The staging DB is Postgres 14.", "The staging DB is Postgres 15.", "updates"),
    ("The auth service listens on port 8080.", "The billing service listens on port 9090.", "compatible"),
    ("CI uses Node 18.", "CI uses Node 20.", "contradicts"),
    ("Run tests with make test.", "Tests are run with `make test`.", "duplicate"),
    ("Alice's laptop is a ThinkPad X1.", "Bob's laptop is a MacBook Pro.", "compatible"),
]


#: "us" is a region (us-east-1), not a pronoun, in these notes.
SUBJECT_STOPWORDS = STOPWORDS - {"us"}


def _norm_value(v: str) -> str:
    v = v[1:] if re.fullmatch(r"v\d.*", v) else v  # v3.3.0 == 3.3.0
    return v.rstrip("/")  # https://x/ == https://x


def _subject_words(subject: str) -> set[str]:
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in tokens(subject) if w not in SUBJECT_STOPWORDS}


def is_candidate(a: str, b: str, min_subject_jaccard: float = 0.0) -> str | None:
    """Why (a, b) may be an update or contradiction, or None.

    Measured on tests/data/lifecycle_pairs.jsonl (bench/lifecycle.py): precision
    1.0, 0 of 57 compatible pairs proposed. The rules:

    * values compare normalised ("v2.1" = "2.1") and as a multiset, so a
      reordered or reformatted restatement is not a change;
    * when two or more values all change at once it is another thing
      (v2.3.0 on May 14 vs v2.3.1 on May 21), not a change of one;
    * subjects (the texts with values masked) match by containment: every
      word of the shorter occurs in the longer. An update adds words
      ("now", "moved to"); a different subject swaps one (billing/shipping),
      which is two facts about two things, however alike they read.
    """
    if loose(a) == loose(b):
        return None
    subj_a, vals_a = value_slots(a)
    subj_b, vals_b = value_slots(b)
    if not vals_a or not vals_b or sorted(map(_norm_value, vals_a)) == sorted(map(_norm_value, vals_b)):
        return None
    if len(vals_a) >= 2 and len(vals_a) == len(vals_b) and all(
            x != y for x, y in zip(vals_a, vals_b, strict=True)):
        return None
    wa, wb = _subject_words(subj_a), _subject_words(subj_b)
    if subj_a != subj_b and (not wa or not wb or len(wa & wb) < min(len(wa), len(wb))):
        return None
    if jaccard(subj_a, subj_b) < min_subject_jaccard:
        return None
    changed = [f"{x} → {y}" for x, y in zip(vals_a, vals_b, strict=False) if x != y]
    return "same subject, different value: " + ", ".join(changed or [f"{vals_a} → {vals_b}"])


def judge_prompt(older: str, newer: str) -> str:
    lines = ["Two notes about a software project; the second was written later.",
             "Relation: updates, contradicts, compatible or duplicate.", ""]
    for a, b, rel in JUDGE_EXAMPLES:
        lines += [f"First: {a}", f"Second: {b}", f"Relation: {rel}", ""]
    lines += [f"First: {' '.join(older.split())[:500]}", f"Second: {' '.join(newer.split())[:500]}",
              "Relation:"]
    return "\n".join(lines)


class ReflectPass(Pass):
    name: ClassVar[str] = "reflect"
    model_backed: ClassVar[bool] = True
    batch_size: ClassVar[int] = 8

    def unavailable_reason(self, ctx: PassContext) -> str | None:
        if ctx.llm is None:
            return "needs the LLM (none configured)"
        reason: str | None = ctx.llm.unavailable_reason()
        return reason

    def candidates(self, conn: Connection, memory_id: str, ctx: PassContext) -> list[tuple[Any, Any, str]]:
        row = conn.execute(select(memories).where(memories.c.id == memory_id)).first()
        if row is None or row.status not in LIVE_STATUSES or row.content is None:
            return []
        out = []
        for other, sim in neighbours(conn, row):
            if sim < ctx.config.reflect_min_cosine:
                continue
            older, newer = sorted((row, other), key=lambda r: (r.recorded_at, r.seq))
            # Older first, so the reason reads "old value → new value" whichever one the job is for.
            why = is_candidate(older.content, newer.content, ctx.config.reflect_subject_jaccard)
            if why is None:
                continue
            if proposals.exists(conn, "supersede", [older.id, newer.id]):
                continue
            out.append((older, newer, why))
        return out

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        result = PassResult()
        with read_only(ctx.engine) as conn:
            found = {job.id: self.candidates(conn, job.target, ctx) for job in batch}
        # The LLM runs outside any transaction.
        planned: dict[int, list[tuple[Any, Any, str, str]]] = {}
        for job in batch:
            try:
                planned[job.id] = self._judge(found[job.id], ctx)
            except Exception as exc:
                if failures.kind_of(exc) != "permanent":
                    raise
                result.failed.append((job, exc))  # this job alone is charged (an invalid answer)
        failed = {job.id for job, _ in result.failed}
        now_epoch = ctx.now()
        now = datetime.fromtimestamp(now_epoch, UTC)
        with ctx.engine.begin() as conn:
            for job in batch:
                if job.id in failed:
                    continue
                try:
                    jobq.complete(conn, job, now=now_epoch)
                except StaleLease:
                    result.stale += 1
                    continue
                for older, newer, why, relation in planned.get(job.id, []):
                    if relation in ("updates", "contradicts"):
                        proposals.propose(
                            conn, kind="supersede", memory_ids=[older.id, newer.id],
                            reason=f"{newer.id} {relation} {older.id}: {why}",
                            payload={"old_id": older.id, "new_id": newer.id, "relation": relation},
                            created_by="reflect", now=now)
                result.processed += 1
        return result

    def _judge(self, found: list[tuple[Any, Any, str]], ctx: PassContext) -> list[tuple[Any, Any, str, str]]:
        """The LLM's relation for each candidate pair of one job (outside any transaction)."""
        judged = []
        allowed = RELATIONS if ctx.config.reflect_llm_veto else ("updates", "contradicts")
        for older, newer, why in found:
            answer = ctx.llm.complete(
                judge_prompt(older.content, newer.content),
                grammar="root ::= " + " | ".join(f'" {r}"' for r in allowed),
                max_tokens=4, timeout_s=ctx.config.llm_timeout_s, threads=ctx.threads, family="reflect")
            relation = answer.strip()
            if relation not in allowed:
                raise ValueError("the LLM's answer is not one of the relations "
                                 f"{', '.join(allowed)} (grammar not followed)")
            judged.append((older, newer, why, relation))
        return judged
