"""`memoryd status` shows the lexical index in one line: not needed yet, opening, ready, failed."""

from __future__ import annotations

from memoryd.statusview import lexical_index_line

READY = {"state": "ready", "ready": True, "shards": 11, "docs": 1000000, "behind": 0, "rebuilding": 0,
         "min_rows": 200000, "shard_rows": 100000, "error": None}


def test_a_ready_index_names_its_shards_and_memories() -> None:
    line = lexical_index_line(READY)
    assert line is not None
    assert line.plain == "lexical index: ready; 11 shard(s), 1,000,000 memories"


def test_a_ready_index_says_what_is_left_to_apply_and_to_rebuild() -> None:
    line = lexical_index_line({**READY, "behind": 40, "rebuilding": 1})
    assert line is not None
    assert "40 changes to apply" in line.plain and "1 shard(s) to rebuild after an erasure" in line.plain


def test_a_small_store_says_when_the_index_will_be_built() -> None:
    line = lexical_index_line({**READY, "state": "waiting", "ready": False, "shards": 0, "docs": 0})
    assert line is not None
    assert line.plain == ("lexical index: not needed yet (FTS5 answers; built once 200,000 memories "
                          "are active, looked at every minute)")


def test_on_postgresql_the_line_names_what_answers_there() -> None:
    line = lexical_index_line({**READY, "state": "opening", "ready": False,
                               "fallback": "PostgreSQL's tsvector search"})
    assert line is not None
    assert line.plain == "lexical index: opening (searches use PostgreSQL's tsvector search meanwhile)"


def test_an_opening_index_says_fts5_answers_meanwhile() -> None:
    line = lexical_index_line({**READY, "state": "opening", "ready": False})
    assert line is not None and "opening (searches use FTS5 meanwhile)" in line.plain


def test_a_failed_index_says_what_to_run() -> None:
    line = lexical_index_line({**READY, "state": "failed", "ready": False, "error": "OSError: disk full"})
    assert line is not None
    assert "failed (OSError: disk full)" in line.plain and "memoryd store reindex" in line.plain


def test_no_index_no_line() -> None:
    assert lexical_index_line(None) is None and lexical_index_line({}) is None
