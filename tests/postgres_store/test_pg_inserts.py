"""INSERT ... ON CONFLICT DO NOTHING on PostgreSQL tells an added row from a skipped one.

SQLAlchemy reports a psycopg INSERT's rowcount as -1, which is truthy: a check on rowcount
took every skipped insert for an added one (a rejected proposal was raised again).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, func, select

from memoryd.queue import jobs as jobq
from memoryd.store import proposals
from memoryd.store.schema import jobs
from memoryd.store.schema import proposals as proposals_table

pytestmark = pytest.mark.postgres


def test_a_proposal_raised_twice_is_opened_once(pg_engine: Engine) -> None:
    def propose(ids: list[str]) -> str | None:
        with pg_engine.begin() as conn:
            return proposals.propose(conn, kind="supersede", memory_ids=ids, reason="test", payload={},
                                     created_by="reflect", now=datetime.now(UTC))

    first = propose(["mem_a", "mem_b"])
    assert first is not None and first.startswith("prp_")
    assert propose(["mem_a", "mem_b"]) is None
    assert propose(["mem_b", "mem_a"]) is None  # the same rows in another order
    other = propose(["mem_a", "mem_c"])  # positive control: other rows are a new proposal
    assert other is not None and other != first
    with pg_engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(proposals_table)).scalar() == 2


def test_enqueue_reports_false_while_a_live_job_holds_the_target(pg_engine: Engine) -> None:
    with pg_engine.begin() as conn:
        assert jobq.enqueue(conn, "embed", "mem_1", now=time.time()) is True
        assert jobq.enqueue(conn, "embed", "mem_1", now=time.time()) is False
        assert jobq.enqueue(conn, "embed", "mem_2", now=time.time()) is True  # positive control
        assert conn.execute(select(func.count()).select_from(jobs)).scalar() == 2
