"""The extract pass: entities and grounded atomic facts, as derived memories.

Reads: a source memory. Asks: deterministic extractors (URLs, paths,
host:port, versions, issue ids, commands, a gazetteer of well-known names;
facts from the note's self-contained clauses, text/clauses.py) and the LLM,
whose answer a JSON schema constrains to the configured entity types.
Validates: an entity type outside the vocabulary is discarded and counted; an
entity name not in the source, or a fact whose content words or values are not
in the source, is dropped and counted. Writes, in one transaction with the
job's completion: entities (canonicalised: exact → normalised/alias →
embedding match), mentions, derived ``candidate`` facts citing the source
(store/derive.py) and an ``extractions`` record.

Running it twice changes nothing: a source already extracted with the same
content hash is skipped; tombstoned facts are never re-derived.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import numpy as np
from sqlalchemy import Connection, select

from memoryd.clock import to_rfc3339
from memoryd.errors import StaleLease
from memoryd.passes.base import Pass, PassContext, PassResult
from memoryd.queue import jobs as jobq
from memoryd.queue.jobs import Job
from memoryd.store import derive, failures, vectors
from memoryd.store import entities as ents
from memoryd.store.backends import backend_for
from memoryd.store.engine import read_only
from memoryd.store.memories import WriteContext
from memoryd.store.schema import LIVE_STATUSES, extractions, memories
from memoryd.text.clauses import clauses
from memoryd.text.entities import Found, find_deterministic, normalise
from memoryd.text.grounding import grounded
from memoryd.text.normalize import loose

MAX_FACTS = 4
MAX_ENTITIES = 8
NAME_MATCH_COSINE = 0.88

EXAMPLES = [
    ("Staging runs Postgres 15 on db1.internal:5432; prod is still on 14.",
     {"entities": [{"name": "Postgres", "type": "database"}, {"name": "db1.internal:5432", "type": "host"}],
      "facts": ["Staging runs Postgres 15", "Staging Postgres is on db1.internal:5432",
                "Prod is still on Postgres 14"]}),
    ("Alice wants the billing service rewritten in Go before the Q3 audit.",
     {"entities": [{"name": "Alice", "type": "person"}, {"name": "billing service", "type": "service"},
                   {"name": "Go", "type": "language"}],
      "facts": ["Alice wants the billing service rewritten in Go"]}),
    ("Run `make test` before pushing; CI on GitHub Actions runs the same target.",
     {"entities": [{"name": "make test", "type": "command"}, {"name": "GitHub Actions", "type": "tool"}],
      "facts": ["Run make test before pushing", "CI on GitHub Actions runs make test"]}),
]


def schema(types: list[str]) -> dict[str, Any]:
    """The JSON schema the LLM's answer must follow (types from the configuration)."""
    return {
        "type": "object",
        "properties": {
            "entities": {"type": "array", "maxItems": MAX_ENTITIES, "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 80}, "type": {"enum": types}},
                "required": ["name", "type"]}},
            "facts": {"type": "array", "maxItems": MAX_FACTS,
                      "items": {"type": "string", "maxLength": 200}},
        },
        "required": ["entities", "facts"],
    }


def prompt(text: str) -> str:
    lines = ["Extract the named entities and the atomic facts stated in each developer note.", ""]
    for note, answer in EXAMPLES:
        lines += [f"Note: {note}", f"JSON: {json.dumps(answer)}", ""]
    lines += [f"Note: {' '.join(text.split())[:1200]}", "JSON:"]
    return "\n".join(lines)


@dataclass
class Extraction:
    """What survived validation for one source, and what was dropped."""

    entities: list[Found] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    dropped_ungrounded: int = 0
    dropped_vocabulary: int = 0


def validate(text: str, answer: Any, types: list[str], deterministic: list[Found],
             llm_types: list[str] | None = None) -> Extraction:
    """Keep what the source grounds and the vocabulary allows; count the rest."""
    if not isinstance(answer, dict) or not isinstance(answer.get("entities"), list) \
            or not isinstance(answer.get("facts"), list):
        raise ValueError("the LLM's answer does not follow the extraction schema")
    out = Extraction(entities=list(deterministic))
    seen = {(f.name.lower(), f.type) for f in deterministic}
    lowered = text.lower()
    for item in answer["entities"][:MAX_ENTITIES]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError("an entity in the LLM's answer has no name")
        name, type_ = item["name"].strip(), item.get("type")
        if type_ not in types:
            out.dropped_vocabulary += 1
            continue
        if not name or name.lower() not in lowered:
            out.dropped_ungrounded += 1
            continue
        if llm_types is not None and type_ not in llm_types:
            continue  # the rules find this type better; the model's guess is not kept
        if (name.lower(), type_) not in seen:
            seen.add((name.lower(), type_))
            out.entities.append(Found(name, type_))
    source_loose = loose(text)
    llm_facts = answer["facts"][:MAX_FACTS]
    if any(not isinstance(f, str) for f in llm_facts):
        raise ValueError("a fact in the LLM's answer is not a string")
    seen_facts: set[str] = set()
    for fact in [*clauses(text), *llm_facts]:
        fact = " ".join(fact.split()).strip()
        if not fact:
            continue
        if not grounded(fact, text):
            out.dropped_ungrounded += 1
            continue
        if loose(fact) != source_loose and loose(fact) not in seen_facts:
            seen_facts.add(loose(fact))
            out.facts.append(fact)
    out.facts = out.facts[:MAX_FACTS]
    return out


