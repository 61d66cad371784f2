"""`memoryd status` shows the vector index in one line: ready, opening, failed, or nothing."""

from __future__ import annotations

from memoryd.statusview import vector_index_line

READY = {"ready": True, "graphs": 3, "vectors_in_graphs": 250000, "behind": 0, "min_rows": 20000,
         "ef": 256, "error": None, "saved_log_id": 9}


def test_a_ready_index_names_its_graphs_and_vectors() -> None:
    line = vector_index_line(READY)
    assert line is not None
    assert line.plain == "vector index: ready; 3 graph(s) of owners with 20,000+ vectors, 250,000 vectors"


def test_an_opening_index_says_what_answers_meanwhile_and_what_is_left() -> None:
    line = vector_index_line({**READY, "ready": False, "behind": 12})
    assert line is not None  # a daemon from before the fallback field: SQLite's exact scan
    assert "opening (searches use the exact scan meanwhile)" in line.plain
    assert "12 changes to apply" in line.plain
    line = vector_index_line({**READY, "ready": False, "fallback": "pgvector's HNSW index"})
    assert line is not None and "opening (searches use pgvector's HNSW index meanwhile)" in line.plain


def test_a_failed_index_says_what_to_run() -> None:
    line = vector_index_line({**READY, "error": "OSError: disk full"})
    assert line is not None
    assert "failed (OSError: disk full)" in line.plain and "memoryd store reindex" in line.plain


def test_no_index_no_line() -> None:
    assert vector_index_line(None) is None and vector_index_line({}) is None


def test_owners_split_into_several_graphs_say_how_many_graphs() -> None:
    line = vector_index_line({**READY, "graphs": 2, "parts": 7})
    assert line is not None
    assert line.plain.startswith("vector index: ready; 7 graph(s) of 2 owner(s) with 20,000+ vectors,")


def test_owners_scanned_flat_say_how_many_vectors() -> None:
    line = vector_index_line({**READY, "graphs": 1, "parts": 2, "vectors_in_graphs": 150000,
                              "flat_owners": 1, "vectors_scanned_flat": 1000000})
    assert line is not None
    assert line.plain == ("vector index: ready; 2 graph(s) of 1 owner(s) with 20,000+ vectors, "
                          "150,000 vectors; 1,000,000 vectors of 1 owner(s) scanned flat")
    # A daemon from before flat owners says nothing of them.
    assert "flat" not in vector_index_line(READY).plain  # type: ignore[union-attr]
