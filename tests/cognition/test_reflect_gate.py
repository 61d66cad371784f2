"""reflect: similar is not contradictory (the candidate gate), and rejection is remembered."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import Engine, select

from memoryd.config import Config
from memoryd.passes.base import PassContext
from memoryd.passes.reflect import ReflectPass, is_candidate
from memoryd.store import proposals, vectors
from memoryd.store.memories import NewMemory, WriteContext, request_hash, write_memory
from memoryd.store.schema import memories

from .conftest import T0

NOW = datetime.fromtimestamp(T0, UTC)
JACCARD = Config().reflect_subject_jaccard


@pytest.mark.parametrize(("a", "b"), [
    ("The auth service listens on port 8080 in dev.", "The billing service listens on port 9090 in dev."),
    ("The api service listens on port 8000 behind nginx.",
     "The admin service listens on port 8001 behind nginx."),
    ("Alice's laptop is a ThinkPad X1.", "Bob's laptop is a MacBook Pro."),
    ("Alice's laptop is an M2 MacBook Pro.", "Bob's laptop is an M1 MacBook Air."),
    ("Session Redis is cache-01.prod:6379.", "Rate-limit Redis is cache-02.prod:6379."),
])
def test_different_subjects_with_different_values_are_not_candidates(a: str, b: str) -> None:
    assert is_candidate(a, b, JACCARD) is None
    assert is_candidate(b, a, JACCARD) is None


@pytest.mark.parametrize(("a", "b"), [
    ("Terraform is on 1.5.7 in every workspace.", "Terraform is on 1.7.4 in every workspace."),
    ("ingest is at v3.2.1 in prod.", "ingest is at v3.3.0 in prod."),
    ("The api service listens on port 8000 behind nginx.",
     "The api service listens on port 8080 behind nginx."),
    ("Session Redis runs on cache-01.prod:6379.", "Session Redis runs on cache-05.prod:6379."),
])
def test_same_subject_with_a_new_value_is_a_candidate(a: str, b: str) -> None:
    why = is_candidate(a, b, JACCARD)
    assert why is not None and "→" in why


@pytest.mark.parametrize(("a", "b"), [
    ("CI uses Node 18.", "CI uses Node 20."),
    ("Postgres on staging is version 14.", "Postgres on staging is version 15."),
])
def test_version_bump_at_the_end_of_a_sentence_is_a_candidate(a: str, b: str) -> None:
    assert is_candidate(a, b, JACCARD) is not None


def test_two_services_in_a_long_sentence_are_not_candidates() -> None:
    a = "Yesterday yonder-renderer went down for 41 minutes after a bad deploy; rolled back."
    b = "Yesterday zesty-exporter went down for 47 minutes after a bad deploy; rolled back."
    assert is_candidate(a, b, JACCARD) is None


def test_identical_values_or_normalised_duplicates_are_not_candidates() -> None:
    assert is_candidate("Terraform is on 1.5.7 today.", "terraform is on 1.5.7 today", JACCARD) is None
    assert is_candidate("Terraform is on 1.5.7 today.", "Terraform runs 1.5.7 today.", JACCARD) is None


def test_rejected_supersede_proposal_is_never_raised_again(engine: Engine) -> None:
    with engine.begin() as conn:
        pid = proposals.propose(conn, kind="supersede", memory_ids=["m_old", "m_new"], reason="r",
                                payload={"old_id": "m_old", "new_id": "m_new"}, created_by="reflect", now=NOW)
    assert pid is not None
    with engine.begin() as conn:
        assert proposals.close(conn, pid, "rejected", "operator", "both are true", NOW)
    with engine.begin() as conn:
        again = proposals.propose(conn, kind="supersede", memory_ids=["m_old", "m_new"], reason="r",
                                  payload={}, created_by="reflect", now=NOW)
        reversed_ = proposals.propose(conn, kind="supersede", memory_ids=["m_new", "m_old"], reason="r",
                                      payload={}, created_by="reflect", now=NOW)
        assert proposals.exists(conn, "supersede", ["m_old", "m_new"])
        other = proposals.propose(conn, kind="supersede", memory_ids=["m_old", "m_other"], reason="r",
                                  payload={}, created_by="reflect", now=NOW)
    assert again is None and reversed_ is None
    assert other is not None  # positive control: a different pair is still proposed
    with engine.connect() as conn:
        assert proposals.get(conn, pid).status == "rejected"
        assert proposals.count_open(conn) == 1


def test_the_reason_reads_old_value_to_new_whichever_rows_job_finds_the_pair(
        engine: Engine, write_ctx: WriteContext, make_ctx: Callable[..., PassContext]) -> None:
    old_text = "The staging database is Postgres 15 on db1:5432"
    new_text = "The staging database is Postgres 16 on db1:5432"
    ids = []
    with engine.begin() as conn:
        for text in (old_text, new_text):  # written in this order: old first
            params = {"content": text, "scope": "agent", "agent_id": "a1", "kind": "fact"}
            new = NewMemory(content=text, kind="fact", scope="agent", owner="a1", agent_id="a1",
                            request_hash=request_hash(params))
            ids.append(str(write_memory(conn, new, NOW, write_ctx)["id"]))
        seqs = dict(conn.execute(select(memories.c.id, memories.c.seq).where(memories.c.id.in_(ids))).all())
        same = np.ones(384, dtype=np.float32) / np.sqrt(384)  # neighbours at cosine 1
        vectors.upsert(conn, [{"memory_seq": seqs[i], "model": "test", "dim": 384,
                               "vector": vectors.to_blob(same), "content_hash": "t",
                               "embedded_at": "2026-01-01T00:00:00.000000Z"} for i in ids])
    ctx = make_ctx()
    with engine.connect() as conn:
        for job_target in reversed(ids):  # the newer row's job first: the order that read backwards
            found = ReflectPass().candidates(conn, job_target, ctx)
            assert [(o.id, n.id) for o, n, _ in found] == [(ids[0], ids[1])]
            assert "15 → 16" in found[0][2], found[0][2]


def _pair_at_cosine(engine: Engine, write_ctx: WriteContext, cosine: float, owner: str) -> list[str]:
    """A changed value (Postgres 15 → 16) written as two memories whose stored vectors are at
    ``cosine`` from each other."""
    ids = []
    with engine.begin() as conn:
        for text in ("The staging database is Postgres 15 on db1:5432",
                     "The staging database is Postgres 16 on db1:5432"):
            params = {"content": text, "scope": "agent", "agent_id": owner, "kind": "fact"}
            new = NewMemory(content=text, kind="fact", scope="agent", owner=owner, agent_id=owner,
                            request_hash=request_hash(params))
            ids.append(str(write_memory(conn, new, NOW, write_ctx)["id"]))
        seqs = dict(conn.execute(select(memories.c.id, memories.c.seq).where(memories.c.id.in_(ids))).all())
        a = np.zeros(384, dtype=np.float32)
        a[0] = 1.0
        b = np.zeros(384, dtype=np.float32)
        b[0], b[1] = cosine, float(np.sqrt(1.0 - cosine * cosine))
        vectors.upsert(conn, [{"memory_seq": seqs[i], "model": "test", "dim": 384,
                               "vector": vectors.to_blob(v), "content_hash": "t",
                               "embedded_at": "2026-01-01T00:00:00.000000Z"} for i, v in zip(ids, (a, b),
                                                                                            strict=True)])
    return ids


def test_a_pair_below_the_cosine_floor_is_no_candidate_whatever_its_words(
        engine: Engine, write_ctx: WriteContext, make_ctx: Callable[..., PassContext]) -> None:
    """reflect_min_cosine (0.6) gates before the words are compared: the same changed value at
    cosine 0.3 is not a candidate; at 0.9 it is (the positive control)."""
    floor = Config().reflect_min_cosine
    assert floor == 0.6  # docs/operations.md's default; the pairs below sit either side of it
    far = _pair_at_cosine(engine, write_ctx, 0.3, owner="far")
    near = _pair_at_cosine(engine, write_ctx, 0.9, owner="near")
    ctx = make_ctx()
    with engine.connect() as conn:
        assert ReflectPass().candidates(conn, far[1], ctx) == []
        found = ReflectPass().candidates(conn, near[1], ctx)
    assert [(o.id, n.id) for o, n, _ in found] == [(near[0], near[1])]
