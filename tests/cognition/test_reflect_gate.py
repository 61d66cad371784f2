"""reflect: similar is not contradictory (the candidate gate), and rejection is remembered."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine

from memoryd.config import Config
from memoryd.passes.reflect import is_candidate
from memoryd.store import proposals

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