class ExtractPass(Pass):
    name: ClassVar[str] = "extract"
    model_backed: ClassVar[bool] = True
    batch_size: ClassVar[int] = 4

    def unavailable_reason(self, ctx: PassContext) -> str | None:
        if ctx.llm is None:
            return "needs the LLM (none configured)"
        reason: str | None = ctx.llm.unavailable_reason()
        return reason or ctx.embedder.unavailable_reason()

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        result = PassResult()
        types = list(ctx.config.entity_types)
        with read_only(ctx.engine) as conn:
            rows = {r.id: r for r in conn.execute(select(memories).where(
                memories.c.id.in_([j.target for j in batch])))}
            done = {r.memory_id: r.content_hash for r in conn.execute(select(extractions).where(
                extractions.c.memory_id.in_([j.target for j in batch])))}
        outcomes: dict[int, Extraction | Exception | None] = {}
        for job in batch:
            row = rows.get(job.target)
            if (row is None or row.content is None or row.derived or row.status not in LIVE_STATUSES
                    or done.get(row.id) == row.content_hash):
                outcomes[job.id] = None
                continue
            try:
                raw = ctx.llm.complete(prompt(row.content), schema=schema(types), max_tokens=320,
                                       timeout_s=ctx.config.llm_timeout_s, threads=ctx.threads,
                                  family="extract")
                outcomes[job.id] = validate(row.content, json.loads(raw), types,
                                            find_deterministic(row.content),
                                            list(ctx.config.llm_entity_types))
            except Exception as exc:
                if failures.kind_of(exc) != "permanent":
                    raise
                # An invalid answer (or a timeout) is this job's failed attempt, never a default.
                outcomes[job.id] = exc
        names = sorted({f.name for o in outcomes.values() if isinstance(o, Extraction) for f in o.entities})
        name_vecs = dict(zip(names, ctx.embedder.encode(names), strict=True)) if names else {}
        now_epoch = ctx.now()
        now = datetime.fromtimestamp(now_epoch, UTC)
        wctx = WriteContext(actor=f"pass:{self.name}", passes=("embed",),
                            max_attempts=ctx.config.job_max_attempts,
                            idempotency_ttl_s=ctx.config.idempotency_ttl_s)
        with ctx.engine.begin() as conn:
            for job in batch:
                outcome = outcomes.get(job.id)
                if isinstance(outcome, Exception):
                    result.failed.append((job, outcome))  # the runner charges it
                    continue
                try:
                    jobq.complete(conn, job, now=now_epoch)
                except StaleLease:
                    result.stale += 1
                    continue
                if outcome is None:
                    result.skipped += 1
                    continue
                self._store(conn, rows[job.target], outcome, name_vecs, now, wctx)
                result.processed += 1
        return result

    def _store(self, conn: Connection, source: Any, ex: Extraction, name_vecs: dict[str, np.ndarray],
               now: datetime, wctx: WriteContext) -> None:
        stamp = to_rfc3339(now)
        for found in ex.entities:
            entity_id = canonical_entity(conn, source.scope, source.owner, found, name_vecs.get(found.name),
                                         stamp)
            ents.mention(conn, entity_id, source.id, found.name)
        kept = 0
        for fact in ex.facts:
            memory_id, outcome = derive.derive_fact(conn, source, fact, now, wctx)
            kept += memory_id is not None and outcome != "exists"
        values = {"content_hash": source.content_hash, "extracted_at": stamp, "method": "llm+rules",
                  "entities_kept": len(ex.entities), "facts_kept": kept,
                  "dropped_ungrounded": ex.dropped_ungrounded, "dropped_vocabulary": ex.dropped_vocabulary}
        # One row per source, replaced when it is extracted again (both backends' upsert).
        conn.execute(backend_for(conn).insert(extractions).values(memory_id=source.id, **values)
                     .on_conflict_do_update(index_elements=[extractions.c.memory_id], set_=values))


def canonical_entity(conn: Connection, scope: str, owner: str, found: Found, vector: np.ndarray | None,
                     at: str) -> int:
    """Exact/normalised key or alias first; then the nearest same-type name by embedding."""
    norm = normalise(found.name)
    entity_id = ents.find(conn, scope, owner, norm, found.type)
    if entity_id is not None:
        return entity_id
    if vector is not None:
        best, best_sim = None, NAME_MATCH_COSINE
        for cand in ents.candidates(conn, scope, owner, found.type):
            sim = float(vectors.from_blob(cand.vector) @ vector)
            if sim >= best_sim:
                best, best_sim = cand.id, sim
        if best is not None:
            ents.add_alias(conn, best, norm)
            return int(best)
    return ents.create(conn, scope, owner, found.name, norm, found.type,
                       vectors.to_blob(vector) if vector is not None else None, at)
