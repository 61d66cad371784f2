"""queue.retry with a job id past PostgreSQL's integer column names no job: it revives nothing
and raises nothing (it answered 1003, "integer out of range", to the hostile-input suite)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from memoryd.queue import jobs as jobq

pytestmark = pytest.mark.postgres


def test_a_job_id_past_the_columns_range_names_no_job(pg_engine: Engine) -> None:
    with pg_engine.begin() as conn:
        assert jobq.retry_dead(conn, now=0.0, job_ids=[2**31, 2**63 - 1]) == 0
        assert jobq.retry_dead(conn, now=0.0, job_ids=[1, 2**31]) == 0  # no dead job 1 either
