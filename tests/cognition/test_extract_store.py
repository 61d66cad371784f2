"""extract and derive on a real migrated store: idempotence, citations and promotion."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, delete, func, select

from memoryd.passes.base import PassContext
from memoryd.passes.extract import ExtractPass
from memoryd.queue import jobs as jobq
from memoryd.store import derive, links
from memoryd.store.memories import NewMemory, WriteContext, get_row, request_hash, write_memory
from memoryd.store.schema import entities, entity_mentions, extractions, memories, memory_links, proposals

from .conftest import T0

NOW = datetime.fromtimestamp(T0, UTC)
SOURCE = "Staging runs Postgres 15 on db1.internal:5432; prod is still on 14."
ANSWER = {"entities": [{"name": "Postgres", "type": "database"},
                       {"name": "db1.internal:5432", "type": "host"}],
          "facts": ["Staging runs Postgres 15", "Staging Postgres is on db1.internal:5432"]}


#: What extract must derive from SOURCE with ANSWER, written out by hand: the source's two
#: clauses (split at ';', each a sentence of its own) and the model's two facts, all grounded
#: in the source's words.
EXPECTED_FACTS = {"Staging runs Postgres 15 on db1.internal:5432", "Prod is still on 14",
                  "Staging runs Postgres 15", "Staging Postgres is on db1.internal:5432"}


class FixedLLM:
    """Answers every extraction with the same schema-valid JSON (what a deterministic model would)."""

    name = "fixed"

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = json.dumps(answer)
        self.calls = 0

    def complete(self, prompt: str, **kw: Any) -> str:
        assert kw.get("schema") is not None, "extract must constrain the model with its schema"
        self.calls += 1
        return self.answer

    def unavailable_reason(self) -> str | None:
        return None


def write(engine: Engine, ctx: WriteContext, content: str, owner: str = "a1") -> str:
    params = {"content": content, "scope": "agent", "agent_id": owner, "kind": "fact"}
    new = NewMemory(content=content, kind="fact", scope="agent", owner=owner, agent_id=owner,
                    request_hash=request_hash(params))
    with engine.begin() as conn:
        return str(write_memory(conn, new, NOW, ctx)["id"])


def run_extract(ctx: PassContext, target: str) -> Any:
    with ctx.engine.begin() as conn:
        jobq.enqueue(conn, "extract", target, now=T0)
        batch = jobq.claim(conn, "extract", owner="test", now=T0, lease_s=60, limit=10)
    assert [j.target for j in batch] == [target]
    return ExtractPass().run(batch, ctx)


def counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        def n(table: Any, *where: Any) -> int:
            return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())
        return {"derived": n(memories, memories.c.derived.is_(True)), "entities": n(entities),
                "mentions": n(entity_mentions), "links": n(memory_links), "extractions": n(extractions),
                "promote_proposals": n(proposals, proposals.c.kind == "promote")}


def derived_contents(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return {r[0] for r in conn.execute(select(memories.c.content).where(memories.c.derived.is_(True)))}


def entity_names(engine: Engine) -> set[tuple[str, str]]:
    with engine.connect() as conn:
        return {(r.name, r.type) for r in conn.execute(select(entities.c.name, entities.c.type))}


def test_extracting_the_same_source_twice_adds_no_derived_memories_or_mentions(
        engine: Engine, write_ctx: WriteContext, make_ctx: Callable[..., PassContext]) -> None:
    llm = FixedLLM(ANSWER)
    ctx = make_ctx(llm=llm)
    source = write(engine, write_ctx, SOURCE)
    first = run_extract(ctx, source)
    assert first.processed == 1
    after_first = counts(engine)
    # Positive control: the first run wrote the candidates, the entities and their mentions.
    assert derived_contents(engine) == EXPECTED_FACTS and after_first["extractions"] == 1
    assert entity_names(engine) == {("Postgres", "database"), ("db1.internal:5432", "host")}
    assert after_first["mentions"] == after_first["entities"] == 2
    assert after_first["links"] == after_first["derived"] == len(EXPECTED_FACTS)  # each fact cites the source

    # A redelivered job: the source's content hash is already extracted, so it is skipped.
    second = run_extract(ctx, source)
    assert (second.processed, second.skipped) == (0, 1)
    assert llm.calls == 1
    assert counts(engine) == after_first and derived_contents(engine) == EXPECTED_FACTS

    # Even a forced re-extraction (the extractions record gone) writes nothing new.
    with engine.begin() as conn:
        conn.execute(delete(extractions))
    third = run_extract(ctx, source)
    assert third.processed == 1 and llm.calls == 2
    assert counts(engine) == after_first and derived_contents(engine) == EXPECTED_FACTS


def test_derived_fact_cites_its_live_source_and_starts_as_candidate(
        engine: Engine, write_ctx: WriteContext, make_ctx: Callable[..., PassContext]) -> None:
    source = write(engine, write_ctx, SOURCE)
    run_extract(make_ctx(llm=FixedLLM(ANSWER)), source)
    with engine.connect() as conn:
        derived = conn.execute(select(memories.c.id, memories.c.status, memories.c.content)
                               .where(memories.c.derived.is_(True))).all()
        assert set(ANSWER["facts"]) <= {d.content for d in derived}
        for d in derived:
            assert d.status == "candidate"
            cited = links.targets(conn, d.id, links.CITES)
            assert cited == [source]
            assert get_row(conn, cited[0]).status == "active"


def source_row(engine: Engine, memory_id: str) -> Any:
    with engine.connect() as conn:
        return get_row(conn, memory_id)


def test_same_fact_from_a_second_different_source_promotes_the_candidate(
        engine: Engine, write_ctx: WriteContext) -> None:
    first = source_row(engine, write(engine, write_ctx, SOURCE))
    second = source_row(engine, write(engine, write_ctx, "Reminder: staging runs Postgres 15 (not 16)."))
    fact = "Staging runs Postgres 15"
    with engine.begin() as conn:
        fact_id, outcome = derive.derive_fact(conn, first, fact, NOW, write_ctx)
    assert outcome == "created"
    with engine.begin() as conn:
        again_id, again = derive.derive_fact(conn, first, fact, NOW, write_ctx)
    assert (again_id, again) == (fact_id, "cited")  # the same source twice is not corroboration
    assert source_row(engine, fact_id).status == "candidate"
    with engine.begin() as conn:
        promoted_id, promoted = derive.derive_fact(conn, second, fact, NOW, write_ctx)
    assert (promoted_id, promoted) == (fact_id, "promoted")
    assert source_row(engine, fact_id).status == "active"
    with engine.connect() as conn:
        assert sorted(links.targets(conn, fact_id, links.CITES)) == sorted([first.id, second.id])


def test_a_source_written_again_with_the_same_content_is_one_source(
        engine: Engine, write_ctx: WriteContext) -> None:
    """Rewriting identical content yields the same row (a duplicate), so it cannot corroborate."""
    first_id = write(engine, write_ctx, SOURCE)
    rewritten_id = write(engine, write_ctx, "  " + SOURCE + "  ")
    assert rewritten_id == first_id
    with engine.begin() as conn:
        fact_id, _ = derive.derive_fact(conn, get_row(conn, first_id), "Staging runs Postgres 15", NOW,
                                        write_ctx)
        _, outcome = derive.derive_fact(conn, get_row(conn, rewritten_id), "Staging runs Postgres 15", NOW,
                                        write_ctx)
    assert outcome == "cited"
    assert source_row(engine, fact_id).status == "candidate"


class OneBadAnswerLLM(FixedLLM):
    """Answers ANSWER, except for the prompt holding ``poison``: text outside the schema."""

    def __init__(self, poison: str) -> None:
        super().__init__(ANSWER)
        self.poison = poison

    def complete(self, prompt: str, **kw: Any) -> str:
        self.calls += 1
        return "I cannot answer that." if self.poison in prompt else self.answer


def test_one_invalid_answer_fails_its_own_job_alone_and_its_neighbours_are_written(
        engine: Engine, write_ctx: WriteContext, make_ctx: Callable[..., PassContext]) -> None:
    sources = [SOURCE, "The nightly ETL job poisons the cache at 02:00.",
               "Prod deploys run from bastion.prod."]
    ids = [write(engine, write_ctx, text) for text in sources]
    llm = OneBadAnswerLLM(poison="nightly ETL")
    ctx = make_ctx(llm=llm)
    with engine.begin() as conn:
        for target in ids:
            jobq.enqueue(conn, "extract", target, now=T0)
        batch = jobq.claim(conn, "extract", owner="test", now=T0, lease_s=60, limit=10)
    assert sorted(j.target for j in batch) == sorted(ids)
    result = ExtractPass().run(batch, ctx)
    # An answer that is not JSON: a ValueError (JSONDecodeError) charged to that job alone.
    assert [(job.target, isinstance(exc, ValueError)) for job, exc in result.failed] == [(ids[1], True)]
    assert llm.calls == 3
    with engine.connect() as conn:
        done = {row.memory_id for row in conn.execute(select(extractions.c.memory_id))}
    # The two good answers were stored for their own sources; the bad one stored nothing.
    assert done == {ids[0], ids[2]}
