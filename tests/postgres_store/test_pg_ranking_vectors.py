"""tests/unit/test_ranking_vectors.py's checks on PostgreSQL: the pool's stored vectors read by
seq (pgvector's binary form), and the learned ranking using them inside a hybrid search."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from tests.unit.test_ranking_vectors import (
    check_a_search_ranks_the_statement_said_again_later_below_it,
    check_stored_reads_the_vectors_of_the_seqs_asked,
)

pytestmark = pytest.mark.postgres


def test_stored_reads_the_vectors_of_the_seqs_asked(pg_engine: Engine) -> None:
    check_stored_reads_the_vectors_of_the_seqs_asked(pg_engine)


def test_a_search_puts_the_statement_said_again_later_below_it(pg_engine: Engine) -> None:
    check_a_search_ranks_the_statement_said_again_later_below_it(pg_engine, like=True)


def test_control_unlike_vectors_leave_the_older_statement_first(pg_engine: Engine) -> None:
    check_a_search_ranks_the_statement_said_again_later_below_it(pg_engine, like=False)
